"""SQLiteLedger: batched writes off the event loop, flush and close, retries, and what counts as dropped."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any, cast

import pytest
from ledger_support import make_row

from tailgate.ledger import LedgerRow, SQLiteLedger, open_db, read_rows


def _count(path: Path) -> int:
    with closing(open_db(path)) as conn:
        (n,) = conn.execute("SELECT COUNT(*) FROM requests").fetchone()
    return int(n)


async def test_rows_round_trip_with_every_field(tmp_path: Path) -> None:
    """Every field, None values and both booleans included, reads back equal to what was recorded."""
    full = make_row(1, stream=True, tokens_estimated=True, cost=1.5e-7, ts=1_749_999_999.123456)
    empty = make_row(
        2,
        key_id=None,
        provider=None,
        upstream_model=None,
        traffic_class=None,
        stream=False,
        status=503,
        outcome="no_route",
        attempts=0,
        prompt_tokens=None,
        output_tokens=None,
        tokens_estimated=False,
        ttft_ms=None,
        e2e_ms=None,
        overhead_ms=None,
        cost=None,
    )
    async with SQLiteLedger(tmp_path / "t.db") as ledger:
        ledger.record(full)
        ledger.record(empty)
        await ledger.flush()
        assert (ledger.written, ledger.pending, ledger.dropped) == (2, 0, 0)
    rows = read_rows(tmp_path / "t.db")
    assert rows == [full, empty]
    assert type(rows[0].stream) is bool
    assert type(rows[1].tokens_estimated) is bool


async def test_ten_thousand_rows_take_few_transactions(tmp_path: Path) -> None:
    """10k rows recorded in a burst all land, in about rows / batch_size transactions."""
    n = 10_000
    async with SQLiteLedger(tmp_path / "t.db", batch_size=500) as ledger:
        for i in range(n):
            ledger.record(make_row(i))
        assert ledger.pending == n  # record() only appended: nothing was written yet
        await ledger.flush()
        assert ledger.written == n
        assert ledger.transactions <= n // 500 + 1
    assert _count(tmp_path / "t.db") == n


async def test_slow_trickle_is_batched_by_time(tmp_path: Path) -> None:
    """Rows arriving one by one are written together once per flush_interval, not one transaction each."""
    async with SQLiteLedger(tmp_path / "t.db", flush_interval=0.05) as ledger:
        for i in range(40):
            ledger.record(make_row(i))
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.15)
        assert ledger.written == 40
        assert ledger.transactions <= 6


async def test_full_batch_is_written_before_the_interval(tmp_path: Path) -> None:
    """A full batch wakes the writer at once; it does not wait for flush_interval."""
    async with SQLiteLedger(tmp_path / "t.db", batch_size=100, flush_interval=3600) as ledger:
        for i in range(100):
            ledger.record(make_row(i))
        for _ in range(200):
            if ledger.written == 100:
                break
            await asyncio.sleep(0.01)
        assert ledger.written == 100


async def test_close_flushes_everything_and_is_idempotent(tmp_path: Path) -> None:
    """close() writes every pending row even with a long interval; a second close is a no-op."""
    ledger = SQLiteLedger(tmp_path / "t.db", flush_interval=3600, batch_size=10_000)
    await ledger.start()
    for i in range(1234):
        ledger.record(make_row(i))
    assert ledger.written == 0
    await ledger.close()
    assert (ledger.written, ledger.pending, ledger.dropped) == (1234, 0, 0)
    await ledger.close()
    await asyncio.gather(ledger.close(), ledger.close())
    assert _count(tmp_path / "t.db") == 1234


async def test_record_after_close_is_counted_as_dropped(tmp_path: Path) -> None:
    """A row that arrives after close() is not silently lost: it shows in dropped."""
    ledger = SQLiteLedger(tmp_path / "t.db")
    await ledger.start()
    await ledger.close()
    ledger.record(make_row(1))
    assert (ledger.written, ledger.pending, ledger.dropped) == (0, 0, 1)


async def test_over_max_pending_rows_are_refused_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Past max_pending record() refuses (never blocks or raises), counts the drop and logs it once."""
    async with SQLiteLedger(tmp_path / "t.db", max_pending=100, batch_size=1000, flush_interval=3600) as ledger:
        with caplog.at_level(logging.WARNING, logger="tailgate.ledger"):
            for i in range(150):
                ledger.record(make_row(i))
        assert (ledger.pending, ledger.dropped) == (100, 50)
        assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 1
    assert _count(tmp_path / "t.db") == 100


