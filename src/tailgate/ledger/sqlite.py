"""SQLiteLedger: the gateway's usage ledger, batched off the hot path into SQLite.

The event loop only appends to a list (``record``). A writer task wakes when a batch is full, when
``flush_interval`` has passed, or on ``flush()``/``close()``, and hands the rows, ``batch_size`` at a
time, to the one thread that owns the sqlite3 connection; that thread inserts each batch with
multi-row ``INSERT`` statements (see ``_ROWS_PER_INSERT``) inside one ``BEGIN IMMEDIATE … COMMIT``. A
failed write (locked, disk full, I/O error) is counted and retried with back-off; its rows stay pending.
Only ``flush()`` and ``close()`` wait on disk.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import operator
import sqlite3
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Self

from tailgate.ledger.row import COLUMNS, LedgerRow
from tailgate.ledger.schema import open_db

log = logging.getLogger("tailgate.ledger")

# The column names come from LedgerRow's fields, never from input, so building the SQL is safe.
_INSERT = f"INSERT INTO requests ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"  # noqa: S608
_params = operator.attrgetter(*COLUMNS)
_ROWS_PER_INSERT = 200
"""Rows per multi-row ``INSERT`` (200 × the columns stays far below SQLite's 32,766 host parameters).

One statement per 200 rows, not ``executemany``'s one step per row: the sqlite3 module lets go of the GIL
around every step, and a writer thread beside a saturated event loop waits for it back each time (up to the
5 ms switch interval). Measured: at ~1,900 req/s on one core the ledger fell behind by ~300 rows/s
with ``executemany`` (pending rows, and RSS, growing for as long as the load lasted); a writer thread beside a
busy Python loop inserted 3–5× the rows per second this way."""
_INSERT_SIZES = (_ROWS_PER_INSERT, 64, 16, 4, 1)
"""The only statement sizes used: a batch is cut greedily into these. The sqlite3 module keeps every statement
it prepared (up to 128) and a prepared ``INSERT`` of n rows holds ~1.8 KB per row in C memory, so inserting
batches as they came (any size 1..200) grew the process by up to 35 MB in steps as new sizes appeared — the
gateway benchmark's RSS "growth that plateaus". Five sizes hold ~0.5 MB, and a batch is at most a
dozen statements more."""


def _cuts(n: int) -> list[tuple[int, int]]:
    """(start, size) of each statement that inserts ``n`` rows, sizes from ``_INSERT_SIZES``."""
    out: list[tuple[int, int]] = []
    start = 0
    for size in _INSERT_SIZES:
        while n - start >= size:
            out.append((start, size))
            start += size
    return out


@functools.lru_cache(maxsize=len(_INSERT_SIZES))
def _insert_rows(n: int) -> str:
    """``INSERT`` of ``n`` rows in one statement."""
    one = f"({', '.join('?' * len(COLUMNS))})"
    return f"INSERT INTO requests ({', '.join(COLUMNS)}) VALUES {', '.join([one] * n)}"  # noqa: S608


# Errors that belong to a row, not to the database: retrying would fail forever and hold up every row
# behind it. A NULL in a NOT NULL column (IntegrityError), a value sqlite3 cannot bind
# (ProgrammingError; InterfaceError before 3.11), an int beyond 64 bits (OverflowError), an object that
# is not a LedgerRow (AttributeError).
_BAD_ROW = (
    sqlite3.IntegrityError,
    sqlite3.ProgrammingError,
    sqlite3.InterfaceError,
    sqlite3.DataError,
    OverflowError,
    AttributeError,
    TypeError,
    ValueError,
)
_FIRST_BACKOFF_S = 0.05
_LOG_EVERY_S = 5.0


class SQLiteLedger:
    """Batched, crash-tolerant request ledger on one SQLite file (see docs/ledger.md).

    ``record`` is for the event loop's thread (the loop that ran ``start``); it never blocks and never
    raises. Rows past ``max_pending`` are refused and counted in ``dropped`` (logged at most every 5 s),
    as are rows recorded after ``close()`` and rows the database rejects (a NULL in a required field).
    ``close()`` writes everything pending; if the database stays unwritable for ``close_timeout``
    seconds it gives up, counts what is left in ``dropped`` and logs it as an error
    (``close_timeout=None``: retry for ever).

    ``busy_timeout`` is how long one write waits for another connection's lock before it counts as a
    failed write; retries back off from 50 ms, doubling to ``max_backoff`` seconds.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        batch_size: int = 500,
        flush_interval: float = 0.5,
        max_pending: int = 1_000_000,
        busy_timeout: float = 1.0,
        max_backoff: float = 2.0,
        close_timeout: float | None = 10.0,
    ) -> None:
        if batch_size < 1 or max_pending < 1:
            raise ValueError("batch_size and max_pending must be >= 1")
        if flush_interval <= 0:
            raise ValueError("flush_interval must be > 0")
        self.path = Path(path)
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._max_pending = max_pending
        self._busy_timeout = busy_timeout
        self._max_backoff = max(max_backoff, _FIRST_BACKOFF_S)
        self._close_timeout = close_timeout

        self._buf: list[LedgerRow] = []
        self._accepted = 0  # rows record() took
        self._settled = 0  # of those: written, rejected by the database, or abandoned at close
        self._written = 0
        self._dropped = 0
        self._unlogged_drops = 0
        self._next_drop_log = 0.0
        self._write_errors = 0
        self._next_error_log = 0.0
        self._transactions = 0
        self.last_error: BaseException | None = None
        """The most recent failed write's exception (None when none has failed)."""

        self._wake = asyncio.Event()
        self._give_up = asyncio.Event()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None  # touched only in the executor's thread
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self.before_flush: Callable[[], Awaitable[None]] | None = None
        """Called first by :meth:`flush`: whoever holds rows not yet recorded records them now (the gateway
        books an ended request a moment later: gateway/request_path/bookkeeping.py)."""
        self._close_task: asyncio.Future[None] | None = None

    # -- counters -----------------------------------------------------------------------------

    @property
    def written(self) -> int:
        """Rows committed to the database."""
        return self._written

    @property
    def pending(self) -> int:
        """Rows recorded and not yet written (buffered or in the batch being written)."""
        return self._accepted - self._settled

    @property
    def dropped(self) -> int:
        """Rows not stored: refused over ``max_pending`` or after close, rejected by the db, abandoned at close."""
        return self._dropped

    @property
    def write_errors(self) -> int:
        """Failed write attempts (each one retried)."""
        return self._write_errors

    @property
    def transactions(self) -> int:
        """Committed write transactions (one per batch)."""
        return self._transactions

    # -- hot path -----------------------------------------------------------------------------

    def record(self, row: LedgerRow) -> None:
        """Queue one row for writing: an append, nothing more; never blocks, never raises."""
        if self._closing or self._accepted - self._settled >= self._max_pending:
            self._drop(1, "ledger closed" if self._closing else "max_pending reached")
            return
        self._accepted += 1
        buf = self._buf
        buf.append(row)
        if len(buf) == self._batch_size:
            self._wake.set()

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open and migrate the database in the writer thread (WAL, synchronous=NORMAL); start the writer.

        Raises what opening raises (an unwritable folder, a database from a newer tailgate), so a
        misconfigured gateway fails at start rather than at its first request.
        """
        if self._executor is not None or self._closing:
            raise RuntimeError("SQLiteLedger.start() called twice or after close()")
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tailgate-ledger")
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._open_sync)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        self._executor = executor
        self._writer = asyncio.create_task(self._run(), name="tailgate-ledger-writer")
        self._writer.add_done_callback(self._writer_done)

    async def flush(self) -> None:
        """Return once every row recorded before this call is written (or counted as dropped).

        Waits through write errors; bound it with ``asyncio.timeout`` if needed (cancelling is safe).
        """
        if self.before_flush is not None:
            await self.before_flush()
        target = self._accepted
        if self._settled >= target:
            return
        if self._writer is None or self._writer.done():
            raise RuntimeError("SQLiteLedger.flush() needs a started, open ledger")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, waiter))
        self._wake.set()
        await waiter

    async def close(self) -> None:
        """Write every pending row, stop the writer, close the database. Idempotent; safe to cancel."""
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        # Shielded: a caller's timeout must not leave the ledger half closed.
        await asyncio.shield(self._close_task)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _close(self) -> None:
        self._closing = True
        self._wake.set()
        writer = self._writer
        if writer is not None:
            done, _ = await asyncio.wait({writer}, timeout=self._close_timeout)
            if not done:
                self._give_up.set()
                # Bounded: the attempt in flight ends within busy_timeout (plus the disk's own time).
                await asyncio.wait({writer})
        lost = self._accepted - self._settled
        if lost:
            self._settled = self._accepted
            self._dropped += lost
            if writer is None:
                why = "never started"
            elif self._give_up.is_set():
                why = f"gave up after {self._close_timeout}s"
            else:
                why = "writer stopped"
            log.error(
                "ledger: %d rows could not be written before close (%s; last error: %r)", lost, why, self.last_error
            )
        self._buf = []
        if self._unlogged_drops:
            log.warning("ledger: %d more rows dropped (total %d)", self._unlogged_drops, self._dropped)
            self._unlogged_drops = 0
        self._notify()
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._close_sync)
            self._executor.shutdown(wait=False)

    # -- writer task (event loop) ----------------------------------------------------------------

    async def _run(self) -> None:
        while not (self._closing and not self._buf):
            if len(self._buf) < self._batch_size and not self._closing and not self._waiters:
                try:
                    async with asyncio.timeout(self._flush_interval):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            self._wake.clear()
            if self._buf and not await self._write_pending():
                return  # close() gave up; it accounts for what is left
            self._notify()

    async def _write_pending(self) -> bool:
        """Write the rows buffered now, batch by batch; False if close() gave up meanwhile."""
        rows, self._buf = self._buf, []
        size = self._batch_size
        for start in range(0, len(rows), size):
            if not await self._write_batch(rows[start : start + size]):
                return False
            self._notify()
        return True

    async def _write_batch(self, batch: list[LedgerRow]) -> bool:
        loop = asyncio.get_running_loop()
        delay = _FIRST_BACKOFF_S
        while True:
            try:
                rejected, reason = await loop.run_in_executor(self._executor, self._write_sync, batch)
            except Exception as exc:  # locked, busy, disk full, I/O error: the database's trouble, retry
                self._write_errors += 1
                self.last_error = exc
                now = time.monotonic()
                if now >= self._next_error_log:
                    self._next_error_log = now + _LOG_EVERY_S
                    log.warning(
                        "ledger write failed (%r); %d rows pending, retrying (%d failed writes so far)",
                        exc,
                        self.pending,
                        self._write_errors,
                    )
                if self._give_up.is_set():
                    return False
                try:
                    async with asyncio.timeout(delay):
                        await self._give_up.wait()
                    return False
                except TimeoutError:
                    delay = min(delay * 2, self._max_backoff)
                continue
            self._transactions += 1
            self._written += len(batch) - rejected
            self._settled += len(batch)
            if rejected:
                self._dropped += rejected
                log.error("ledger: %d rows rejected by the database and not stored: %s", rejected, reason)
            return True

    def _writer_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or (crash := task.exception()) is None:
            return
        # A bug, not a disk problem (those are retried): say so, and fail flush() rather than hang it.
        log.error("ledger writer crashed; rows are no longer written", exc_info=crash)
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(RuntimeError("ledger writer crashed"))
        self._waiters = []

    def _notify(self) -> None:
        """Wake the flush() calls whose rows are all settled."""
        if not self._waiters:
            return
        settled = self._settled
        waiting: list[tuple[int, asyncio.Future[None]]] = []
        for target, waiter in self._waiters:
            if waiter.done():
                continue
            if settled >= target:
                waiter.set_result(None)
            else:
                waiting.append((target, waiter))
        self._waiters = waiting

    def _drop(self, n: int, why: str) -> None:
        self._dropped += n
        self._unlogged_drops += n
        now = time.monotonic()
        if now >= self._next_drop_log:
            self._next_drop_log = now + _LOG_EVERY_S
            log.warning("ledger: %d rows dropped (%s; total %d)", self._unlogged_drops, why, self._dropped)
            self._unlogged_drops = 0

    # -- writer thread -------------------------------------------------------------------------

    def _open_sync(self) -> None:
        conn = open_db(self.path, busy_timeout=self._busy_timeout)
        (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
        if str(mode).lower() != "wal" and str(self.path) != ":memory:":
            log.warning("ledger: %s is in journal_mode=%s, not WAL; readers may block the writer", self.path, mode)
        self._conn = conn

    def _write_sync(self, batch: list[LedgerRow]) -> tuple[int, str | None]:
        """Insert one batch in one transaction; return (rows rejected as bad data, why)."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("ledger database is not open")
        conn.execute("BEGIN IMMEDIATE")
        try:
            try:
                for start, size in _cuts(len(batch)):
                    part = batch[start : start + size]
                    conn.execute(_insert_rows(size), [v for row in part for v in _params(row)])
                rejected, reason = 0, None
            except _BAD_ROW:
                # Some row is bad: start over one row at a time, keeping every good one.
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                rejected, reason = self._insert_each(conn, batch)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    log.debug("ledger: rollback failed", exc_info=True)
            raise
        return rejected, reason

    @staticmethod
    def _insert_each(conn: sqlite3.Connection, batch: list[LedgerRow]) -> tuple[int, str | None]:
        rejected, reason = 0, None
        for row in batch:
            try:
                conn.execute(_INSERT, _params(row))
            except _BAD_ROW as exc:
                rejected += 1
                reason = reason or f"{type(exc).__name__}: {exc}"
        return rejected, reason

    def _close_sync(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute("PRAGMA optimize")  # https://www.sqlite.org/lang_analyze.html#pragopt
        except sqlite3.Error:
            log.debug("ledger: PRAGMA optimize failed", exc_info=True)
        conn.close()
