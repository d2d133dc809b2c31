"""The spool and its shipper against a real PostgreSQL: in order, no row lost, none written twice, through an
outage and through a re-shipped batch; a newer schema refuses to start."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg
import pytest
from ledger_support import make_row

from pg_cluster import PostgresCluster
from tailgate.ledger import SQLiteLedger, open_db
from tailgate.ledger.samples import Sample, SampleStore, TrafficMinute
from tailgate.ledger.schema import SchemaError
from tailgate.ledger.spool import Shipper
from tailgate.ledger.store import open_store


def _pg_rows(url: str) -> tuple[int, int, list[str]]:
    with psycopg.connect(url) as conn:
        total, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT request_id) FROM requests").fetchone()  # type: ignore[misc]
        ids = [r[0] for r in conn.execute("SELECT request_id FROM requests ORDER BY id")]
    return int(total), int(distinct), ids


async def _until(check: object, within: float) -> None:
    deadline = time.monotonic() + within
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def test_outage_loses_nothing_and_duplicates_nothing(tmp_path: Path, own_pg_cluster: PostgresCluster) -> None:
    """PostgreSQL stopped mid-shipping (a cluster of this test's own): every row arrives once, in order."""
    pg_cluster = own_pg_cluster  # stopped and restarted below: never the session's shared cluster
    url = pg_cluster.fresh_database("spool_outage")
    spool = tmp_path / "spool.db"
    async with SQLiteLedger(spool, flush_interval=0.05) as ledger:
        shipper = Shipper(spool, url, interval=0.1, batch=200, max_backoff=0.2)
        await shipper.start()
        try:
            for i in range(1000):
                ledger.record(make_row(i))
            await ledger.flush()
            await _until(lambda: shipper.stats.backlog == 0 and shipper.stats.shipped["requests"] == 1000, 20)
            pg_cluster.stop()
            try:
                for i in range(1000, 2500):
                    ledger.record(make_row(i))
                await ledger.flush()
                await _until(lambda: shipper.stats.errors > 0 and shipper.stats.backlog == 1500, 20)
            finally:
                pg_cluster.start()
            await _until(lambda: shipper.stats.backlog == 0, 30)
        finally:
            await shipper.close()
    total, distinct, ids = _pg_rows(url)
    assert (total, distinct) == (2500, 2500)
    assert ids == [f"req-{i:08d}" for i in range(2500)]  # replayed in order


async def test_a_batch_shipped_twice_is_written_once(tmp_path: Path, pg_url: str) -> None:
    """A replica killed after PostgreSQL committed but before the spool's cursor moved re-ships the batch."""
    spool = tmp_path / "spool.db"
    async with SQLiteLedger(spool) as ledger:
        for i in range(300):
            ledger.record(make_row(i))
    shipper = Shipper(spool, pg_url, interval=60, keep=1e12)
    await shipper.start()
    assert await shipper.ship_now() == 300
    await shipper.close()
    with open_db(spool) as conn:
        conn.execute("UPDATE spool_state SET value = '0' WHERE name = 'shipped:requests'")  # the cursor never moved
    again = Shipper(spool, pg_url, interval=60, keep=1e12)
    await again.start()
    assert await again.ship_now() == 300  # sent again ...
    assert again.stats.shipped["requests"] == 0  # ... and inserted nothing
    await again.close()
    assert _pg_rows(pg_url)[:2] == (300, 300)


async def test_samples_and_traffic_minutes_are_shipped(tmp_path: Path, pg_url: str) -> None:
    spool = tmp_path / "spool.db"
    async with SampleStore(spool) as store:
        store.add(Sample(1.0, "p", "m", "long", 200, None, 10.0, 20.0, 5, 1.0, None))
        store.add_traffic(TrafficMinute(60.0, "p", "m", 3, 0, 9, 1.0, 1, None, None))
        await store.flush()
    shipper = Shipper(spool, pg_url)
    await shipper.start()
    await shipper.ship_now()
    await shipper.close()
    with open_store(pg_url) as conn:
        assert conn.execute("SELECT provider, workload, tok_s FROM samples").fetchall() == [("p", "long", 1.0)]
        assert conn.execute("SELECT minute, requests FROM traffic_minutes").fetchall() == [(60.0, 3)]


async def test_two_spools_have_distinct_origins(tmp_path: Path, pg_url: str) -> None:
    """Two replicas' row ids collide; their origins keep the rows apart."""
    for name in ("a.db", "b.db"):
        async with SQLiteLedger(tmp_path / name) as ledger:
            ledger.record(make_row(0))
        shipper = Shipper(tmp_path / name, pg_url)
        await shipper.start()
        await shipper.ship_now()
        await shipper.close()
    assert _pg_rows(pg_url)[0] == 2


async def test_a_newer_schema_refuses_to_start(tmp_path: Path, pg_url: str) -> None:
    with open_store(pg_url) as conn:
        conn.execute("INSERT INTO schema_version VALUES (?, ?, ?)", (42, 0.0, "future"))
    shipper = Shipper(tmp_path / "spool.db", pg_url)
    with pytest.raises(SchemaError, match="42 is newer"):
        await shipper.start()


async def test_unreachable_postgres_at_start_only_delays_shipping(tmp_path: Path) -> None:
    spool = tmp_path / "spool.db"
    async with SQLiteLedger(spool) as ledger:
        ledger.record(make_row(0))
    shipper = Shipper(spool, "postgresql://nobody:secret-pw@127.0.0.1:1/x", connect_timeout=1)
    await shipper.start()
    assert shipper.stats.errors == 1
    assert shipper.stats.last_error is not None
    assert "secret-pw" not in shipper.stats.last_error
    await shipper.close()


async def test_a_row_postgres_refuses_does_not_block_the_spool(tmp_path: Path, pg_url: str) -> None:
    """A value PostgreSQL cannot take (a NUL in text: SQLite stores it) is skipped and counted; the rest ships."""
    spool = tmp_path / "spool.db"
    async with SampleStore(spool) as store:
        for requests, model in ((3, "m"), (5, "m\x00"), (7, "m")):
            store.add_traffic(TrafficMinute(60.0, "p", model, requests, 0, 9, 1.0, 1, None, None))
        await store.flush()
    shipper = Shipper(spool, pg_url)
    await shipper.start()
    await shipper.ship_now()
    await shipper.close()
    assert shipper.stats.rejected == 1
    assert shipper.stats.backlog == 0
    with open_store(pg_url) as conn:
        assert sorted(r[0] for r in conn.execute("SELECT requests FROM traffic_minutes").fetchall()) == [3, 7]
