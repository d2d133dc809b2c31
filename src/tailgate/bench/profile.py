"""A bench profile run for someone else's schedule: the monitor's peak-hour load test.

The monitor does not import bench (faces never import each other); the CLI hands it :func:`run_profile`
as a callable. A profile is a short closed-loop sweep (``levels``) and, optionally, a capacity search
(``find_max``) over the same target, each level bounded by ``max_requests`` so that it stays within the
provider's pacing limits (the monitor computes that bound from ``limits.rpm``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import msgspec
from msgspec import Struct

from tailgate.bench.finder import FindSpec, find_max
from tailgate.bench.loadgen import Bounds, LoadGenerator, Target
from tailgate.bench.schema import Capacity, Run
from tailgate.bench.thresholds import parse_threshold
from tailgate.bench.workload import LengthDist, Workload
from tailgate.upstream import Endpoint, UpstreamClient


class ProfileLevel(Struct, kw_only=True):
    """One level of the sweep, as the monitor stores it (the load test's ``detail``)."""

    concurrency: int | None
    requests: int
    errors: int
    req_per_s: float | None
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    e2e_p90_ms: float | None
    e2e_p99_ms: float | None


class ProfileResult(Struct, kw_only=True):
    """What a profile run hands the monitor to store (``monitor.peak.ProfileResult`` is its shape)."""

    levels: list[ProfileLevel]
    requests: int
    errors: int
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    e2e_p90_ms: float | None
    e2e_p99_ms: float | None
    decay_p99_e2e: float | None
    capacity: float | None
    capacity_by: str | None
    capacity_summary: str | None

    def detail(self) -> str:
        """The levels as the JSON text the monitor keeps (``load_tests.detail``)."""
        return json.dumps(msgspec.to_builtins(self.levels))


def _level(run: Run) -> ProfileLevel:
    return ProfileLevel(
        concurrency=run.load.get_concurrency(),
        requests=run.requests,
        errors=run.requests - run.successes,
        req_per_s=run.throughput.req_per_s,
        ttft_p90_ms=run.metric("ttft_ms", "p90"),
        ttft_p99_ms=run.metric("ttft_ms", "p99"),
        e2e_p90_ms=run.metric("e2e_ms", "p90"),
        e2e_p99_ms=run.metric("e2e_ms", "p99"),
    )


async def run_profile(
    endpoint: Endpoint,
    model: str,
    *,
    levels: Sequence[int],
    duration_s: float,
    warmup_s: float = 1.0,
    max_tokens: int = 128,
    input_tokens: int = 128,
    find_max_expr: Sequence[str] = (),
    max_requests: int | None = None,
    ceiling: int = 256,
) -> ProfileResult:
    """Run the sweep (and the search) against one provider × model; return the numbers to store."""
    client = UpstreamClient(endpoint)
    target = Target(endpoint.name, client, model)
    workload = Workload(input_tokens=LengthDist(input_tokens), max_tokens=max_tokens, stream=True)
    gen = LoadGenerator([target], workload, stop=asyncio.Event())
    # A request cap (the provider's rpm budget) counts every request sent, so a paced level has no
    # warm-up: each request it may send is a measured one.
    bounds = Bounds(duration=duration_s, warmup=0.0 if max_requests else warmup_s, requests=max_requests)
    out: list[ProfileLevel] = []
    capacity: Capacity | None = None
    try:
        for c in sorted(set(levels)):
            recs = await gen.closed(c, bounds)
            out.append(_level(recs[0].to_run()))
        if find_max_expr:
            spec = FindSpec(tuple(parse_threshold(e) for e in find_max_expr), "concurrency", 1, ceiling, 0.1, 3)

            async def level(x: float) -> Run:
                return (await gen.closed(int(x), bounds))[0].to_run()

            _, capacity = await find_max(spec, level)
    finally:
        await client.close()
    top, low = (out[-1], out[0]) if out else (None, None)
    decay = None
    if top is not None and low is not None and top.e2e_p99_ms and low.e2e_p99_ms:
        decay = round(top.e2e_p99_ms / low.e2e_p99_ms, 3)
    return ProfileResult(
        levels=out,
        requests=sum(lv.requests for lv in out),
        errors=sum(lv.errors for lv in out),
        ttft_p90_ms=None if top is None else top.ttft_p90_ms,
        ttft_p99_ms=None if top is None else top.ttft_p99_ms,
        e2e_p90_ms=None if top is None else top.e2e_p90_ms,
        e2e_p99_ms=None if top is None else top.e2e_p99_ms,
        decay_p99_e2e=decay,
        capacity=None if capacity is None else capacity.answer,
        capacity_by=None if capacity is None else "concurrency",
        capacity_summary=None if capacity is None else capacity.summary,
    )
