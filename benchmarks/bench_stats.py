"""Claim: recording into the stats layer costs a fraction of a microsecond per value.

Prints ns/op for the hot paths and each one's ratio to ``list.append`` of the same float (the
cheapest thing a hot path could do with a sample). Usage: ``python benchmarks/bench_stats.py [N]``.
"""

from __future__ import annotations

import random
import sys
import timeit
from collections.abc import Callable

from tailgate.stats import EWMA, LatencyHistogram, PeakEWMA, SlidingWindow


def _per_op_ns(fn: Callable[[], object], ops: int, repeat: int = 5) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeat)) / ops * 1e9


def main(n: int = 200_000) -> list[tuple[str, float]]:
    rng = random.Random(1)
    # Latencies in ms: mostly tens to hundreds, a long tail to minutes.
    xs = [rng.lognormvariate(4.0, 1.2) for _ in range(n)]

    def appended() -> None:
        out: list[float] = []
        add = out.append
        for x in xs:
            add(x)

    def recorded() -> None:
        rec = LatencyHistogram().record
        for x in xs:
            rec(x)

    def recorded_many() -> None:
        LatencyHistogram().record_many(xs)

    def windowed() -> None:
        rec = SlidingWindow(60.0, 12).record
        for x in xs:
            rec(x)

    def ewma() -> None:
        up = EWMA(tau_s=10.0).update
        for x in xs:
            up(x)

    def peak() -> None:
        up = PeakEWMA(tau_s=10.0).update
        for x in xs:
            up(x)

    full = LatencyHistogram()
    full.record_many(xs)
    full.percentile(99.0)

    def percentile_cached() -> None:
        for _ in range(1000):
            full.percentile(99.0)

    def percentile_after_record() -> None:
        for _ in range(20):
            full.record(1.0)
            full.percentile(99.0)

    blob = full.to_bytes()

    buckets = len(full.to_dict()["buckets"]) // 2
    rows = [
        ("list.append (baseline)", _per_op_ns(appended, n)),
        ("LatencyHistogram.record", _per_op_ns(recorded, n)),
        ("LatencyHistogram.record_many (per value)", _per_op_ns(recorded_many, n)),
        ("SlidingWindow.record (monotonic clock)", _per_op_ns(windowed, n)),
        ("EWMA.update", _per_op_ns(ewma, n)),
        ("PeakEWMA.update", _per_op_ns(peak, n)),
        ("percentile(99), cached", _per_op_ns(percentile_cached, 1000)),
        (f"percentile(99) after a record ({buckets} buckets)", _per_op_ns(percentile_after_record, 20)),
        ("to_bytes", _per_op_ns(full.to_bytes, 1)),
        ("from_bytes", _per_op_ns(lambda: LatencyHistogram.from_bytes(blob), 1)),
    ]
    base = rows[0][1]
    print(f"{n} lognormal latencies; serialized histogram {len(blob)} bytes")
    print(f"{'operation':<52} {'ns/op':>12} {'x append':>9}")
    for name, ns in rows:
        print(f"{name:<52} {ns:>12,.0f} {ns / base:>9.1f}")
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