async def test_reader_works_while_the_writer_is_active(tmp_path: Path) -> None:
    """read_rows in another thread sees a growing, consistent ledger while batches commit."""
    path = tmp_path / "t.db"
    seen: list[int] = []
    async with SQLiteLedger(path, batch_size=50, flush_interval=0.005) as ledger:
        for burst in range(20):
            for i in range(100):
                ledger.record(make_row(burst * 100 + i))
            await asyncio.sleep(0.002)
            seen.append(len(await asyncio.to_thread(read_rows, path)))
        await ledger.flush()
        assert len(await asyncio.to_thread(read_rows, path)) == 2000
    assert seen == sorted(seen)
    assert 0 < seen[-1] <= 2000
    assert all(n % 50 == 0 for n in seen)  # whole batches only: each one is one transaction


async def test_locked_database_is_retried_and_rows_then_land(tmp_path: Path) -> None:
    """While another connection holds the write lock writes fail and are counted; the rows stay pending, then land."""
    path = tmp_path / "t.db"
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        async with SQLiteLedger(path, busy_timeout=0.01, max_backoff=0.05) as ledger:
            blocker.execute("BEGIN IMMEDIATE")
            for i in range(300):
                ledger.record(make_row(i))
            flushing = asyncio.ensure_future(ledger.flush())
            await asyncio.sleep(0.3)
            assert not flushing.done()
            assert ledger.write_errors >= 2
            assert (ledger.written, ledger.pending) == (0, 300)
            assert isinstance(ledger.last_error, sqlite3.OperationalError)
            blocker.execute("ROLLBACK")
            await asyncio.wait_for(flushing, 5)
            assert (ledger.written, ledger.pending, ledger.dropped) == (300, 0, 0)
    finally:
        blocker.close()
    assert [r.request_id for r in read_rows(path)] == [make_row(i).request_id for i in range(300)]


async def test_close_gives_up_after_close_timeout_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A database that stays locked does not hang close(): after close_timeout the rows count as dropped, logged."""
    path = tmp_path / "t.db"
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        ledger = SQLiteLedger(path, busy_timeout=0.01, max_backoff=0.05, close_timeout=0.2)
        await ledger.start()
        blocker.execute("BEGIN IMMEDIATE")
        for i in range(10):
            ledger.record(make_row(i))
        started = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="tailgate.ledger"):
            await ledger.close()
        assert time.monotonic() - started < 2
        assert (ledger.written, ledger.pending, ledger.dropped) == (0, 0, 10)
        assert any("10 rows could not be written" in r.getMessage() for r in caplog.records)
    finally:
        blocker.close()


async def test_a_bad_row_is_rejected_without_holding_up_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A row the database refuses (NULL alias) is dropped and logged; the good rows of its batch are stored."""
    bad = make_row(2, alias=cast(Any, None))
    async with SQLiteLedger(tmp_path / "t.db") as ledger:
        with caplog.at_level(logging.ERROR, logger="tailgate.ledger"):
            for row in (make_row(1), bad, make_row(3)):
                ledger.record(row)
            await ledger.flush()
        assert (ledger.written, ledger.dropped, ledger.write_errors) == (2, 1, 0)
    assert [r.request_id for r in read_rows(tmp_path / "t.db")] == ["req-00000001", "req-00000003"]
    assert any("rejected" in r.getMessage() for r in caplog.records)


