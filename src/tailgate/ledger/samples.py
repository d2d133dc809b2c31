"""The monitor's probe samples and the gateway's per-minute traffic aggregates in the tailgate store.

Tables ``samples`` and ``traffic_minutes`` (schema version 2, see ``tailgate.ledger.schema`` and
docs/monitor.md). :class:`SampleStore` is the async writer: rows are buffered in memory and written in
one transaction per ``flush()`` by the one thread that owns the store's sqlite3 connection, so the event
loop never waits on disk except inside ``flush()``, ``prune()`` and ``close()``. A failed write keeps its
rows buffered for the next flush (bounded by ``max_pending``). ``read_samples`` and ``read_traffic`` are
the synchronous side for the leaderboard, the dashboard and tests.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Self

from tailgate.ledger.schema import open_db
from tailgate.ledger.store import dialect_of

if TYPE_CHECKING:
    from tailgate.ledger.store import Queryable

__all__ = [
    "Sample",
    "SampleStore",
    "TrafficMinute",
    "Workload",
    "delete_before",
    "insert_samples",
    "insert_traffic",
    "read_samples",
    "read_traffic",
    "tok_s",
]

log = logging.getLogger("tailgate.ledger")

Workload = Literal["short", "long", "accuracy"]


def tok_s(output_tokens: int | None, ttft_ms: float | None, e2e_ms: float | None) -> float | None:
    """Per-request tok/s, (output_tokens − 1) / (E2E − TTFT) (docs/metrics.md); None when undefined.

    Undefined: fewer than two tokens, a missing time, or no time between the first and the last token.
    """
    if output_tokens is None or output_tokens < 2 or ttft_ms is None or e2e_ms is None or e2e_ms <= ttft_ms:
        return None
    return (output_tokens - 1) / ((e2e_ms - ttft_ms) / 1000.0)


@dataclass(frozen=True, slots=True)
class Sample:
    """One monitor probe, as stored in ``samples`` (field order = column order, without ``id``)."""

    ts: float
    """Wall-clock Unix seconds when the probe was sent."""
    provider: str
    model: str
    """The upstream model id (what was sent as ``model``)."""
    workload: str
    """``short``, ``long`` or ``accuracy``."""
    status: int | None = None
    """HTTP status; None when no response header arrived."""
    error_class: str | None = None
    """None for a success; else the measurement core's error class (``timeout_first_token``, ``http_5xx`` …)."""
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    output_tokens: int | None = None
    tok_s: float | None = None
    accuracy_ok: bool | None = None
    """For graded accuracy tasks: whether the answer was right; None otherwise (and for failed calls)."""
    ttft_answer_ms: float | None = None
    """Time to the first answer token (not reasoning); equals ``ttft_ms`` when the model did not think."""
    reasoning_tokens: int | None = None
    api: str = "openai"
    """The protocol probed: ``openai`` (``/chat/completions``) or ``anthropic`` (the provider's
    ``anthropic_base_url``, ``/v1/messages``). The leaderboard keeps the two apart."""

    @property
    def ok(self) -> bool:
        return self.error_class is None


@dataclass(frozen=True, slots=True)
class TrafficMinute:
    """One gateway process's aggregate of one provider × model over one wall-clock minute."""

    minute: float
    """Unix seconds at the start of the minute."""
    provider: str
    model: str
    requests: int
    errors: int
    output_tokens: int
    tok_s_sum: float
    tok_s_n: int
    ttft_hist: str | None = None
    """JSON of ``LatencyHistogram.to_dict()`` (milliseconds) over the successful requests; None if empty."""
    e2e_hist: str | None = None


_SAMPLE_COLUMNS = tuple(f.name for f in fields(Sample))
_TRAFFIC_COLUMNS = tuple(f.name for f in fields(TrafficMinute))
_ACCURACY_OK = _SAMPLE_COLUMNS.index("accuracy_ok")
# Column names come from the dataclasses above, never from input, so building the SQL is safe.
_INSERT_SAMPLE = f"INSERT INTO samples ({', '.join(_SAMPLE_COLUMNS)}) VALUES ({', '.join('?' * len(_SAMPLE_COLUMNS))})"  # noqa: S608
_INSERT_TRAFFIC = (
    f"INSERT INTO traffic_minutes ({', '.join(_TRAFFIC_COLUMNS)}) "  # noqa: S608
    f"VALUES ({', '.join('?' * len(_TRAFFIC_COLUMNS))})"
)
_SELECT_SAMPLES = f"SELECT {', '.join(_SAMPLE_COLUMNS)} FROM samples"  # noqa: S608
_SELECT_TRAFFIC = f"SELECT {', '.join(_TRAFFIC_COLUMNS)} FROM traffic_minutes"  # noqa: S608


