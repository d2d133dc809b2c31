"""A time-bucketed sliding window of latency histograms and named counters.

Time is cut into buckets of ``bucket_s = width_s / buckets`` seconds aligned to the clock's zero:
bucket ``k`` holds what was recorded while ``k * bucket_s <= now < (k + 1) * bucket_s``. The window
at ``now`` is the current bucket plus the ``buckets - 1`` before it, so a value recorded at ``t``
stays visible for at most ``width_s`` and at least ``width_s - bucket_s`` (exactly ``width_s`` when
``t`` falls on a bucket start). Aligning to absolute time, not to the window's creation, is what
lets two windows on the same clock merge bucket by bucket.

The slots form a ring indexed by ``k % buckets``, each tagged with its ``k``. A write that finds a
stale tag clears that one slot; reads skip slots whose tag is out of range. Nothing ever scans the
ring on a write, so recording is O(1) whatever the gap since the last call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import msgspec

from tailgate.stats.histogram import LatencyHistogram

__all__ = ["ROUTING_PRECISION", "SlidingWindow", "coarse"]

_NEVER = -(1 << 62)  # tag of a slot that has never been written; out of every live range

ROUTING_PRECISION = 128
"""Steps per power of two for windows that routing reads several times a second (within 0.4 %)."""


def coarse(value: float, precision: int) -> float:
    """``value`` (> 0, finite) rounded to the middle of its step when each power of two is cut into
    ``precision`` equal steps: relative error at most ``1 / (2 × precision)``."""
    m, e = math.frexp(value)  # value = m × 2**e, 0.5 <= m < 1
    steps = 2 * precision
    return math.ldexp((math.floor(m * steps) + 0.5) / steps, e)


class SlidingWindow:
    """Latencies and counters over the last ``width_s`` seconds, in ``buckets`` time buckets.

    "Now" is the injected ``clock()`` (seconds; ``time.monotonic`` by default) read once per
    public call, plus a skew that only ever grows: if the clock reads earlier than a time this
    window has already seen, the skew absorbs the difference so the window's own time stands
    still at its latest reading and then moves on at the clock's pace. A clock going backwards
    therefore never raises, never moves data to older buckets and never expires anything; values
    recorded meanwhile go into the newest bucket. A clock jumping forward expires what is older
    than ``width_s`` in the jumped-to time, as it should.

    ``precision`` (steps per power of two, e.g. :data:`ROUTING_PRECISION`) rounds each latency to the
    middle of its step before recording: percentiles are then within ``1 / (2 × precision)`` (0.4 % at
    128), and a window holds at most ``precision`` distinct values per power of two instead of up to
    2,048. Windows that are read many times a second (routing health) need that: merging twelve buckets of
    a busy minute at the histogram's full resolution took ~6 ms (5,770 distinct values at 1,500 req/s).
    """

    __slots__ = (
        "_bucket_s",
        "_buckets",
        "_clock",
        "_closed",
        "_counters",
        "_created",
        "_hists",
        "_latest",
        "_precision",
        "_skew",
        "_tags",
        "_unit",
        "_width_s",
    )

    def __init__(
        self,
        width_s: float = 60.0,
        buckets: int = 12,
        clock: Callable[[], float] = time.monotonic,
        *,
        unit: float = 0.001,
        precision: int | None = None,
    ) -> None:
        if not (0.0 < width_s < math.inf):
            raise ValueError(f"width_s must be a positive finite number, got {width_s!r}")
        if buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {buckets!r}")
        self._width_s = float(width_s)
        self._buckets = buckets
        if precision is not None and not 1 <= precision <= 2048:
            raise ValueError(f"precision must be within [1, 2048] steps per power of two, got {precision!r}")
        self._bucket_s = self._width_s / buckets
        self._precision = precision
        self._closed: tuple[int, LatencyHistogram] | None = None
        """(epoch, the live buckets before it merged): reused by ``histogram()`` until the epoch moves."""
        self._clock = clock
        self._unit = unit
        self._hists = [LatencyHistogram(unit) for _ in range(buckets)]
        self._counters: list[dict[str, int]] = [{} for _ in range(buckets)]
        self._tags = [_NEVER] * buckets
        self._skew = 0.0
        self._latest = float(clock())
        self._created = self._latest

    # -- time ------------------------------------------------------------------------------

    def _now(self) -> float:
        t = self._clock() + self._skew
        if t < self._latest:
            # Clock went backwards: grow the skew so our time resumes from the latest reading.
            self._skew += self._latest - t
            return self._latest
        self._latest = t
        return t

    def _epoch(self, now: float) -> int:
        return math.floor(now / self._bucket_s)

    def _slot(self, epoch: int) -> int:
        """Index of the ring slot for ``epoch``, cleared first if it holds an older bucket."""
        i = epoch % self._buckets
        if self._tags[i] != epoch:
            # Our time never goes back and merges only write live epochs, so a mismatched tag
            # is always an expired bucket being reused.
            self._hists[i].reset()
            self._counters[i].clear()
            self._tags[i] = epoch
        return i

    def _live(self, epoch: int) -> list[int]:
        lo = epoch - self._buckets + 1
        return [i for i, tag in enumerate(self._tags) if lo <= tag <= epoch]

    # -- writing ---------------------------------------------------------------------------

    def _write_slot(self) -> int:
        # _slot(_epoch(_now())) inlined for the write paths, which run on every request.
        t = self._clock() + self._skew
        if t < self._latest:
            self._skew += self._latest - t
            t = self._latest
        else:
            self._latest = t
        epoch = math.floor(t / self._bucket_s)
        i = epoch % self._buckets
        if self._tags[i] != epoch:
            self._slot(epoch)
        return i

    def record(self, value: float, count: int = 1) -> None:
        """Record a latency (same unit and rules as ``LatencyHistogram.record``), first rounded to the
        window's ``precision`` when it has one."""
        if self._precision is not None and 0.0 < value < math.inf:
            value = coarse(value, self._precision)
        self._hists[self._write_slot()].record(value, count)

    def incr(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``name`` in the current bucket."""
        counters = self._counters[self._write_slot()]
        counters[name] = counters.get(name, 0) + n

    def merge_from(self, other: SlidingWindow) -> None:
        """Add ``other``'s buckets into ours, matched by bucket start time.

        Both windows must have the same bucket length, bucket count and unit. Buckets that are
        expired in either window's view are skipped; buckets newer than our current one (the other
        clock runs ahead) are folded into our current bucket, as a backwards clock would be.
        Alignment is in each window's own time, which is its clock plus any backwards-jump skew.
        """
        self._closed = None
        if (other._bucket_s, other._buckets, other._unit) != (self._bucket_s, self._buckets, self._unit):
            raise ValueError(
                "cannot merge windows of different shape: "
                f"{other._width_s}s/{other._buckets}/unit {other._unit} into "
                f"{self._width_s}s/{self._buckets}/unit {self._unit}"
            )
        epoch = self._epoch(self._now())
        lo = epoch - self._buckets + 1
        for j in other._live(other._epoch(other._latest)):
            tag = other._tags[j]
            if tag < lo:
                continue
            i = self._slot(min(tag, epoch))
            self._hists[i].merge(other._hists[j])
            mine = self._counters[i]
            for name, n in other._counters[j].items():
                mine[name] = mine.get(name, 0) + n
        self._created = min(self._created, other._created)

    def to_bytes(self) -> bytes:
        """The live buckets as msgpack, each tagged with its *age* in buckets (0 = current), not its clock
        epoch: another process (another host, another monotonic clock) merges them by age with
        :meth:`merge_bytes`. Used to publish health windows across a fleet (docs/fleet.md)."""
        epoch = self._epoch(self._now())
        slots = [
            (epoch - self._tags[i], self._hists[i].to_bytes(), self._counters[i])
            for i in self._live(epoch)
            if self._hists[i].count or self._counters[i]
        ]
        return msgspec.msgpack.encode((self._bucket_s, self._buckets, self._unit, slots))

    def merge_bytes(self, data: bytes) -> None:
        """Add a window published with :meth:`to_bytes` into ours, bucket by age; raises ``ValueError`` on
        malformed data or a different shape."""
        self._closed = None
        try:
            bucket_s, buckets, unit, slots = msgspec.msgpack.decode(
                data, type=tuple[float, int, float, list[tuple[int, bytes, dict[str, int]]]]
            )
        except msgspec.DecodeError as exc:
            raise ValueError(f"invalid window bytes: {exc}") from exc
        if (bucket_s, buckets, unit) != (self._bucket_s, self._buckets, self._unit):
            raise ValueError(f"cannot merge a window of {bucket_s}s x {buckets} (unit {unit}) into {self!r}")
        epoch = self._epoch(self._now())
        for age, hist, counters in slots:
            if 0 <= age < self._buckets:
                i = self._slot(epoch - age)
                self._hists[i].merge(LatencyHistogram.from_bytes(hist))
                mine = self._counters[i]
                for name, n in counters.items():
                    mine[name] = mine.get(name, 0) + n

    def reset(self) -> None:
        """Drop everything; the window's age restarts from now."""
        self._closed = None
        for i in range(self._buckets):
            self._hists[i].reset()
            self._counters[i].clear()
            self._tags[i] = _NEVER
        self._created = self._now()

    # -- reading ---------------------------------------------------------------------------

    @property
    def width_s(self) -> float:
        return self._width_s

    @property
    def buckets(self) -> int:
        return self._buckets

    @property
    def bucket_s(self) -> float:
        return self._bucket_s

    def histogram(self) -> LatencyHistogram:
        """A new histogram merging the live buckets (the caller may keep or change it).

        The buckets before the current one change only when time moves to a new bucket (or on a merge or
        reset), so their merge is kept and reused: a read costs a copy plus the current bucket's merge."""
        epoch = self._epoch(self._now())
        closed = self._closed
        if closed is None or closed[0] != epoch:
            merged = LatencyHistogram(self._unit)
            for i in self._live(epoch):
                if self._tags[i] != epoch:
                    merged.merge(self._hists[i])
            self._closed = closed = (epoch, merged)
        out = closed[1].copy()
        current = epoch % self._buckets
        if self._tags[current] == epoch:
            out.merge(self._hists[current])
        return out

    def recent_histogram(self, min_count: int) -> LatencyHistogram:
        """The newest live buckets merged, newest first, until they hold ``min_count`` latencies (or all
        live buckets do): the freshest evidence of at least that size."""
        merged = LatencyHistogram(self._unit)
        live = self._live(self._epoch(self._now()))
        for i in sorted(live, key=lambda j: self._tags[j], reverse=True):
            merged.merge(self._hists[i])
            if merged.count >= min_count:
                break
        return merged

    @property
    def count(self) -> int:
        """Number of latencies recorded in the live buckets."""
        return sum(self._hists[i].count for i in self._live(self._epoch(self._now())))

    @property
    def is_empty(self) -> bool:
        """True when the live buckets hold no latency and no non-zero counter."""
        for i in self._live(self._epoch(self._now())):
            if self._hists[i].count or any(self._counters[i].values()):
                return False
        return True

    def counter(self, name: str) -> int:
        """Sum of counter ``name`` over the live buckets (0 if never incremented)."""
        return self._counter_at(self._epoch(self._now()), name)

    def _counter_at(self, epoch: int, name: str) -> int:
        return sum(self._counters[i].get(name, 0) for i in self._live(epoch))

    def counters(self) -> dict[str, int]:
        """Every counter with its sum over the live buckets."""
        out: dict[str, int] = {}
        for i in self._live(self._epoch(self._now())):
            for name, n in self._counters[i].items():
                out[name] = out.get(name, 0) + n
        return out

    def span_s(self) -> float:
        """Seconds of time the live buckets cover: from the later of the window's creation and
        the oldest live bucket's start, to now. Between ``width_s - bucket_s`` and ``width_s``
        once the window is older than ``width_s``; the elapsed time before that."""
        return self._span_at(self._now())

    def _span_at(self, now: float) -> float:
        oldest_start = (self._epoch(now) - self._buckets + 1) * self._bucket_s
        return max(0.0, now - max(self._created, oldest_start))

    def rate(self, name: str) -> float:
        """Counter ``name`` per second over ``span_s()``.

        The divisor is never below one second (or one bucket, if buckets are shorter), so a few
        events in a window's first moments read as a handful per second, not thousands, and an
        empty or brand-new window never divides by zero.
        """
        now = self._now()  # one reading for both numerator and divisor
        return self._counter_at(self._epoch(now), name) / max(self._span_at(now), min(1.0, self._bucket_s))

    def __repr__(self) -> str:
        return f"SlidingWindow(width_s={self._width_s!r}, buckets={self._buckets!r}, count={self.count})"
