"""The monitor's tables in the store: migration 2, SampleStore writes, reads, retention."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tailgate.ledger import open_db
from tailgate.ledger.samples import (
    Sample,
    SampleStore,
    TrafficMinute,
    delete_before,
    insert_samples,
    read_samples,
    read_traffic,
    tok_s,
)
from tailgate.ledger.schema import schema_version

T0 = 1_790_000_000.0


def _sample(i: int, **changes: object) -> Sample:
    fields: dict[str, object] = {
        "ts": T0 + i,
        "provider": "a",
        "model": "m",
        "workload": "long",
        "status": 200,
        "error_class": None,
        "ttft_ms": 100.0 + i,
        "e2e_ms": 2100.0 + i,
        "output_tokens": 201,
        "tok_s": tok_s(201, 100.0 + i, 2100.0 + i),
        "accuracy_ok": None,
    }
    fields.update(changes)
    return Sample(**fields)  # type: ignore[arg-type]


def test_migration_2_creates_the_monitor_tables_and_indexes(tmp_path: Path) -> None:
    """A fresh store is at version 2 with samples, traffic_minutes and their indexes."""
    with closing(open_db(tmp_path / "s.db")) as conn:
        assert schema_version(conn) >= 2
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}
    assert {"samples", "traffic_minutes", "samples_ts", "samples_pm_ts", "traffic_minutes_pm"} <= names


def test_tok_s_follows_the_design_definition() -> None:
    """tok/s = (output_tokens − 1) / (E2E − TTFT); undefined for < 2 tokens or no decode time."""
    assert tok_s(201, 1000.0, 3000.0) == pytest.approx(100.0)
    assert tok_s(1, 1000.0, 3000.0) is None
    assert tok_s(10, 1000.0, 1000.0) is None
    assert tok_s(10, None, 1000.0) is None


async def test_store_writes_what_it_was_given_and_reads_it_back(tmp_path: Path) -> None:
    """Samples (accuracy booleans, NULL statuses included) and traffic rows survive a round trip exactly."""
    path = tmp_path / "s.db"
    samples = [
        _sample(0),
        _sample(1, workload="accuracy", accuracy_ok=True),
        _sample(2, workload="accuracy", accuracy_ok=False),
        _sample(3, status=None, error_class="connect", ttft_ms=None, output_tokens=None, tok_s=None),
    ]
    traffic = TrafficMinute(T0, "a", "m", 10, 1, 900, 450.5, 9, '{"x":1}', None)
    async with SampleStore(path) as store:
        for s in samples:
            store.add(s)
        store.add_traffic(traffic)
        assert store.pending == 5
        assert await store.flush()
        assert (store.pending, store.written) == (0, 5)
    with closing(open_db(path)) as conn:
        assert read_samples(conn) == samples
        assert read_samples(conn, since=T0 + 1, until=T0 + 2) == samples[1:3]
        assert read_samples(conn, provider="b") == []
        assert read_traffic(conn) == [traffic]
        assert conn.execute("SELECT accuracy_ok FROM samples ORDER BY id").fetchall() == [(None,), (1,), (0,), (None,)]


async def test_a_locked_database_keeps_the_rows_for_the_next_flush(tmp_path: Path) -> None:
    """While another connection holds the write lock, flush() fails, keeps the rows and writes them later."""
    path = tmp_path / "s.db"
    store = SampleStore(path, busy_timeout=0.05)
    await store.start()
    blocker = open_db(path)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        store.add(_sample(0))
        assert not await store.flush()
        assert (store.pending, store.write_errors) == (1, 1)
        blocker.execute("ROLLBACK")
        assert await store.flush()
        assert store.written == 1
    finally:
        blocker.close()
        await store.close()
    with closing(open_db(path)) as conn:
        assert read_samples(conn) == [_sample(0)]


async def test_retention_deletes_only_older_rows(tmp_path: Path) -> None:
    """prune(before) removes samples and traffic minutes older than the cut-off and keeps the rest."""
    path = tmp_path / "s.db"
    async with SampleStore(path) as store:
        for i in range(10):
            store.add(_sample(i * 100))
            store.add_traffic(TrafficMinute(T0 + i * 100, "a", "m", 1, 0, 10, 0.0, 0))
        await store.flush()
        assert await store.prune(T0 + 500) == (5, 5)
        assert await store.prune(T0 + 500) == (0, 0)
    with closing(open_db(path)) as conn:
        assert [s.ts for s in read_samples(conn)] == [T0 + i * 100 for i in range(5, 10)]
        assert [t.minute for t in read_traffic(conn)] == [T0 + i * 100 for i in range(5, 10)]


def test_sync_helpers_insert_and_delete(tmp_path: Path) -> None:
    """insert_samples / delete_before work on any open_db connection (one transaction each)."""
    with closing(open_db(tmp_path / "s.db")) as conn:
        insert_samples(conn, [_sample(i) for i in range(3)])
        assert delete_before(conn, T0 + 2) == (2, 0)
        assert [s.ts for s in read_samples(conn)] == [T0 + 2]


async def test_max_pending_drops_the_oldest_rows(tmp_path: Path) -> None:
    """Past max_pending buffered rows the oldest go, counted in dropped (memory stays bounded)."""
    async with SampleStore(tmp_path / "s.db", max_pending=3) as store:
        for i in range(5):
            store.add(_sample(i))
        assert (store.pending, store.dropped) == (3, 2)
        await store.flush()
    with closing(open_db(tmp_path / "s.db")) as conn:
        assert [s.ts for s in read_samples(conn)] == [T0 + 2, T0 + 3, T0 + 4]


def test_a_bad_sample_never_reaches_the_table(tmp_path: Path) -> None:
    """NOT NULL columns are enforced by the schema itself."""
    with closing(open_db(tmp_path / "s.db")) as conn, pytest.raises(sqlite3.IntegrityError):
        insert_samples(conn, [_sample(0, provider=None)])
