"""Crash safety and store faults with a real ``tailgate serve`` process in front of a real simulator.

- SIGKILL under load: the ledger loses at most the rows of the last second (measured against the
  client's own record of answered requests), and a restart on the same store finds it consistent.
- The store's disk full (a file-size limit on the gateway process): requests are still served; the
  ledger's write errors and pending rows show on /metrics.
- The store locked by another writer: requests are still served; the rows land once the lock goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from conftest import GatewayHandle, SimFactory
from serve_process import ServeProcess
from tailgate.ledger import read_rows

ALIAS = "m"
MSG = [{"role": "user", "content": "x"}]


@pytest.fixture
def serve() -> Iterator[Callable[..., ServeProcess]]:
    made: list[ServeProcess] = []

    def factory(config: Path, preexec: Callable[[], None] | None = None) -> ServeProcess:
        made.append(ServeProcess(config, "--drain-timeout", "5", preexec_fn=preexec))
        return made[-1]

    yield factory
    for s in made:
        s.stop(signal.SIGKILL)


def _config(tmp_path: Path, upstream: str, db: Path, **extra: Any) -> Path:
    data: dict[str, Any] = {
        "providers": {"p": {"base_url": upstream}},
        "models": {ALIAS: {"routes": [{"provider": "p", "model": "m"}]}},
        "routing": {"probes": {"enabled": False}},
        "ledger": {"path": str(db)},
        **extra,
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def _load(
    url: str, answered: dict[str, float], failed: list[tuple[float, str]], stop: asyncio.Event, concurrency: int = 16
) -> None:
    """Closed-loop load; ``answered[request_id]`` = wall time the client had the whole 200 answer (a stream:
    through ``data: [DONE]``); every other outcome goes to ``failed`` as (wall time, what), so errors before
    the kill are seen, not skipped. A worker stops at its first failure (after the kill: the gateway died)."""
    counter = iter(range(10**9))  # shared by the workers: one id per request

    async def worker(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            i = next(counter)
            rid = f"r{i}"
            stream = i % 2 == 0
            body = {"model": ALIAS, "messages": MSG, "max_tokens": 2, "stream": stream}
            try:
                async with session.post(f"{url}/chat/completions", json=body, headers={"x-request-id": rid}) as r:
                    raw = await r.read()
                    whole = r.status == 200 and (not stream or raw.rstrip().endswith(b"data: [DONE]"))
            except (aiohttp.ClientError, OSError) as exc:
                failed.append((time.time(), f"{rid}: {type(exc).__name__}: {exc}"))
                return
            if not whole:
                failed.append((time.time(), f"{rid}: status {r.status}: {raw[-300:]!r}"))
                return
            answered[rid] = time.time()

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))


def _integrity(db: Path) -> str:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


@pytest.mark.timeout(90)
async def test_sigkill_under_load_loses_at_most_the_last_second(
    tmp_path: Path, sim: SimFactory, serve: Callable[..., ServeProcess]
) -> None:
    """SIGKILL during mixed stream/non-stream load: every request answered more than 1 s before the kill
    is in the ledger; the store passes an integrity check and a restarted gateway serves and writes on it."""
    upstream = await sim("instant")
    db = tmp_path / "ledger.db"
    config = _config(tmp_path, upstream.url, db)
    gw = serve(config)
    answered: dict[str, float] = {}
    failed: list[tuple[float, str]] = []
    stop = asyncio.Event()
    load = asyncio.create_task(_load(gw.url, answered, failed, stop))
    await asyncio.sleep(3.0)
    assert len(answered) > 50
    assert failed == []  # every request before the kill was answered in full
    t_kill = time.time()
    assert gw.stop(signal.SIGKILL) == -signal.SIGKILL
    stop.set()
    await asyncio.wait_for(load, 10)
    assert [f for f in failed if f[0] < t_kill] == []
    present = {r.request_id for r in read_rows(db)}
    lost = {rid: t for rid, t in answered.items() if rid not in present}
    window = t_kill - min(lost.values()) if lost else 0.0
    assert window <= 1.0, f"{len(lost)} of {len(answered)} answered rows lost, the oldest {window:.3f}s before the kill"
    assert _integrity(db) == "ok"
    again = serve(config)  # restart on the same store
    async with aiohttp.ClientSession() as session:
        body = {"model": ALIAS, "messages": MSG, "max_tokens": 1}
        async with session.post(f"{again.url}/chat/completions", json=body, headers={"x-request-id": "after"}) as r:
            assert r.status == 200
    assert again.stop() == 0
    rows = read_rows(db)
    assert rows[-1].request_id == "after"
    assert _integrity(db) == "ok"


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.timeout(60)
async def test_store_disk_full_keeps_serving_and_says_so(
    tmp_path: Path, sim: SimFactory, serve: Callable[..., ServeProcess]
) -> None:
    """The gateway's file-size limit stops the store growing (EFBIG, SQLite's "disk is full"): requests
    are still answered 200; /metrics shows write errors and rows pending in memory."""
    upstream = await sim("instant")
    db = tmp_path / "ledger.db"
    config = _config(tmp_path, upstream.url, db)
    warm = serve(config)  # create the store at full size first, then restart with no room to grow
    assert warm.stop() == 0
    room = db.stat().st_size + 8192

    def no_room() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (room, resource.RLIM_INFINITY))

    gw = serve(config, no_room)
    body = {"model": ALIAS, "messages": [{"role": "user", "content": "y" * 2000}], "max_tokens": 2}
    async with aiohttp.ClientSession() as session:
        # Rows go to the WAL file, which starts empty: send until it outgrows the limit (the store's size,
        # and so the room left, depends on the schema), bounded by the deadline and a request cap.
        deadline = time.monotonic() + 30
        for i in range(6000):
            async with session.post(f"{gw.url}/chat/completions", json=body, headers={"x-request-id": f"f{i}"}) as r:
                assert r.status == 200
            if i % 200 == 199:
                await asyncio.sleep(0.3)  # a flush interval
                async with session.get(gw.url.removesuffix("/v1") + "/metrics") as r:
                    text = await r.text()
                if _metric(text, "tailgate_ledger_write_errors_total") > 0 or time.monotonic() > deadline:
                    break
    assert _metric(text, "tailgate_ledger_write_errors_total") > 0
    assert _metric(text, "tailgate_ledger_pending_rows") > 0
    gw.stop(signal.SIGKILL)
    assert _integrity(db) == "ok"


@pytest.mark.timeout(60)
async def test_store_locked_keeps_serving_and_rows_land_later(
    tmp_path: Path, sim: SimFactory, gateway: Callable[..., Any]
) -> None:
    """Another process holds the store's write lock: requests are answered; once it lets go, every row lands."""
    upstream = await sim("instant")
    gw: GatewayHandle = await gateway(
        {
            "providers": {"p": {"base_url": upstream.url}},
            "models": {ALIAS: {"routes": [{"provider": "p", "model": "m"}]}},
            "routing": {"probes": {"enabled": False}},
        }
    )
    ledger = gw.gateway.ledger
    assert ledger is not None
    await ledger.flush()
    locker = sqlite3.connect(ledger.path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(30):
                body = {"model": ALIAS, "messages": MSG, "max_tokens": 1}
                async with session.post(
                    f"{gw.url}/chat/completions", json=body, headers={"x-request-id": f"L{i}"}
                ) as r:
                    assert r.status == 200
        for _ in range(100):  # the writer's first attempt fails within its busy timeout (1 s)
            if ledger.write_errors:
                break
            await asyncio.sleep(0.1)
        assert ledger.write_errors > 0
        assert ledger.pending > 0
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    await asyncio.wait_for(ledger.flush(), 15)
    assert {f"L{i}" for i in range(30)} <= {r.request_id for r in read_rows(ledger.path)}
