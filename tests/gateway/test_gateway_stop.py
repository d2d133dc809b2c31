"""A ``tailgate serve`` process stops by itself even when its stores stop answering (docs/gateway.md,
"Stopping"): each closing step is bounded, the one that overran is named in the log, and the process exits
(status 1) instead of waiting for ever on a thread blocked in a store call."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import aiohttp
import psycopg
import pytest

from conftest import SimFactory
from fleet_store import Replica, fleet_config
from pg_cluster import PostgresCluster
from tailgate.gateway.process.serve import STOP_GRACE_S
from tailgate.state.server import RedisServer

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.usefixtures("redis_binary"),
]

DRAIN_S = 2.0


async def test_a_replica_whose_stores_stop_answering_exits_and_names_the_step(
    tmp_path: Path, sim: SimFactory, pg_cluster: PostgresCluster
) -> None:
    """Its PostgreSQL holds every table locked (as a migration or an operator's VACUUM FULL would) and its Redis
    is paused (SIGSTOP: connections open, nothing answered) when the replica gets SIGTERM. Before the close
    steps were bounded this replica never exited: the spool shipper's close waited for its loop, blocked in an
    INSERT. Now the shipper's step is named as overrun and the process leaves with status 1 by itself."""
    pg_url = pg_cluster.fresh_database("stop_bounded")
    provider = await sim("instant", models=("m",))
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with RedisServer() as redis:
        config = fleet_config(tmp_path, 0, provider.url, pg_url, redis_url=redis.url, namespace="stop")
        replica = Replica(config, tmp_path / "replica.log", drain_timeout=DRAIN_S)
        locker: psycopg.Connection | None = None
        try:
            url = await replica.ready()
            async with aiohttp.ClientSession() as session:
                async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200
                locker = psycopg.connect(pg_url)  # one transaction: the locks are held until it ends
                tables = [t for (t,) in locker.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
                assert "requests" in tables
                for table in tables:
                    locker.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')
                for _ in range(3):  # rows the shipper now tries to INSERT, and waits on the lock
                    async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                        assert resp.status == 200
            assert redis.proc is not None
            os.kill(redis.proc.pid, signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                # The promise is DRAIN_S + STOP_GRACE_S; a busy machine may add to it, so the test only fails when
                # the process does not exit by itself at all (well past the promise), never on a tight clock.
                code = replica.stop(timeout=DRAIN_S + STOP_GRACE_S + 40)
                took = time.monotonic() - t0
            finally:
                os.kill(redis.proc.pid, signal.SIGCONT)
        finally:
            if locker is not None:
                locker.close()
            if replica.proc.poll() is None:
                replica.proc.kill()
                replica.proc.wait()
    log = replica.log_path.read_text()
    print(f"stopped by itself in {took:.1f}s (bound {DRAIN_S + STOP_GRACE_S:g}s), status {code}\n{log}")
    assert code == 1, log  # a step overran: not a clean stop, and it says so
    assert "stopping: ledger shipper (shipper.close) did not finish within 5s; going on without it" in log
    assert "ledger flushed: 4 rows written, 0 dropped" in log  # the steps after it still ran
    assert "exiting with status 1" in log
