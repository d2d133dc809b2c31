"""The durable local spool and its shipper: rows reach PostgreSQL in batches, off the request path.

With ``ledger.url: postgresql://…`` each replica still writes everything to its own SQLite store first
(the ledger's request rows, the traffic aggregator's minutes, the monitor's samples): that file *is* the
spool, committed every ``flush_interval`` (0.5 s), so a SIGKILL loses at most the rows of the last flush.
:class:`Shipper` reads what is new in it, in id order, ``batch`` rows at a time, and inserts them into
PostgreSQL in one transaction per table with ``ON CONFLICT (origin, origin_id) DO NOTHING`` — ``origin``
is the spool's random id, ``origin_id`` the row's id in it — then advances its cursor in the spool. A
crash between PostgreSQL's commit and the cursor's update re-ships the batch, which the unique key turns
into a no-op: no row lost, none written twice. While PostgreSQL is down or slow the spool grows and the
shipper retries with back-off (up to ``max_backoff``); when it returns, the backlog goes out in order.

Shipped rows older than ``keep`` are deleted from the spool (never the newest row: SQLite would reuse
its id).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import psycopg

from tailgate.ledger.row import COLUMNS
from tailgate.ledger.samples import Sample, TrafficMinute
from tailgate.ledger.schema import SchemaError, open_db
from tailgate.ledger.store import StoreError, redact_url

__all__ = ["SHIPPED", "Shipper", "ShipperStats"]

log = logging.getLogger("tailgate.ledger")


@dataclass(frozen=True, slots=True)
class _Table:
    name: str
    id_column: str
    """``id``, or ``rowid`` for ``traffic_minutes`` (no id column in SQLite)."""
    time_column: str
    columns: tuple[str, ...]

    def select(self) -> str:
        # Names come from this module's constants, never from input.
        return (
            f"SELECT {self.id_column}, {', '.join(self.columns)} FROM {self.name} "  # noqa: S608
            f"WHERE {self.id_column} > ? ORDER BY {self.id_column} LIMIT ?"
        )

    @property
    def temp(self) -> str:
        return f"tailgate_ship_{self.name}"

    def create_temp(self) -> str:
        cols = ", ".join((*self.columns, "origin", "origin_id"))
        return (
            f"CREATE TEMP TABLE IF NOT EXISTS {self.temp} ON COMMIT DELETE ROWS "  # noqa: S608
            f"AS SELECT {cols} FROM {self.name} WITH NO DATA"
        )

    def copy(self) -> str:
        return f"COPY {self.temp} ({', '.join((*self.columns, 'origin', 'origin_id'))}) FROM STDIN"

    def insert(self) -> str:
        cols = ", ".join((*self.columns, "origin", "origin_id"))
        return (
            f"INSERT INTO {self.name} ({cols}) SELECT {cols} FROM {self.temp} "  # noqa: S608
            "ON CONFLICT (origin, origin_id) DO NOTHING"
        )


SHIPPED: tuple[_Table, ...] = (
    _Table("requests", "id", "ts", COLUMNS),
    _Table("samples", "id", "ts", tuple(f.name for f in fields(Sample))),
    _Table("traffic_minutes", "rowid", "minute", tuple(f.name for f in fields(TrafficMinute))),
)
"""The spooled tables, in shipping order."""


@dataclass(slots=True)
class ShipperStats:
    shipped: dict[str, int] = field(default_factory=dict)
    """Rows inserted into PostgreSQL per table by this process (re-shipped duplicates not counted)."""
    batches: int = 0
    errors: int = 0
    """Failed shipping attempts (each retried)."""
    rejected: int = 0
    """Rows PostgreSQL refused as bad data (logged, skipped; the rest of their batch is stored)."""
    backlog: int = 0
    """Rows in the spool not yet shipped, at the last look."""
    last_error: str | None = None
    connected: bool = False


class Shipper:
    """Ships the spool at ``spool`` to the PostgreSQL store at ``url`` (see the module docstring)."""

    def __init__(
        self,
        spool: str | Path,
        url: str,
        *,
        interval: float = 1.0,
        batch: int = 1000,
        keep: float = 3600.0,
        max_backoff: float = 2.0,
        close_timeout: float = 10.0,
        connect_timeout: float = 3.0,
    ) -> None:
        if batch < 1 or interval <= 0:
            raise ValueError("batch must be >= 1 and interval > 0")
        self.spool = Path(spool)
        self.url = url
        self._interval = interval
        self._batch = batch
        self._keep = keep
        self._max_backoff = max_backoff
        self._close_timeout = close_timeout
        self._connect_timeout = connect_timeout
        self.stats = ShipperStats(shipped={t.name: 0 for t in SHIPPED})
        self._executor: ThreadPoolExecutor | None = None
        self._local: sqlite3.Connection | None = None  # both touched only in the executor's thread
        self._pg: Any = None
        self._origin = ""
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._next_log = 0.0
        self._next_prune = 0.0

    async def start(self) -> None:
        """Open the spool and try PostgreSQL once: a newer schema there raises ``SchemaError`` (refuse to
        start); an unreachable server only logs (the spool holds the rows until it is back)."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tailgate-shipper")
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(executor, self._open_sync)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        self._executor = executor
        try:
            await loop.run_in_executor(executor, self._connect_sync)
        except StoreError as exc:
            self._note_error(exc)
        except SchemaError:
            await loop.run_in_executor(executor, self._close_sync)
            executor.shutdown(wait=False)
            self._executor = None
            raise
        self._task = asyncio.create_task(self._run(), name="tailgate-shipper")

    async def ship_now(self) -> int:
        """Ship what is waiting (every batch), now; return rows sent. Raises what shipping raises."""
        if self._executor is None:
            raise RuntimeError("Shipper.start() first")
        loop = asyncio.get_running_loop()
        total = 0
        while True:
            sent, full = await loop.run_in_executor(self._executor, self._ship_sync)
            total += sent
            if not full:
                return total

    async def close(self) -> None:
        """Stop the loop, ship what is left (bounded by ``close_timeout``), close both connections."""
        if self._executor is None:
            return
        self._stop.set()
        if self._task is not None:
            await self._task
        try:
            async with asyncio.timeout(self._close_timeout):
                await self.ship_now()
        except (TimeoutError, Exception) as exc:
            log.warning("ledger shipper: %d rows left in the spool at close (%r)", self.stats.backlog, exc)
        executor, self._executor = self._executor, None
        await asyncio.get_running_loop().run_in_executor(executor, self._close_sync)
        executor.shutdown(wait=False)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self._interval
        assert self._executor is not None
        while not self._stop.is_set():
            try:
                _, full = await loop.run_in_executor(self._executor, self._ship_sync)
            except SchemaError as exc:
                self._note_error(exc)
                full, delay = False, self._max_backoff
            except Exception as exc:
                self._note_error(exc)
                full, delay = False, min(self._max_backoff, max(delay * 2, 0.1))
            else:
                delay = self._interval
            if full:
                continue  # a full batch: more may be waiting (a backlog replays as fast as PostgreSQL takes it)
            try:
                async with asyncio.timeout(delay):
                    await self._stop.wait()
            except TimeoutError:
                pass

    def _note_error(self, exc: BaseException) -> None:
        self.stats.errors += 1
        self.stats.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        now = time.monotonic()
        if now >= self._next_log:
            self._next_log = now + 5.0
            log.warning(
                "ledger shipper: cannot ship to %s (%s); %d rows wait in the spool",
                redact_url(self.url),
                self.stats.last_error,
                self.stats.backlog,
            )

    # -- the shipper's thread --------------------------------------------------------------------

    def _open_sync(self) -> None:
        self._local = open_db(self.spool)
        row = self._local.execute("SELECT value FROM spool_state WHERE name = 'origin'").fetchone()
        self._origin = str(row[0])

    def _connect_sync(self) -> Any:
        if self._pg is None or self._pg.closed:
            from tailgate.ledger.pg import connect

            self._pg = connect(self.url, connect_timeout=self._connect_timeout)
            self.stats.connected = True
        return self._pg

    def _cursor(self, table: str) -> int:
        assert self._local is not None
        row = self._local.execute("SELECT value FROM spool_state WHERE name = ?", (f"shipped:{table}",)).fetchone()
        return int(row[0]) if row else 0

    def _ship_sync(self) -> tuple[int, bool]:
        """Ship one batch per table; return (rows sent, whether some table had a full batch)."""
        local = self._local
        assert local is not None
        sent, full, backlog = 0, False, 0
        self.stats.backlog = self._backlog_sync()
        pg = None
        for table in SHIPPED:
            cursor = self._cursor(table.name)
            rows = local.execute(table.select(), (cursor, self._batch)).fetchall()
            if rows:
                if pg is None:
                    pg = self._connect_or_reset()
                params = [(*r[1:], self._origin, r[0]) for r in rows]
                try:
                    # COPY into a per-connection temporary table, then one INSERT … ON CONFLICT DO NOTHING:
                    # ~6x the rows/s of executemany (benchmarks/bench_store.py), and still idempotent.
                    with pg.transaction(), pg.cursor() as cur:
                        cur.execute(table.create_temp())
                        with cur.copy(table.copy()) as copy:
                            for p in params:
                                copy.write_row(p)
                        cur.execute(table.insert())
                        inserted = cur.rowcount
                except (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError):
                    # A row PostgreSQL refuses would block the spool for ever: store the others one by one.
                    inserted = self._insert_each(pg, table, params)
                except Exception:
                    self._reset()
                    raise
                last = int(rows[-1][0])
                local.execute(
                    "INSERT INTO spool_state (name, value) VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (f"shipped:{table.name}", str(last)),
                )
                self.stats.shipped[table.name] += max(0, inserted)
                self.stats.batches += 1
                sent += len(rows)
                full = full or len(rows) == self._batch
                cursor = last
            (top,) = local.execute(f"SELECT COALESCE(MAX({table.id_column}), 0) FROM {table.name}").fetchone()  # noqa: S608
            backlog += max(0, int(top) - cursor)
        self.stats.backlog = backlog
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + 60.0
            self._prune_sync()
        return sent, full

    def _insert_each(self, pg: Any, table: _Table, params: list[tuple[Any, ...]]) -> int:
        cols = ", ".join((*table.columns, "origin", "origin_id"))
        marks = ", ".join(["%s"] * (len(table.columns) + 2))
        sql = f"INSERT INTO {table.name} ({cols}) VALUES ({marks}) ON CONFLICT (origin, origin_id) DO NOTHING"  # noqa: S608
        inserted = 0
        for p in params:
            try:
                with pg.transaction():
                    inserted += pg.execute(sql, p).rowcount
            except (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError) as exc:
                self.stats.rejected += 1
                log.error(
                    "ledger shipper: PostgreSQL refused a %s row (id %s in the spool): %s", table.name, p[-1], exc
                )
        return inserted

    def _backlog_sync(self) -> int:
        local = self._local
        assert local is not None
        total = 0
        for table in SHIPPED:
            (top,) = local.execute(f"SELECT COALESCE(MAX({table.id_column}), 0) FROM {table.name}").fetchone()  # noqa: S608
            total += max(0, int(top) - self._cursor(table.name))
        return total

    def _connect_or_reset(self) -> Any:
        try:
            return self._connect_sync()
        except BaseException:
            self._reset()
            raise

    def _reset(self) -> None:
        pg, self._pg = self._pg, None
        self.stats.connected = False
        if pg is not None:
            try:
                pg.close()
            except Exception:
                log.debug("ledger shipper: close failed", exc_info=True)

    def _prune_sync(self) -> None:
        """Delete shipped rows older than ``keep`` (strictly below the cursor: the newest row stays)."""
        local = self._local
        assert local is not None
        before = time.time() - self._keep
        for table in SHIPPED:
            cursor = self._cursor(table.name)
            local.execute(
                f"DELETE FROM {table.name} WHERE {table.id_column} < ? AND {table.time_column} < ?",  # noqa: S608
                (cursor, before),
            )

    def _close_sync(self) -> None:
        self._reset()
        if self._local is not None:
            self._local.close()
            self._local = None
