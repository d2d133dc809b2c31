"""Promise 8's board, shared through the store: this replica's answer-quality counts go to ``quality_counts``, and
what the other replicas and the monitor's canaries added comes back, every ``routing.quality.refresh`` (5 s).

Like the priors (priors.py), the store is the fleet's meeting point: ``ledger.url`` (PostgreSQL) in a fleet, else
the ledger's SQLite file (replicas of one host share it). Each tick, in a thread:

1. this replica's tally since the last tick is added to its hour (``ledger.quality.add_counts``: an upsert that
   sums, so any number of replicas write the same hour);
2. the hour's totals (and the previous hour's) are read back; what grew since the last tick, less what this
   replica just wrote, is the other replicas' traffic, and goes on the board at the tick's time;
3. the monitor's graded canaries (``samples.accuracy_ok``) newer than the last one read go on the board as the
   ``canary`` signal (at start: those of the last ``window``, at their own times).

So a replica's own answers move its board at once; another replica's within a tick or two (its flush, then this
read). Without a store (``ledger.enabled: false``) the board sees this replica's traffic alone, and no canaries.
A store that cannot be reached skips the tick (logged once) and the counts wait for the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tailgate.ledger.quality import CANARY_WRONG, HOUR_S, QualityCount, add_counts, hour_of
from tailgate.ledger.store import Queryable, has_table, open_store, redact_url

if TYPE_CHECKING:
    from tailgate.gateway.request_path.answer_quality import AnswerQuality

__all__ = ["QualitySync"]

log = logging.getLogger("tailgate.gateway.health.quality_sync")

Cell = tuple[float, str, str, str]
"""(hour, provider, model, signal)"""
CLOSE_FLUSH_S = 0.5
"""The last exchange at stop waits at most this long (a store that does not answer must not hold the stop)."""
MAX_CANARIES = 10_000
"""Canaries read per tick at most (the rest on the next)."""


@dataclass(slots=True)
class _Read:
    grown: dict[tuple[str, str, str], tuple[int, int]]
    """(provider, model, signal) → (checked, hits) the other replicas added since the last tick."""
    canaries: list[tuple[float, str, str, bool]]
    """(ts, provider, model, right)"""


@dataclass(slots=True, eq=False)
class QualitySync:
    """The loop described in the module docstring, for one gateway."""

    quality: AnswerQuality
    store: str | Path | None
    interval_s: float = 5.0
    window_s: float = 600.0
    wall: Callable[[], float] = time.time
    _seen: dict[Cell, tuple[int, int]] | None = field(default=None, init=False)
    _last_canary: int | None = field(default=None, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _warned: bool = field(default=False, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    _executor: ThreadPoolExecutor | None = field(default=None, init=False)
    """One exchange at a time (the loop's, ``close``'s, a test's)."""

    def start(self) -> None:
        if self._task is None and self.store is not None:
            self._task = asyncio.create_task(self._run(), name="tailgate-quality-sync")

    async def close(self) -> None:
        """Stop the loop; this replica's last counts go to the store — unless an exchange is still in flight (the
        store is not answering: its counts wait in no queue, the stop does not wait for it) or the last one takes
        longer than ``CLOSE_FLUSH_S``."""
        task, self._task = self._task, None
        if task is None:
            return
        busy = self._lock.locked()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if not busy:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.tick(), CLOSE_FLUSH_S)
        if self._executor is not None:
            self._executor.shutdown(wait=False)  # a thread still blocked on the store is left behind
            self._executor = None

    async def _run(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(self.interval_s)

    async def tick(self) -> None:
        """One exchange with the store (see the module docstring)."""
        async with self._lock:
            await self._tick()

    async def _tick(self) -> None:
        store = self.store
        if store is None or (not isinstance(store, str) and not Path(store).parent.exists()):
            return
        self.quality.flush()
        counts = self.quality.tally.drain()
        wall = self.wall()
        try:
            if self._executor is None:
                # its own thread, never the loop's default executor: asyncio.run joins that one at exit, and an
                # exchange blocked on a store that does not answer would hold the process (the shipper's way too)
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tailgate-quality-sync")
            loop = asyncio.get_running_loop()
            read = await loop.run_in_executor(self._executor, self._exchange, store, counts, wall)
        except Exception as exc:
            for c in counts:  # kept for the next tick
                self.quality.tally.add(c.provider, c.model, c.signal, True, c.hits)
                self.quality.tally.add(c.provider, c.model, c.signal, False, c.checked - c.hits)
            if not self._warned:
                self._warned = True
                where = redact_url(store) if isinstance(store, str) else store
                log.warning("answer-quality counts: the store %s could not be used: %s", where, exc)
            return
        self._warned = False
        self._apply(read, wall)

    def _apply(self, read: _Read, wall: float) -> None:
        board, now = self.quality.board, self.quality.clock()
        for (provider, model, signal), (checked, hits) in _board_cells(read.grown).items():
            board.add((provider, model), signal, checked - hits, checked, now)
        for ts, provider, model, right in read.canaries:
            at = now - max(0.0, wall - ts)  # the canary's own time, on the board's clock
            board.record((provider, model), "canary", right, at)

    def _exchange(self, store: str | Path, counts: list[QualityCount], wall: float) -> _Read:
        with closing(open_store(store, connect_timeout=2.0)) as conn:
            if counts:
                add_counts(conn, wall, counts)
            mine = {(hour_of(wall), c.provider, c.model, c.signal): (c.checked, c.hits) for c in counts}
            totals = _totals(conn, hour_of(wall) - HOUR_S)
            canaries = self._canaries(conn, wall)
        grown: dict[tuple[str, str, str], tuple[int, int]] = {}
        seen = self._seen
        if seen is not None:
            for cell, (checked, hits) in totals.items():
                before = seen.get(cell, (0, 0))
                own = mine.get(cell, (0, 0))
                dc, dh = checked - before[0] - own[0], hits - before[1] - own[1]
                if dc > 0 and cell[3] != CANARY_WRONG:  # canaries come from the samples (below)
                    key = cell[1:]
                    old = grown.get(key, (0, 0))
                    grown[key] = (old[0] + dc, old[1] + max(0, dh))
        self._seen = totals  # the first tick only takes the baseline: older hours say little about now
        return _Read(grown, canaries)

    def _canaries(self, conn: Queryable, wall: float) -> list[tuple[float, str, str, bool]]:
        if not has_table(conn, "samples"):
            return []
        if self._last_canary is None:
            rows = conn.execute(
                "SELECT id, ts, provider, model, accuracy_ok FROM samples WHERE ts >= ? AND accuracy_ok IS NOT NULL "
                "ORDER BY id LIMIT ?",
                (wall - self.window_s, MAX_CANARIES),
            ).fetchall()
            if not rows:
                (last,) = conn.execute("SELECT COALESCE(MAX(id), 0) FROM samples").fetchone()
                self._last_canary = int(last)
                return []
        else:
            rows = conn.execute(
                "SELECT id, ts, provider, model, accuracy_ok FROM samples WHERE id > ? AND accuracy_ok IS NOT NULL "
                "ORDER BY id LIMIT ?",
                (self._last_canary, MAX_CANARIES),
            ).fetchall()
        if rows:
            self._last_canary = int(rows[-1][0])
        return [(float(ts), str(p), str(m), bool(ok)) for _, ts, p, m, ok in rows]


def _totals(conn: Queryable, since_hour: float) -> dict[Cell, tuple[int, int]]:
    if not has_table(conn, "quality_counts"):
        return {}
    rows = conn.execute(
        "SELECT hour, provider, model, signal, checked, hits FROM quality_counts WHERE hour >= ?", (since_hour,)
    ).fetchall()
    return {(float(h), str(p), str(m), str(s)): (int(c), int(n)) for h, p, m, s, c, n in rows}


def _board_cells(grown: dict[tuple[str, str, str], tuple[int, int]]) -> dict[tuple[str, str, str], tuple[int, int]]:
    """Store signals → the board's (answer_quality.BOARD_SIGNAL). The three tool-call signals are checked on the
    same answers; a broken call hits one of them, so their hits add up (at most the answers checked)."""
    from tailgate.gateway.request_path.answer_quality import BOARD_SIGNAL

    out: dict[tuple[str, str, str], tuple[int, int]] = {}
    for (provider, model, signal), (checked, hits) in grown.items():
        key = (provider, model, BOARD_SIGNAL.get(signal, signal))
        old = out.get(key)
        if old is None:
            out[key] = (checked, hits)
        else:  # the tool-call signals: the same answers, their hits added
            c = max(old[0], checked)
            out[key] = (c, min(c, old[1] + hits))
    return out
