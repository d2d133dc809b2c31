"""Leased slices of a shared limit: exact caps without a Redis round trip per request.

Measured on our 2-core machine (docs/fleet.md, ``benchmarks/state_overhead.py --calls-only``): one Lua
``take`` through redis-py's asyncio client costs 131–266 µs wall at concurrency 1 and 62–202 µs per call
at 16 in flight — a fifth to a third of what the whole gateway spends on a request. So a hot limit is not
decided per request in Redis: a replica takes a *slice* of it in one atomic ``take`` (the request's own
amount plus the slice), spends the slice locally, and gives back what it has not spent (a refund to the
bucket the slice was counted in) once the slice has sat idle for a tick or is older than ``max_age_s``.

Why this keeps the cap: every unit a request spends was first counted in Redis by an atomic take, so the
fleet can never admit more than the limit counted in the window, plus slices spent after their bucket
left the window — at most ``replicas × slice`` ≤ ``slice_fraction`` (1 %) of the limit, since a slice is
``limit × slice_fraction ÷ replicas`` and lives at most ``max_age_s``. It can admit *less* than the limit
only by what other replicas hold unspent (the same bound), and only near the limit. When the slice would be
under ``min_slice`` units (a small limit such as ``rpm: 60``), or the counter has no room for a slice,
each request makes its own atomic ``take``: exact to the unit, at the cost of one round trip.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from tailgate._runtime import stop_task
from tailgate.state.protocol import Adjustment, Admission, SharedState

__all__ = ["LeasedLimiter"]


@dataclass(slots=True)
class _Slice:
    size: float
    balance: float
    bucket: int | None
    limit: float
    window_s: float
    taken_at: float
    remaining: float
    """The counter's room left when the slice was taken (for x-ratelimit-remaining)."""
    used: bool = True
    renewing: asyncio.Task[None] | None = None
    """The renewal in flight: one round trip already asking for this slice's next units."""
    spent: float = 0.0
    parts: dict[int | None, float] = field(default_factory=dict)
    """Where the balance is counted: window bucket → units of it held (oldest first; the newest is ``bucket``).
    A refund to a bucket takes back at most what that bucket counted (the Lua ``adjust`` stops at 0), so the
    balance a renewal carries over stays its own bucket's: spent first, and given back there, never to the
    renewal's newer bucket (which would refund only what the renewal counted and keep the rest counted until
    the older bucket leaves the window: budget lost, 1,205 counted for 1,200 spent in
    tests/state/test_state_lease.py)."""

    def spend(self, amount: float) -> tuple[int | None] | None:
        """Take ``amount`` from the oldest part that holds it whole (one bucket per admission, so that a refund of
        it goes where it was counted): ``(bucket,)`` of that part (None is the fallback's grant), or None when
        no part holds it."""
        for bucket, units in self.parts.items():
            if units >= amount:
                if units > amount:
                    self.parts[bucket] = units - amount
                else:
                    del self.parts[bucket]
                self.balance -= amount
                return (bucket,)
        return None

    def holds(self, bucket: int) -> bool:
        """Units of ``bucket`` are (or were, spent since) in this slice: a refund of them may go back into it."""
        return bucket == self.bucket or bucket in self.parts

    def add(self, bucket: int | None, amount: float) -> None:
        self.parts[bucket] = self.parts.get(bucket, 0.0) + amount
        self.balance += amount