async def test_rows_recorded_before_start_are_written(tmp_path: Path) -> None:
    """record() before start() buffers; the writer stores those rows once started."""
    ledger = SQLiteLedger(tmp_path / "t.db")
    ledger.record(make_row(1))
    async with ledger:
        await ledger.flush()
        assert ledger.written == 1


async def test_flush_is_safe_to_cancel(tmp_path: Path) -> None:
    """A flush() cut short by a timeout leaves the writer running; the rows still land."""
    path = tmp_path / "t.db"
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        async with SQLiteLedger(path, busy_timeout=0.01, max_backoff=0.02) as ledger:
            blocker.execute("BEGIN IMMEDIATE")
            ledger.record(make_row(1))
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await ledger.flush()
            blocker.execute("ROLLBACK")
            await ledger.flush()
            assert ledger.written == 1
    finally:
        blocker.close()


async def test_start_twice_or_after_close_is_an_error(tmp_path: Path) -> None:
    """start() runs once per ledger."""
    ledger = SQLiteLedger(tmp_path / "t.db")
    await ledger.start()
    with pytest.raises(RuntimeError):
        await ledger.start()
    await ledger.close()
    with pytest.raises(RuntimeError):
        await ledger.start()


async def test_start_fails_loudly_on_an_unusable_path(tmp_path: Path) -> None:
    """A path whose parent is a file fails at start(), not at the first request."""
    (tmp_path / "file").write_text("x")
    ledger = SQLiteLedger(tmp_path / "file" / "t.db")
    with pytest.raises(FileExistsError):
        await ledger.start()
    await ledger.close()


def test_record_needs_no_running_loop_and_returns_none() -> None:
    """The hot path is a plain append: callable without a loop, returning nothing."""
    ledger = SQLiteLedger(":memory:")
    row: LedgerRow = make_row()
    assert ledger.record(row) is None  # type: ignore[func-returns-value]
    assert ledger.pending == 1


async def test_a_crashed_writer_fails_flush_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """If the writer task dies of a bug, flush() raises and close() still accounts for every row."""

    async def broken(self: SQLiteLedger) -> bool:
        raise ZeroDivisionError

    monkeypatch.setattr(SQLiteLedger, "_write_pending", broken)
    ledger = SQLiteLedger(tmp_path / "t.db")
    await ledger.start()
    ledger.record(make_row(1))
    with caplog.at_level(logging.ERROR, logger="tailgate.ledger"), pytest.raises(RuntimeError, match="crashed"):
        await ledger.flush()
    await ledger.close()
    assert (ledger.written, ledger.pending, ledger.dropped) == (0, 0, 1)
    assert any("crashed" in r.getMessage() for r in caplog.records)


async def test_batches_of_every_size_use_five_statement_sizes(tmp_path: Path) -> None:
    """Batches of 1..230 rows each land exactly once, through at most five distinct INSERT sizes (each size
    is a prepared statement the sqlite3 module keeps in C memory: any size 1..200 grew RSS by up to 35 MB)."""
    from tailgate.ledger import sqlite as ledger_sqlite

    for n in (0, 1, 3, 5, 17, 199, 200, 201, 263):
        cuts = ledger_sqlite._cuts(n)
        assert [start for start, _ in cuts] == [sum(size for _, size in cuts[:i]) for i in range(len(cuts))]
        assert sum(size for _, size in cuts) == n
        assert {size for _, size in cuts} <= set(ledger_sqlite._INSERT_SIZES)
    ledger_sqlite._insert_rows.cache_clear()
    async with SQLiteLedger(tmp_path / "t.db", batch_size=230) as ledger:
        i = 0
        for n in range(1, 231):
            for _ in range(n):
                ledger.record(make_row(i))
                i += 1
            await ledger.flush()
        assert (ledger.written, ledger.pending, ledger.dropped) == (i, 0, 0)
    assert ledger_sqlite._insert_rows.cache_info().currsize <= len(ledger_sqlite._INSERT_SIZES)
    ids = [r.request_id for r in read_rows(tmp_path / "t.db", limit=i + 1)]
    assert sorted(ids) == sorted(make_row(j).request_id for j in range(i))
