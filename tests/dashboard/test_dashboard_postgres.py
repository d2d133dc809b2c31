"""The dashboard over the fleet's PostgreSQL store answers exactly as over the SQLite store with the same rows
(a real PostgreSQL; `mount(app, "postgresql://…")`)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from dashboard_support import fill_demo_store, fill_store

from pg_cluster import PostgresCluster
from tailgate.dashboard import mount
from tailgate.ledger.row import COLUMNS
from tailgate.ledger.samples import Sample, TrafficMinute
from tailgate.ledger.store import open_store

NOW = 1_796_220_000.0 + 1234.5
PATHS = (
    "/dashboard/api/catalog?window=7d",
    "/dashboard/api/leaderboard?window=7d&sort=tok_s",
    "/dashboard/api/leaderboard?window=1h&model=up-secondary",
    "/dashboard/api/series?provider=primary&model=up-primary&window=24h",
    "/dashboard/api/heatmap?window=7d&tz=60",
    "/dashboard/api/compare?window=24h",
    "/dashboard/api/series?provider=secondary&model=up-secondary&window=15m",
    "/dashboard/api/catalog?window=15m",
    "/dashboard/api/compare?window=15m",
    "/dashboard/api/usage?by=provider&since=7d",
    "/dashboard/api/keys",
)


def _close(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), where
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            if k != "now":
                _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


async def _serve(target: str | Path) -> tuple[web.AppRunner, str]:
    app = web.Application()
    mount(app, target, clock=lambda: NOW)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def test_every_view_is_the_same_on_postgres(tmp_path: Path, pg_cluster: PostgresCluster) -> None:
    path = tmp_path / "tailgate.db"
    samples, traffic = fill_store(path, NOW)
    requests = await fill_demo_store(path, NOW, minutes=False)  # the 15m views read the requests rows
    url = pg_cluster.fresh_database("dashboard")
    with open_store(url) as conn, conn.transaction():
        conn.executemany(
            f"INSERT INTO requests ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",  # noqa: S608
            [tuple(int(v) if isinstance(v, bool) else v for v in (getattr(r, c) for c in COLUMNS)) for r in requests],
        )
        for table, rows, cls in (("samples", samples, Sample), ("traffic_minutes", traffic, TrafficMinute)):
            cols = [f.name for f in dataclasses.fields(cls)]
            conn.executemany(
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",  # noqa: S608
                [tuple(int(v) if isinstance(v, bool) else v for v in dataclasses.astuple(r)) for r in rows],
            )
    runners: list[web.AppRunner] = []
    try:
        sqlite_runner, sqlite_url = await _serve(path)
        pg_runner, pg_url = await _serve(url)
        runners = [sqlite_runner, pg_runner]
        async with aiohttp.ClientSession() as session:
            for p in PATHS:
                answers = []
                for base in (sqlite_url, pg_url):
                    async with session.get(base + p) as resp:
                        assert resp.status == 200, (base, p, await resp.text())
                        answers.append(json.loads(await resp.text()))
                _close(answers[0], answers[1], p)
            assert answers  # the loop ran
    finally:
        for runner in runners:
            await runner.cleanup()