class LeasedLimiter:
    """``take`` like :meth:`SharedState.take`, from local slices where the limit is large enough."""

    def __init__(
        self,
        state: SharedState,
        *,
        tick_s: float = 0.2,
        slice_fraction: float = 0.01,
        min_slice: float = 4.0,
        max_age_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self._clock = clock
        """Monotonic seconds: slice ages, spend rates and remembered refusals (tests drive a fake one)."""
        self.tick_s = tick_s
        self.slice_fraction = slice_fraction
        self.min_slice = min_slice
        self.max_age_s = max_age_s
        self._slices: dict[str, _Slice] = {}
        self._refused_until: dict[str, tuple[float, float]] = {}
        self._rate: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        """name → units per second this replica spent from its last slice (sizes the next one)."""
        """name → (monotonic time, limit): a refusal Redis gave, valid until enough of the window rolls off."""
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.local_takes = 0
        """Takes answered from a slice (no round trip)."""
        self.remote_takes = 0
        """Takes that went to the backend (a slice, or a take of their own)."""

    @property
    def leasing(self) -> bool:
        """Slices pay off only where a take is a round trip (not for the in-process backend)."""
        return self.state.backend != "local"

    def start(self) -> None:
        if self.leasing and self._task is None:
            self._task = asyncio.create_task(self._ticks(), name="tailgate-lease-ticks")

    async def close(self) -> None:
        if self._task is not None:
            await stop_task(self._task)
            self._task = None
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        for name in list(self._slices):
            await self._give_back(name)

    async def take(self, name: str, amount: float, limit: float, window_s: float | None) -> Admission:
        if not self.leasing or window_s is None:
            self.remote_takes += 1
            return await self.state.take(name, amount, limit, window_s)
        refused = self._refused_until.get(name)
        if refused is not None:
            wait = refused[0] - self._clock()
            if wait > 0 and refused[1] == limit:
                # Nothing rolls off the window before then (only a refund could make room sooner): under 2x
                # load this spares Redis every refused request's round trip.
                self.local_takes += 1
                return Admission(False, wait, 0.0, limit, wait)
            del self._refused_until[name]
        hit = self._spend(name, amount, limit, window_s)
        if hit is not None:
            return hit
        cap = math.floor(limit * self.slice_fraction / max(1, self.state.replicas()))
        if cap < self.min_slice:
            return await self._direct(name, amount, limit, window_s)  # a small limit: exact, per request
        # One slice fetch per name at a time: the requests that find the slice spent meanwhile wait for the
        # new one instead of each fetching (and overwriting) their own.
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        async with lock:
            hit = self._spend(name, amount, limit, window_s)
            if hit is not None:
                return hit
            s = self._slices.get(name)
            if s is not None and s.renewing is not None and s.limit == limit and s.window_s == window_s:
                # The slice ran dry with its renewal already asked for: wait for that round trip rather than give
                # the slice back and take a second one (whose units the renewal would then refund unspent). A
                # caller that stops waiting does not cancel the renewal: it belongs to the slice.
                await asyncio.wait({s.renewing})
                hit = self._spend(name, amount, limit, window_s)
                if hit is not None:
                    return hit
            refused = self._refused_until.get(name)
            if refused is not None and refused[0] > self._clock() and refused[1] == limit:
                self.local_takes += 1
                wait = refused[0] - self._clock()
                return Admission(False, wait, 0.0, limit, wait)
            self._spawn(self._give_back(name))  # a refund: no request waits on it
            # Sized to what this replica spent per max_age last time (x2), so a huge limit is not leased in
            # huge slices that mostly go back: fewer units in flight, less lost if a replica dies holding one.
            size = min(cap, max(self.min_slice, math.ceil(2 * self._rate.get(name, 0.0) * self.max_age_s)))
            self.remote_takes += 1
            adm = await self.state.take(name, amount + size, limit, window_s)
            if adm.ok:
                # A slice the fallback granted (Redis slow or away) is spent the same way: a late Redis answer
                # charges or keeps it there whole, so what is not spent must be given back all the same.
                s = _Slice(size, 0.0, adm.bucket, limit, window_s, self._clock(), adm.remaining)
                s.add(adm.bucket, size)
                self._slices[name] = s
                return Admission(True, 0.0, adm.remaining + size, limit, adm.reset_s, adm.bucket, adm.local)
            return await self._direct(name, amount, limit, window_s)  # no room for a slice: the last units

    def refund_now(self, name: str, amount: float, window_s: float | None, adm: Admission) -> Adjustment | None:
        """Give back ``amount`` that the take answered by ``adm`` counted (a request refused after it: it keeps
        nothing). Taken from a slice that is still held (same bucket): it goes back into the slice (its bucket's
        part, ``_Slice.parts``), no round trip. Else the :class:`Adjustment` that refunds it where it was counted
        (``adm.bucket``), for the caller to apply (``SharedState.adjust``; ``LocalState.adjust_now`` at once). A
        remembered refusal of the name is forgotten: the refund may have made room."""
        self._refused_until.pop(name, None)
        s = self._slices.get(name)
        if s is not None and adm.bucket is not None and s.window_s == window_s and s.holds(adm.bucket):
            s.add(adm.bucket, amount)
            return None
        return Adjustment(name, -amount, window_s, adm.bucket)

    def _spend(self, name: str, amount: float, limit: float, window_s: float) -> Admission | None:
        s = self._slices.get(name)
        if s is None or s.limit != limit or s.window_s != window_s:
            return None
        part = s.spend(amount)
        if part is not None:
            s.spent += amount
            s.used = True
            self.local_takes += 1
            if s.balance < s.size / 2 and s.renewing is None:
                # Renewed ahead of need: the next slice is taken in the background while this one
                # lasts, so a steady key's requests never wait for Redis.
                s.renewing = self._spawn(self._renew(name, s))
            return Admission(True, 0.0, max(0.0, s.remaining + s.balance), limit, 0.0, part[0])
        return None

    async def _renew(self, name: str, s: _Slice) -> None:
        try:
            size = min(
                math.floor(s.limit * self.slice_fraction / max(1, self.state.replicas())),
                max(self.min_slice, math.ceil(2 * s.spent / max(1e-3, self._clock() - s.taken_at) * self.max_age_s)),
            )
            if size < self.min_slice:
                return
            self.remote_takes += 1
            adm = await self.state.take(name, size, s.limit, s.window_s)
            if not adm.ok:
                return
            if self._slices.get(name) is not s:  # given back meanwhile: not wanted
                await self.state.adjust(name, -size, s.window_s, adm.bucket)
                return
            # The balance left stays in its own bucket (``_Slice.parts``), spent before the new units.
            s.add(adm.bucket, size)
            s.size, s.bucket, s.remaining, s.taken_at, s.spent = size, adm.bucket, adm.remaining, self._clock(), 0.0
        finally:
            s.renewing = None

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _direct(self, name: str, amount: float, limit: float, window_s: float) -> Admission:
        self.remote_takes += 1
        adm = await self.state.take(name, amount, limit, window_s)
        if not adm.ok and not adm.local and math.isfinite(adm.retry_after_s):
            self._refused_until[name] = (self._clock() + adm.retry_after_s, limit)
        return adm

    async def _give_back(self, name: str) -> None:
        s = self._slices.pop(name, None)
        if s is not None:
            age = max(1e-3, self._clock() - s.taken_at)
            self._rate[name] = (s.size - s.balance) / age
        if s is not None:
            # Each part to the bucket that counted it: usually one, two when a renewal crossed a bucket's end.
            await asyncio.gather(
                *(self.state.adjust(name, -units, s.window_s, bucket) for bucket, units in s.parts.items() if units > 0)
            )

    async def _ticks(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            now = self._clock()
            for name, s in list(self._slices.items()):
                if not s.used or now - s.taken_at > self.max_age_s:
                    await self._give_back(name)
                else:
                    s.used = False
