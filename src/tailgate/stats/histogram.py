"""A mergeable latency histogram with HdrHistogram's log-linear layout, stored sparsely.

Layout. A recorded value is quantized to an integer ``v = round(value / unit)``. Every integer
below 4096 has a bucket of its own, so small values are exact to the unit. From 4096 up, each
power of two ``[2**k, 2**(k+1))`` is cut into 2048 equal sub-buckets (the HdrHistogram scheme
with 3 significant digits), so a bucket is never wider than 1/2048 of the values in it. With the
bucket midpoint as representative the error is at most half a bucket: relative ``<= 1/4096``
(~0.024 %) above 4096 units, and at most half a unit below.

Buckets live in a dict ``index -> count``: an empty or small histogram is tiny, a merge costs
O(buckets used), and the index is dense and monotone in the value, so serialized deltas are
small integers.

The serialized form is documented in ``tailgate.stats._schema``.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping
from itertools import accumulate
from operator import sub
from typing import Any

import msgspec

from tailgate.stats._schema import VERSION, HistogramDict, HistogramWire, Summary

__all__ = ["LatencyHistogram"]

_SUB_BITS = 11  # 2048 sub-buckets per power of two: HdrHistogram's 3 significant digits
_EXACT_LIMIT = 1 << (_SUB_BITS + 1)  # 4096: below this each integer is its own bucket
_EXACT_BITS = _SUB_BITS + 1
_INF = math.inf


def _midpoint(index: int) -> float:
    """Midpoint, in units, of the integers that fall in bucket ``index``."""
    if index < _EXACT_LIMIT:
        return float(index)
    s = (index >> _SUB_BITS) - 1
    low = (index - (s << _SUB_BITS)) << s
    return low + ((1 << s) - 1) / 2


def _rank(q: float, n: int) -> int:
    """Nearest rank: the smallest k with k >= q% of n, at least 1.

    The product is shrunk by a relative 1e-12 before ``ceil`` so that 99.9 % of 1000 is rank 999,
    not 1000: the float 99.9 is a hair above 99.9 and ``q / 100 * n`` rounds up a few ulps.
    """
    return max(1, math.ceil(q / 100.0 * n * (1.0 - 1e-12)))


class LatencyHistogram:
    """Counts of non-negative values (latencies) in log-linear buckets; mergeable.

    ``unit`` is the resolution in the caller's unit: record milliseconds with the default
    ``unit=0.001`` and values are exact to 1 µs below 4.096 ms and within 0.025 % above.
    ``count``, ``total``, ``min`` and ``max`` are exact (from the recorded values, not the
    buckets); percentiles come from the buckets. An empty histogram reports 0.0 for ``min``,
    ``max``, ``mean`` and every percentile, as HdrHistogram does: check ``count`` first
    where "no data" must not read as "fast".
    """

    __slots__ = ("_cache", "_count", "_counts", "_max", "_min", "_total", "_unit")

    def __init__(self, unit: float = 0.001) -> None:
        if not (0.0 < unit < _INF):
            raise ValueError(f"unit must be a positive finite number, got {unit!r}")
        self._unit = float(unit)
        # defaultdict makes the hot `counts[i] += c` a single subscript on both hit and miss.
        self._counts: defaultdict[int, int] = defaultdict(int)
        self._count = 0
        self._total = 0.0
        self._min = _INF
        self._max = -_INF
        # (count when built, sorted indexes, cumulative counts). Any record/merge changes
        # _count, so a matching count means the cache is current; reset() clears it.
        self._cache: tuple[int, list[int], list[int]] | None = None

    # -- recording (hot path) -------------------------------------------------------------

    def record(self, value: float, count: int = 1) -> None:
        """Add ``count`` occurrences of ``value``; negative, NaN or infinite values raise."""
        # One chained comparison rejects negatives, NaN (compares false) and +inf.
        if not 0.0 <= value < _INF:
            raise ValueError(f"cannot record {value!r}: values must be finite and >= 0")
        if count != 1:
            if count < 0:
                raise ValueError(f"count must be >= 0, got {count!r}")
            if count == 0:
                return
        try:  # free in 3.11 unless raised: value / unit may overflow to inf for a tiny unit
            v = int(value / self._unit + 0.5)
        except OverflowError:
            raise ValueError(f"cannot record {value!r}: too large for unit {self._unit!r}") from None
        if v >= _EXACT_LIMIT:
            s = v.bit_length() - _EXACT_BITS
            v = (s << _SUB_BITS) + (v >> s)
        self._counts[v] += count
        self._count += count
        self._total += value * count
        if value < self._min:
            self._min = value
        if value > self._max:
            self._max = value

    def record_many(self, values: Iterable[float]) -> None:
        """Record each value once (the loop of ``record`` with attribute lookups hoisted)."""
        unit = self._unit
        counts = self._counts
        n = 0
        total = self._total
        lo = self._min
        hi = self._max
        try:
            for value in values:
                if not 0.0 <= value < _INF:
                    raise ValueError(f"cannot record {value!r}: values must be finite and >= 0")
                try:
                    v = int(value / unit + 0.5)
                except OverflowError:
                    raise ValueError(f"cannot record {value!r}: too large for unit {unit!r}") from None
                if v >= _EXACT_LIMIT:
                    s = v.bit_length() - _EXACT_BITS
                    v = (s << _SUB_BITS) + (v >> s)
                counts[v] += 1
                n += 1
                total += value
                if value < lo:
                    lo = value
                if value > hi:
                    hi = value
        finally:
            # On a bad value the ones before it stay recorded, exactly as a loop of record().
            self._count += n
            self._total = total
            self._min = lo
            self._max = hi

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        """Add ``other``'s counts into this histogram (O(buckets used)); returns ``self``."""
        if other._unit != self._unit:
            raise ValueError(f"cannot merge histograms with units {self._unit!r} and {other._unit!r}")
        counts = self._counts
        # Iterating a copy keeps h.merge(h) safe.
        for index, c in list(other._counts.items()):
            counts[index] += c
        self._count += other._count
        self._total += other._total
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)
        self._cache = None
        return self

    def __add__(self, other: LatencyHistogram) -> LatencyHistogram:
        return self.copy().merge(other)

    def copy(self) -> LatencyHistogram:
        """An independent histogram with the same contents."""
        h = LatencyHistogram(self._unit)
        h._counts = self._counts.copy()
        h._count = self._count
        h._total = self._total
        h._min = self._min
        h._max = self._max
        return h

    def reset(self) -> None:
        """Forget every value; the unit stays."""
        self._counts.clear()
        self._count = 0
        self._total = 0.0
        self._min = _INF
        self._max = -_INF
        self._cache = None

    # -- reading ---------------------------------------------------------------------------

    @property
    def unit(self) -> float:
        return self._unit

    @property
    def count(self) -> int:
        return self._count

    @property
    def total(self) -> float:
        """Float sum of the recorded values (not bucket midpoints)."""
        return self._total

    @property
    def mean(self) -> float:
        return self._total / self._count if self._count else 0.0

    @property
    def min(self) -> float:
        return float(self._min) if self._count else 0.0

    @property
    def max(self) -> float:
        return float(self._max) if self._count else 0.0

    def _cumulative(self) -> tuple[list[int], list[int]]:
        cache = self._cache
        if cache is None or cache[0] != self._count:
            indexes = sorted(self._counts)
            cache = (self._count, indexes, list(accumulate(map(self._counts.__getitem__, indexes))))
            self._cache = cache
        return cache[1], cache[2]

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile: the smallest recorded value with at least q % of values <= it.

        Returns the midpoint of that value's bucket, clipped to the exact ``[min, max]``; rank 1
        (q == 0 included) is ``min`` and rank ``count`` is ``max`` exactly. 0.0 when empty.
        """
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"percentile must be within [0, 100], got {q!r}")
        n = self._count
        if n == 0:
            return 0.0
        rank = _rank(q, n)
        if rank == 1:
            return float(self._min)
        if rank >= n:
            return float(self._max)
        indexes, cum = self._cumulative()
        rep = _midpoint(indexes[bisect_left(cum, rank)]) * self._unit
        return float(min(max(rep, self._min), self._max))

    def percentiles(self, qs: Iterable[float]) -> dict[float, float]:
        """``{q: percentile(q)}`` for each q, sharing one cumulative table."""
        return {q: self.percentile(q) for q in qs}

    def summary(self) -> Summary:
        """P50/P90/P95/P99, max, mean and count, under the report key names."""
        return Summary(
            p50=self.percentile(50.0),
            p90=self.percentile(90.0),
            p95=self.percentile(95.0),
            p99=self.percentile(99.0),
            max=self.max,
            mean=self.mean,
            count=self._count,
        )

    def __repr__(self) -> str:
        if not self._count:
            return f"LatencyHistogram(unit={self._unit!r}, count=0)"
        s = self.summary()
        return (
            f"LatencyHistogram(unit={self._unit!r}, count={s['count']}, p50={s['p50']:.6g}, "
            f"p99={s['p99']:.6g}, max={s['max']:.6g})"
        )

    # -- serialization ---------------------------------------------------------------------

    def _to_wire(self) -> HistogramWire:
        counts = self._counts
        indexes = sorted(counts)  # never holds zeros: every write adds a positive count
        flat = [0, 0] * len(indexes)
        # Interleave [delta, count, delta, count, ...] with slice assignment (C loops, not Python).
        flat[0::2] = map(sub, indexes, [0, *indexes[:-1]])
        flat[1::2] = map(counts.__getitem__, indexes)
        empty = self._count == 0
        return HistogramWire(
            version=VERSION,
            unit=self._unit,
            count=self._count,
            total=self._total,
            min=None if empty else float(self._min),
            max=None if empty else float(self._max),
            buckets=flat,
        )

    @classmethod
    def _from_wire(cls, w: HistogramWire) -> LatencyHistogram:
        if w.version != VERSION:
            raise ValueError(f"unsupported histogram version {w.version!r} (this reader knows {VERSION})")
        h = cls(w.unit)
        flat = w.buckets
        if len(flat) % 2:
            raise ValueError("histogram buckets must be [delta, count] pairs (odd length)")
        deltas, counts = flat[0::2], flat[1::2]
        # Indexes strictly increase (only the first delta may be 0) and counts are positive;
        # checked with C-level min() rather than a Python loop, as histograms hold ~10^4 buckets.
        if deltas and (deltas[0] < 0 or min(deltas[1:], default=1) <= 0 or min(counts) <= 0):
            raise ValueError("histogram buckets are invalid: deltas must increase the index, counts be >= 1")
        h._counts.update(zip(accumulate(deltas), counts, strict=True))
        n = sum(counts)
        if n != w.count:
            raise ValueError(f"histogram buckets hold {n} values but count says {w.count}")
        if n == 0:
            if w.min is not None or w.max is not None:
                raise ValueError("an empty histogram must have null min and max")
        else:
            if w.min is None or w.max is None or not 0.0 <= w.min <= w.max < _INF:
                raise ValueError(f"histogram min/max invalid: {w.min!r}, {w.max!r}")
            h._min, h._max = w.min, w.max
        if not 0.0 <= w.total < _INF:
            raise ValueError(f"histogram total invalid: {w.total!r}")
        h._count = n
        h._total = w.total
        return h

    def to_dict(self) -> HistogramDict:
        """The versioned JSON-able form (schema in ``tailgate.stats._schema``)."""
        w = self._to_wire()
        return HistogramDict(
            version=w.version,
            unit=w.unit,
            count=w.count,
            total=w.total,
            min=w.min,
            max=w.max,
            buckets=w.buckets,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyHistogram:
        """Rebuild from ``to_dict()`` output; malformed data raises ``ValueError``."""
        # msgspec.ValidationError is a ValueError subclass, so type errors surface as one too.
        return cls._from_wire(msgspec.convert(data, HistogramWire))

    def to_bytes(self) -> bytes:
        """``to_dict()`` encoded as msgpack."""
        return msgspec.msgpack.encode(self._to_wire())

    @classmethod
    def from_bytes(cls, data: bytes) -> LatencyHistogram:
        """Rebuild from ``to_bytes()`` output; malformed data raises ``ValueError``."""
        try:
            wire = msgspec.msgpack.decode(data, type=HistogramWire)
        except msgspec.DecodeError as exc:  # also covers ValidationError
            raise ValueError(f"invalid histogram bytes: {exc}") from exc
        return cls._from_wire(wire)
