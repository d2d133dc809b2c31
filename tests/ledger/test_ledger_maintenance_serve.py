"""The store's housekeeping (``ledger/maintenance.py``) in a running ``tailgate serve``: its ticks roll new
request rows up into ``usage_hourly`` and, at every retention tick, delete raw rows older than
``ledger.retention`` once rolled up and roll-ups older than ``ledger.rollup_retention`` — while the gateway
serves, not only at start. The intervals are the config's (``ledger.rollup_interval``,
``ledger.retention_interval``), made short here; every wait is a poll with a deadline."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from conftest import SimFactory
from serve_process import running_serve
from tailgate.ledger.usage import hour_start

DAY = 86400.0
DEADLINE_S = 20.0  # many ticks of 0.2 s, on a busy machine


def _config(tmp_path: Path, upstream: str, db: Path) -> Path:
    data: dict[str, Any] = {
        "providers": {"p": {"base_url": upstream}},
        "models": {"m": {"routes": [{"provider": "p", "model": "m"}]}},
        "routing": {"probes": {"enabled": False}},
        "ledger": {
            "path": str(db),
            "flush_interval": 0.05,
            "rollup_interval": 0.2,
            "retention_interval": 0.2,
            "retention": 30 * DAY,
            "rollup_retention": 400 * DAY,
        },
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _query(db: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db, timeout=10) as conn:
        return conn.execute(sql, args).fetchall()


async def _until(check: Callable[[], bool], what: str) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after DEADLINE_S."""
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > DEADLINE_S:
            pytest.fail(f"{what}: not within {DEADLINE_S}s")
        await asyncio.sleep(0.05)


async def _chat(session: aiohttp.ClientSession, url: str, rid: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}
    async with session.post(f"{url}/chat/completions", json=body, headers={"x-request-id": rid}) as r:
        assert r.status == 200, await r.text()


def _copy_row(db: Path, template_rid: str, rid: str, ts: float) -> None:
    """A request row like ``template_rid``'s but with its own id and the arrival time ``ts``, written straight
    into the store (as a spool replayed after an outage, or a row from long ago, would stand in it)."""
    with sqlite3.connect(db, timeout=10) as conn:
        cols = [c[1] for c in conn.execute("PRAGMA table_info(requests)") if c[1] not in ("id", "ts", "request_id")]
        names = ", ".join(cols)
        conn.execute(
            f"INSERT INTO requests (ts, request_id, {names}) SELECT ?, ?, {names} FROM requests WHERE request_id = ?",  # noqa: S608
            (ts, rid, template_rid),
        )


@pytest.mark.timeout(90)
async def test_a_running_gateway_rolls_up_each_tick_and_applies_retention_while_it_serves(
    sim: SimFactory, tmp_path: Path
) -> None:
    """Requests served appear in usage_hourly; rows written later — raw ones 40 d old, a roll-up 401 d old — are
    deleted at a later tick (the old raw row rolled up into its own hour first), while a 29 d old row stays."""
    provider = await sim("instant", models=("m",))
    db = tmp_path / "store.db"
    now = time.time()
    with running_serve(_config(tmp_path, provider.url, db)) as gw:
        async with aiohttp.ClientSession() as session:
            await _chat(session, gw.url, "live-1")
            await _chat(session, gw.url, "live-2")

            def rolled_live() -> bool:
                return _query(db, "SELECT SUM(requests) FROM usage_hourly WHERE hour >= ?", (hour_start(now),)) == [
                    (2,)
                ]

            await _until(rolled_live, "a roll-up of the two requests served")
            (tokens,) = _query(db, "SELECT SUM(prompt_tokens), SUM(output_tokens) FROM requests")
            rolled = _query(
                db, "SELECT SUM(input_tokens), SUM(output_tokens) FROM usage_hourly WHERE hour >= ?", (hour_start(now),)
            )
            assert rolled == [tokens]

            # Written while the gateway runs, after its ticks have already rolled up and applied retention.
            old_ts, kept_ts = now - 40 * DAY, now - 29 * DAY
            _copy_row(db, "live-1", "old", old_ts)
            _copy_row(db, "live-1", "kept", kept_ts)
            with sqlite3.connect(db, timeout=10) as conn:
                conn.execute(
                    "INSERT INTO usage_hourly (hour, key_id, alias, provider, requests, errors, input_tokens, "
                    "output_tokens, cost) VALUES (?, '', 'm', 'p', 1, 0, 1, 1, 0)",
                    (hour_start(now - 401 * DAY),),
                )
            # Retention keeps the row at the watermark (its id must not be handed out again): one more request
            # puts the two written rows below it.
            await _chat(session, gw.url, "live-3")

            def old_gone() -> bool:
                return _query(db, "SELECT 1 FROM requests WHERE request_id = 'old'") == []

            await _until(old_gone, "the 40-day-old raw row deleted")
            await _until(
                lambda: _query(db, "SELECT 1 FROM usage_hourly WHERE hour < ?", (now - 400 * DAY,)) == [],
                "the 401-day-old roll-up deleted",
            )
        assert gw.proc.poll() is None  # still serving

    assert _query(db, "SELECT request_id FROM requests ORDER BY id") == [
        ("live-1",),
        ("live-2",),
        ("kept",),
        ("live-3",),
    ]
    # The deleted row was counted before it went: its hour holds it, and the kept row's hour holds that one.
    before = dict(_query(db, "SELECT hour, requests FROM usage_hourly WHERE hour < ?", (hour_start(now),)))
    assert before == {hour_start(old_ts): 1, hour_start(kept_ts): 1}
    assert _query(db, "SELECT SUM(requests) FROM usage_hourly WHERE hour >= ?", (hour_start(now),)) == [(3,)]