def _sample_params(s: Sample) -> tuple[object, ...]:
    values = list(astuple(s))
    if s.accuracy_ok is not None:
        values[_ACCURACY_OK] = int(s.accuracy_ok)
    return tuple(values)


def _to_sample(values: tuple[object, ...]) -> Sample:
    fixed = list(values)
    if fixed[_ACCURACY_OK] is not None:
        fixed[_ACCURACY_OK] = bool(fixed[_ACCURACY_OK])
    return Sample(*fixed)  # type: ignore[arg-type]  # the column types are the field types


def _to_traffic(values: tuple[object, ...]) -> TrafficMinute:
    return TrafficMinute(*values)  # type: ignore[arg-type]


def insert_samples(conn: sqlite3.Connection, samples: list[Sample]) -> None:
    """Insert samples in one transaction (``conn`` in autocommit mode, as ``open_db`` makes it)."""
    _insert(conn, _INSERT_SAMPLE, [_sample_params(s) for s in samples])


def insert_traffic(conn: sqlite3.Connection, rows: list[TrafficMinute]) -> None:
    """Insert traffic aggregates in one transaction."""
    _insert(conn, _INSERT_TRAFFIC, [astuple(r) for r in rows])


def _insert(conn: sqlite3.Connection, sql: str, params: list[tuple[object, ...]]) -> None:
    if not params:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(sql, params)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def delete_before(conn: sqlite3.Connection, ts: float) -> tuple[int, int]:
    """Retention: delete samples sent and traffic minutes started before ``ts``; return both counts."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        samples = conn.execute("DELETE FROM samples WHERE ts < ?", (ts,)).rowcount
        traffic = conn.execute("DELETE FROM traffic_minutes WHERE minute < ?", (ts,)).rowcount
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return samples, traffic


def _where(
    time_column: str, since: float | None, until: float | None, provider: str | None, model: str | None
) -> tuple[str, list[object]]:
    clauses: list[str] = []
    args: list[object] = []
    for clause, value in (
        (f"{time_column} >= ?", since),
        (f"{time_column} <= ?", until),
        ("provider = ?", provider),
        ("model = ?", model),
    ):
        if value is not None:
            clauses.append(clause)
            args.append(value)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", args


def read_samples(
    conn: Queryable,
    *,
    since: float | None = None,
    until: float | None = None,
    provider: str | None = None,
    model: str | None = None,
) -> list[Sample]:
    """Samples with ``since <= ts <= until`` (bounds optional), oldest first (``ts``, then insertion)."""
    where, args = _where("ts", since, until, provider, model)
    return [_to_sample(v) for v in conn.execute(f"{_SELECT_SAMPLES}{where} ORDER BY ts, id", args).fetchall()]


def read_traffic(
    conn: Queryable,
    *,
    since: float | None = None,
    until: float | None = None,
    provider: str | None = None,
    model: str | None = None,
) -> list[TrafficMinute]:
    """Traffic rows with ``since <= minute <= until``, oldest first; one minute may have several rows."""
    where, args = _where("minute", since, until, provider, model)
    order = "id" if dialect_of(conn) == "postgres" else "rowid"  # insertion order
    return [_to_traffic(v) for v in conn.execute(f"{_SELECT_TRAFFIC}{where} ORDER BY minute, {order}", args).fetchall()]


class SampleStore:
    """Batched async writer of samples and traffic minutes on one tailgate database.

    ``add`` / ``add_traffic`` only append to a buffer (call them from the event loop's thread);
    ``flush()`` writes everything buffered in one transaction per table in the store's own thread;
    ``prune(before)`` applies retention. A failed write is logged and its rows stay buffered for the
    next ``flush()``; past ``max_pending`` buffered rows the oldest are dropped and counted in ``dropped``.
    ``close()`` flushes once more and closes the connection.
    """

    def __init__(self, path: str | Path, *, busy_timeout: float = 5.0, max_pending: int = 100_000) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be >= 1")
        self.path = Path(path)
        self._busy_timeout = busy_timeout
        self._max_pending = max_pending
        self._samples: list[Sample] = []
        self._traffic: list[TrafficMinute] = []
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None  # touched only in the executor's thread
        self._lock = asyncio.Lock()
        self.written = 0
        """Rows (samples and traffic minutes) committed."""
        self.dropped = 0
        """Rows dropped because more than ``max_pending`` were waiting."""
        self.write_errors = 0
        self.last_error: BaseException | None = None

    @property
    def pending(self) -> int:
        return len(self._samples) + len(self._traffic)

    async def start(self) -> None:
        """Open and migrate the database; raises what opening raises (unwritable path, newer schema)."""
        if self._executor is not None:
            raise RuntimeError("SampleStore.start() called twice")
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tailgate-samples")
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._open_sync)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        self._executor = executor

    def add(self, sample: Sample) -> None:
        self._samples.append(sample)
        self._bound()

    def add_traffic(self, row: TrafficMinute) -> None:
        self._traffic.append(row)
        self._bound()

    def _bound(self) -> None:
        excess = self.pending - self._max_pending
        if excess <= 0:
            return
        self.dropped += excess
        log.warning("store: %d rows dropped (over max_pending %d; total %d)", excess, self._max_pending, self.dropped)
        cut = min(excess, len(self._samples))
        del self._samples[:cut]
        del self._traffic[: excess - cut]

    async def flush(self) -> bool:
        """Write everything buffered; True when it is all committed (False: kept for the next flush)."""
        async with self._lock:
            samples, traffic = self._samples, self._traffic
            if not samples and not traffic:
                return True
            self._samples, self._traffic = [], []
            try:
                loop, executor = self._loop_and_executor()
                await loop.run_in_executor(executor, self._write_sync, samples, traffic)
            except sqlite3.Error as exc:
                self.write_errors += 1
                self.last_error = exc
                log.warning("store: write of %d rows failed (%r); kept for the next flush", len(samples), exc)
                self._samples[:0] = samples
                self._traffic[:0] = traffic
                self._bound()
                return False
            self.written += len(samples) + len(traffic)
            return True

    async def prune(self, before: float) -> tuple[int, int]:
        """Delete samples and traffic minutes older than ``before`` (Unix s); return (samples, minutes)."""
        async with self._lock:
            loop, executor = self._loop_and_executor()
            return await loop.run_in_executor(executor, self._prune_sync, before)

    async def close(self) -> None:
        """Flush (once) and close. Idempotent."""
        if self._executor is None:
            return
        await self.flush()
        executor, self._executor = self._executor, None
        await asyncio.get_running_loop().run_in_executor(executor, self._close_sync)
        executor.shutdown(wait=False)
        if self.pending:
            log.error("store: %d rows could not be written before close (%r)", self.pending, self.last_error)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _loop_and_executor(self) -> tuple[asyncio.AbstractEventLoop, ThreadPoolExecutor]:
        if self._executor is None:
            raise RuntimeError("SampleStore needs start() first (or was closed)")
        return asyncio.get_running_loop(), self._executor

    # -- the store's thread -----------------------------------------------------------------------

    def _open_sync(self) -> None:
        self._conn = open_db(self.path, busy_timeout=self._busy_timeout)

    def _write_sync(self, samples: list[Sample], traffic: list[TrafficMinute]) -> None:
        conn = self._conn
        if conn is None:
            raise RuntimeError("store is not open")
        # One transaction for both tables, so a retry after a failure never writes a row twice.
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(_INSERT_SAMPLE, [_sample_params(s) for s in samples])
            conn.executemany(_INSERT_TRAFFIC, [astuple(r) for r in traffic])
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _prune_sync(self, before: float) -> tuple[int, int]:
        conn = self._conn
        if conn is None:
            raise RuntimeError("store is not open")
        return delete_before(conn, before)

    def _close_sync(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
