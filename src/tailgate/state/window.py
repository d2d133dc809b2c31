"""The sliding-window counter both backends implement (in Python here, in Lua in ``redis.py``).

A window of ``window_s`` seconds is cut into ``SUB_BUCKETS`` (60) buckets aligned to the clock's zero;
bucket ``k`` holds what was taken while ``k * b <= now < (k + 1) * b`` with ``b = window_s / 60``. The usage
at ``now`` is the sum of buckets ``k - 59 .. k``. A take of ``amount`` passes when usage + amount <= limit.

Why this and not GCRA or a token bucket: a token bucket (and GCRA with a burst tolerance of the whole limit)
lets a fresh key spend ``limit`` at once and then refill during the same minute, so a key with ``rpm: 60``
driven hard admits ~120 in its first minute. The bucketed window admits at most ``limit`` over any window
aligned to buckets and at most ``limit`` + one bucket's takes over any other window of ``window_s`` (1/60 =
1.7 % at full load), which is what "60 ± 2 per minute" asks. Unlike a log of every take (a sorted set), its
state is at most 60 numbers per counter whatever the rate, and it supports ``adjust`` (refund / settle)
by adding to the current bucket. A fixed window (Envoy, LiteLLM) lets 2× the limit through around a
window boundary.
"""

from __future__ import annotations

import math

from tailgate.state.protocol import Admission

__all__ = ["SUB_BUCKETS", "WindowCounter"]

SUB_BUCKETS = 60


class WindowCounter:
    """One counter: ``{bucket epoch: amount}`` for a window, or a single total without one.

    The window's sum is kept as it changes (``_sum``) and recomputed exactly whenever buckets roll off (at
    most once per bucket width), so a take costs a few operations instead of three passes over 60 buckets.
    """

    __slots__ = ("_lo", "_sum", "_top", "buckets", "total")

    def __init__(self) -> None:
        self.buckets: dict[int, float] = {}
        self.total = 0.0
        self._sum = 0.0  # sum(self.buckets.values())
        self._lo = -(1 << 62)  # every bucket below this epoch is already gone
        self._top = -(1 << 62)  # the highest epoch ever counted in

    def _expire(self, epoch: int) -> None:
        lo = epoch - SUB_BUCKETS + 1
        if lo <= self._lo:
            return  # nothing rolled off since the last look
        self._lo = lo
        buckets = self.buckets
        old = [k for k in buckets if k < lo]
        if old:
            for k in old:
                del buckets[k]
        self._sum = sum(buckets.values())  # exact again: no drift from the running sum

    def _add(self, epoch: int, amount: float) -> None:
        self.buckets[epoch] = self.buckets.get(epoch, 0.0) + amount
        self._sum += amount
        if epoch > self._top:
            self._top = epoch

    def usage(self, now: float, window_s: float | None) -> float:
        if window_s is None:
            return max(0.0, self.total)
        epoch = math.floor(now / (window_s / SUB_BUCKETS))
        self._expire(epoch)
        return max(0.0, self._sum)

    def take(self, now: float, amount: float, limit: float, window_s: float | None) -> Admission:
        if window_s is None:
            used = max(0.0, self.total)
            if amount > limit or used + amount > limit:
                return Admission(False, math.inf, max(0.0, limit - used), limit)
            self.total = used + amount
            return Admission(True, 0.0, max(0.0, limit - self.total), limit)
        b = window_s / SUB_BUCKETS
        epoch = math.floor(now / b)
        self._expire(epoch)
        used = max(0.0, self._sum)
        if amount > limit:
            return Admission(False, math.inf, max(0.0, limit - used), limit, self._reset(now, b, epoch))
        if used + amount <= limit:
            if amount:
                self._add(epoch, amount)
            used += amount
            reset = self._reset(now, b, epoch)
            return Admission(True, 0.0, max(0.0, limit - used), limit, reset, epoch if amount else None)
        # Refused: find when enough of the oldest buckets have rolled off for this amount to fit.
        need = used + amount - limit
        freed, wait = 0.0, window_s
        for k in sorted(self.buckets):
            freed += self.buckets[k]
            if freed >= need:
                wait = (k + SUB_BUCKETS) * b - now
                break
        return Admission(False, max(0.0, wait), max(0.0, limit - used), limit, self._reset(now, b, epoch))

    def _reset(self, now: float, b: float, epoch: int) -> float:
        if self._top <= epoch and self.buckets.get(epoch, 0.0) > 0:  # the newest live bucket is this one
            return max(0.0, (epoch + SUB_BUCKETS) * b - now)
        live = [k for k, v in self.buckets.items() if v > 0]
        return max(0.0, (max(live) + SUB_BUCKETS) * b - now) if live else 0.0

    def adjust(self, now: float, delta: float, window_s: float | None, bucket: int | None = None) -> float:
        if window_s is None:
            self.total = max(0.0, self.total + delta)
            return self.total
        epoch = math.floor(now / (window_s / SUB_BUCKETS))
        self._expire(epoch)
        if delta < 0 and bucket is not None:
            old = self.buckets.get(bucket)
            if old is not None:  # still in the window: refund there, never below 0
                new = max(0.0, old + delta)
                self.buckets[bucket] = new
                self._sum += new - old
        else:
            self._add(epoch, delta)
        return max(0.0, self._sum)
