"""`tailgate monitor --serve`: the probe loop and the dashboard over its store, in one process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from conftest import SimFactory
from tailgate.monitor.command import MonitorOptions, monitor_main


async def test_serve_shows_the_dashboard_while_probing(sim: SimFactory, tmp_path: Path) -> None:
    """--serve prints the dashboard URL, serves /dashboard and /healthz, probes, and stops cleanly."""
    provider = await sim("instant")
    config = tmp_path / "gw.yaml"
    config.write_text(
        f"providers:\n  p: {{base_url: '{provider.url}'}}\nmodels:\n  m:\n    routes: [{{provider: p, model: up}}]\n"
    )
    lines: list[str] = []
    probed = asyncio.Event()

    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("round 0"):
            probed.set()

    stop = asyncio.Event()
    options = MonitorOptions(config=config, db=tmp_path / "s.db", serve=True, port=0, interval_s=3600)
    task = asyncio.create_task(monitor_main(stop, options, echo))
    async with asyncio.timeout(10):
        await probed.wait()
    (url,) = [line.removeprefix("dashboard: ") for line in lines if line.startswith("dashboard: ")]
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as resp:
            assert resp.status == 200
            assert "text/html" in resp.headers["Content-Type"]
        async with session.get(url.replace("/dashboard", "/healthz")) as resp:
            assert await resp.json() == {"status": "ok"}
        async with session.get(url + "/api/leaderboard") as resp:
            assert resp.status == 200
    stop.set()
    assert await asyncio.wait_for(task, 10) == 0
    assert any(line.startswith("round 0: 3 probes, 3 ok") for line in lines), lines
