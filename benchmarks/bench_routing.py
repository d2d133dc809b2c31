"""Claim: choosing a route with ``adaptive`` costs a few microseconds per request, a small multiple of
``weighted``'s static draw — cheap next to the gateway's per-request overhead.

Prints µs per ``order()`` call for two routes (80/20, both healthy, the router in its steady state) under
``weighted``, ``adaptive`` and ``least-latency``, with the adaptive per-request bookkeeping of an attempt
(``begin`` + ``first_token`` + ``observe``) measured apart, and each one's ratio to ``weighted``.

Second claim (issue 15): reading a routing window's P90 stays cheap however varied the latencies. A minute
at 1,500 req/s of lognormal latencies (90,000 samples) is read as the adaptive policy reads it, first with
the histogram's full resolution (``SlidingWindow()``, as before: up to 2,048 distinct values per power of
two, all twelve buckets merged on every read) and then as the routing windows keep it now
(``precision=ROUTING_PRECISION`` and the closed buckets' merge reused); the ratio is in the same run.
Usage: ``python benchmarks/bench_routing.py [N]``.
"""

from __future__ import annotations

import random
import sys
import timeit
from collections.abc import Callable

from tailgate.routing import SLO, AdaptivePolicy, HealthRegistry, LeastLatencyPolicy, Route, WeightedPolicy
from tailgate.stats.window import ROUTING_PRECISION, SlidingWindow
from tailgate.upstream.events import CallResult

ROUTES = [Route("m", "a", "ma", 80), Route("m", "b", "mb", 20)]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _per_op_us(fn: Callable[[], object], ops: int, repeat: int = 5) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeat)) / ops * 1e6


def main(n: int = 50_000) -> list[tuple[str, float]]:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    ok = CallResult(200, None, 0.0, True, ttft_ms=300.0, e2e_ms=900.0, output_tokens=20)
    rng = random.Random(7)
    for r in ROUTES:  # a minute of healthy, varied samples, so the window views are real
        h = health.get(r.provider, r.model)
        for _ in range(6_000):
            clock.t += 0.01
            ttft = 300.0 * rng.lognormvariate(0.0, 0.3)
            h.observe(CallResult(200, None, 0.0, True, ttft_ms=ttft, e2e_ms=ttft * 3.0, output_tokens=20))
    policies = {
        "weighted": WeightedPolicy(random.Random(1)),
        "adaptive": AdaptivePolicy(health, slo=SLO(1.0, 3.0), clock=clock, rng=random.Random(1)),
        "least-latency": LeastLatencyPolicy(health, rng=random.Random(1)),
    }

    def ordering(policy: object) -> Callable[[], None]:
        order = policy.order  # type: ignore[attr-defined]

        def run() -> None:
            for i in range(n):
                clock.t += 0.001  # 1,000 req/s: the adaptive policy re-judges every 250 requests
                order(ROUTES, "interactive" if i & 1 else None)

        return run

    def bookkeeping() -> None:
        h = health.get("a", "ma")
        for _ in range(n):
            handle = h.begin(stream=True)
            h.first_token(handle)
            h.observe(ok, handle=handle)

    rows = [(name, _per_op_us(ordering(p), n)) for name, p in policies.items()]
    rows.append(("adaptive bookkeeping per attempt", _per_op_us(bookkeeping, n)))
    base = rows[0][1]
    for name, us in rows:
        print(f"{name:34s} {us:7.2f} µs/request   {us / base:5.1f}x weighted")
    return rows + window_reads()


def window_reads(reads: int = 200) -> list[tuple[str, float]]:
    """µs per P90 read of a busy minute's window: full resolution (before) vs the routing windows (now)."""
    clock = Clock()
    full, routing = SlidingWindow(60.0, 12, clock), SlidingWindow(60.0, 12, clock, precision=ROUTING_PRECISION)
    rng = random.Random(3)
    for _ in range(90_000):  # 1,500 req/s for 60 s
        clock.t += 1 / 1500
        v = 300.0 * rng.lognormvariate(0.0, 0.4)
        full.record(v)
        routing.record(v)
    rows = []
    variants = (
        ("full resolution, all merged (before)", full, True),
        ("full resolution, closed reused", full, False),
        ("routing window (now)", routing, False),
    )
    for name, w, every_bucket in variants:
        distinct = len(w.histogram().to_dict()["buckets"]) // 2

        def read(w: SlidingWindow = w, every_bucket: bool = every_bucket) -> None:
            for _ in range(reads):
                clock.t += 0.001  # time moves within the current bucket, as between two judgements
                if every_bucket:
                    w._closed = None  # the read as it was: every live bucket merged again
                w.histogram().percentile(90.0)

        rows.append(("window P90 read, " + name, _per_op_us(read, reads)))
        print(f"{rows[-1][0]:50s} {rows[-1][1]:9.1f} µs/read   ({distinct:,} distinct values)")
    print(f"{'routing window ÷ before':50s} {rows[2][1] / rows[0][1]:9.3f}")
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000)
