"""The Redis backend's calls and their health: a budget per call, what becomes of a call past it, and when Redis
counts as down (docs/fleet.md, "Redis down or slow"; the module docstring of ``redis.py``).

Split from ``redis.py`` (what each call asks of Redis) so that the decisions and their bookkeeping there read
apart from how a call is made here. ``RedisState`` exposes the counters below under the same names.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

__all__ = ["FAILURE", "SYNC_TIMEOUT_S", "Link", "Unavailable"]

log = logging.getLogger("tailgate.state")

FAILURE = (RedisError, OSError, asyncio.TimeoutError)
"""What a Redis call raises when Redis is down, slow or failing."""
SYNC_TIMEOUT_S = 1.0
"""The budget of background work (the sync loop, settlements, a late call waited for)."""
_FAILURES_TO_DOWN = 3
_DOWN_AFTER_S = 0.5
_BACKOFF_MIN_S, _BACKOFF_MAX_S = 0.1, 5.0


class Unavailable(Exception):
    """Redis could not decide this call (down, slow, failing): the fallback decides it."""


class Link:
    """Runs each Redis call within its budget and keeps Redis's health: up, down, the sync loop's back-off."""

    def __init__(self, timeout: float, fallback: str, where: str = "") -> None:
        self.where = where
        """Redis's address with no password (``redis://host:6379/0``), named in the down/up warnings."""
        self.timeout = timeout
        """The request path's budget per call (``state.timeout``)."""
        self._fallback = fallback
        self.connected = False
        self.down = True  # until the first sync answers
        self.backoff = _BACKOFF_MIN_S
        """The sync loop's wait while Redis is down (doubling to 5 s)."""
        self._failures = 0
        self._last_ok = 0.0
        self._announced_down = False
        self.late: set[asyncio.Future[Any]] = set()
        """Calls past their budget, still running (and the undo work they caused); batches being sent."""
        self.calls = 0
        self.fallbacks = 0
        """Decisions made by the fallback (Redis down, slow or failing) since start."""
        self.timeouts = 0
        self.late_answers = 0
        """Calls whose reply was waiting in the socket when their budget ran out (taken, not timed out)."""
        self.loop_waits = 0
        """Calls past their budget because this process's event loop was late, waited for (see ``_ours``)."""

    async def call(self, coro: Any, budget: float | None = None, late: Callable[[Any], None] | None = None) -> Any:
        """Run one Redis call within the budget; raises :class:`Unavailable` for the caller's fallback.

        A call past its budget is not cancelled: it runs on in the background (cancelling would drop the
        connection, and the script may already have run in Redis). ``late`` gets its result if it succeeds,
        so what Redis did after the fallback had decided can be undone (a take refunded, a slot released)."""
        if self.down:
            coro.close()
            self.fallbacks += 1
            raise Unavailable
        self.calls += 1
        task = asyncio.ensure_future(coro)
        loop = asyncio.get_running_loop()
        limit = budget or self.timeout
        start = loop.time()
        try:
            try:
                out = await asyncio.wait_for(asyncio.shield(task), limit)
            except TimeoutError:
                if not await self._ours(task, loop.time() - start - limit, limit):
                    self.timeouts += 1
                    self._orphan(task, late)
                    self.failed("slower than state.timeout")
                    raise Unavailable from None
                try:
                    out = task.result()
                except FAILURE as err:
                    self.failed(type(err).__name__)
                    raise Unavailable from None
            except FAILURE as err:
                self.failed(type(err).__name__)
                raise Unavailable from None
        except asyncio.CancelledError:
            # The caller went away (its client hung up) while Redis decided: the call runs on, and what it
            # took is given back by ``late`` (nothing here decided to keep it), not left to count for a window.
            self._orphan(task, late)
            raise
        self._failures = 0
        self._last_ok = time.monotonic()
        return out

    async def _ours(self, task: asyncio.Future[Any], lateness: float, limit: float) -> bool:
        """After a call's budget ran out: was the delay this process's, and has the call now finished?

        The budget is for Redis's slowness. Two signs that the time went to this process instead: the reply
        was already in its socket (it completes within a few loop turns: libuv runs timers before it polls
        for I/O), or the budget's own timer fired later than the budget is long (the event loop is saturated,
        so no reply could have been read in time). Then the call is waited for, within the background budget,
        rather than decided by the fallback, whose decision a late Redis answer would have to reconcile: more
        Redis work exactly when the replica has the least CPU to spare (measured with Redis a hop away at 50
        connections)."""
        if await _answered_late(task):
            self.late_answers += 1
            return True
        if lateness <= limit:
            return False  # the loop was on time: Redis was slow
        self.loop_waits += 1
        # asyncio.wait, not wait_for: a call that fails meanwhile must not raise its error here, past call()'s
        # handlers, to the caller; call() reads it from the task and falls back. Neither cancels the call.
        await asyncio.wait([task], timeout=SYNC_TIMEOUT_S)
        return task.done()

    def _orphan(self, task: asyncio.Future[Any], late: Callable[[Any], None] | None) -> None:
        """No one waits for ``task`` any more: hand its result to ``late`` when it comes (now, if it has)."""
        if task.done():
            self._finish_late(task, late)
            return
        self.late.add(task)
        task.add_done_callback(lambda t: self._finish_late(t, late))

    def _finish_late(self, task: asyncio.Future[Any], late: Callable[[Any], None] | None) -> None:
        self.late.discard(task)
        if task.cancelled() or late is None:
            return
        late(None if task.exception() is not None else task.result())

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.late.add(task)
        task.add_done_callback(self.late.discard)

    def failed(self, why: str) -> None:
        self.fallbacks += 1
        self._failures += 1
        # A few slow calls under a burst are not an outage: only failures that persist mark Redis down.
        persistent = time.monotonic() - self._last_ok > _DOWN_AFTER_S
        if self._failures >= _FAILURES_TO_DOWN and persistent and not self.down:
            self.down = True
            self.connected = False
            self.announce_down(why)

    def announce_down(self, why: str) -> None:
        if not self._announced_down:
            self._announced_down = True
            log.warning(
                "state: Redis unavailable%s (%s): deciding with the %s fallback until it answers again",
                f" at {self.where}" if self.where else "",
                why,
                self._fallback,
            )

    def lost(self, why: str) -> None:
        """The sync loop could not reach Redis: down until a sync answers, retried with a longer wait."""
        self.connected = False
        if not self.down:
            self.down = True
            self.announce_down(why)
        self.backoff = min(_BACKOFF_MAX_S, self.backoff * 2)

    def answered(self, at: float) -> None:
        """A sync answered at ``at`` (monotonic): Redis is up."""
        self.connected = True
        self._failures = 0
        self._last_ok = at
        self.backoff = _BACKOFF_MIN_S
        if self.down:
            self.down = False
            if self._announced_down:
                log.warning(
                    "state: Redis answers again%s; fleet-wide decisions resumed",
                    f" at {self.where}" if self.where else "",
                )
            self._announced_down = False


_LATE_TURNS = 3
"""Loop turns a timed-out call gets to finish from a reply already received (poll, read, parse)."""


async def _answered_late(task: asyncio.Future[Any]) -> bool:
    """Whether ``task`` completes, successfully, within :data:`_LATE_TURNS` turns of the loop (no waiting)."""
    for _ in range(_LATE_TURNS):
        if task.done():
            break
        await asyncio.sleep(0)
    return task.done() and not task.cancelled() and task.exception() is None
