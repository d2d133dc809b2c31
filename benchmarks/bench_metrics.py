"""Claim (issue 15): one served request's Prometheus updates — a requests counter, four histograms (TTFT, TTFT
answer, E2E, overhead) and three counters (input, output tokens, cost) — cost several times less on the
gateway's own series (``metrics.LocalSeries``: a float, one bisect per observation, no lock) than on
prometheus_client's (a lock per value, a linear scan of the buckets), with the same exposition.

Both run in the same process, same labels, same values, interleaved ``--rounds`` times; prints µs per request
for each and the ratio. Usage: ``python benchmarks/bench_metrics.py [--requests N] [--rounds R] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram

from tailgate.gateway.metrics.gateway_metrics import _LATENCY, _OVERHEAD, Incrementable, LocalSeries, Observable

VALUES = (0.35, 0.12, 0.12, 0.0003)  # seconds: E2E, TTFT, TTFT answer, overhead


def _theirs() -> Callable[[], None]:
    r = CollectorRegistry()
    req = Counter("t_requests", "r", ["alias", "provider", "outcome"], registry=r).labels("a", "p", "ok")
    hists = [
        Histogram(f"t_h{i}", "h", ["alias", "provider"], buckets=_LATENCY, registry=r).labels("a", "p")
        for i in range(3)
    ]
    hists.append(Histogram("t_overhead", "o", ["alias"], buckets=_OVERHEAD, registry=r).labels("a"))
    tokens = Counter("t_tokens", "t", ["provider", "direction"], registry=r)
    counters = [tokens.labels("p", "input"), tokens.labels("p", "output")]
    counters.append(Counter("t_cost", "c", ["provider", "currency"], registry=r).labels("p", "USD"))
    return _request(req, hists, counters)


def _ours() -> Callable[[], None]:
    local = LocalSeries(CollectorRegistry())
    req = local.counter("t_requests", "r", ("alias", "provider", "outcome")).labels("a", "p", "ok")
    hists = [local.histogram(f"t_h{i}", "h", ("alias", "provider"), _LATENCY).labels("a", "p") for i in range(3)]
    hists.append(local.histogram("t_overhead", "o", ("alias",), _OVERHEAD).labels("a"))
    tokens = local.counter("t_tokens", "t", ("provider", "direction"))
    counters = [tokens.labels("p", "input"), tokens.labels("p", "output")]
    counters.append(local.counter("t_cost", "c", ("provider", "currency")).labels("p", "USD"))
    return _request(req, hists, counters)


def _request(req: Incrementable, hists: Sequence[Observable], counters: Sequence[Incrementable]) -> Callable[[], None]:
    inc = req.inc
    observes = [h.observe for h in hists]
    incs = [c.inc for c in counters]
    amounts = (20.0, 100.0, 0.001)

    def one() -> None:
        inc()
        for observe, v in zip(observes, VALUES, strict=True):
            observe(v)
        for add, a in zip(incs, amounts, strict=True):
            add(a)

    return one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 2,000 requests, one round")
    args = ap.parse_args()
    if args.quick:
        args.requests, args.rounds = 2_000, 1
    runs: dict[str, list[float]] = {"prometheus_client": [], "LocalSeries": []}
    fns = {"prometheus_client": _theirs(), "LocalSeries": _ours()}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            runs[name].append(timeit.timeit(fn, number=args.requests) / args.requests * 1e6)
    for name, us in runs.items():
        rounds = ", ".join(f"{u:.2f}" for u in us)
        print(f"{name:18s} {statistics.median(us):6.2f} µs per request's metrics (rounds: {rounds})")
    ratio = statistics.median(runs["LocalSeries"]) / statistics.median(runs["prometheus_client"])
    print(f"LocalSeries ÷ prometheus_client: {ratio:.3f}")


if __name__ == "__main__":
    main()
