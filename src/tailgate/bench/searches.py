"""Searches over load levels, run through the load generator: ``--find-max`` and ``--find-limit``.

Each target is searched on its own (its levels depend on its own answers), one after another; the
runs of every search go into the results document like any sweep's runs, and each search adds one
entry to ``capacity`` or ``limits``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import replace

from tailgate.bench.finder import FindSpec, find_max
from tailgate.bench.goodput import SLO
from tailgate.bench.loadgen import Bounds, LoadGenerator, Phase
from tailgate.bench.ratelimit import LimitSpec, find_limit
from tailgate.bench.runner import TargetSpec
from tailgate.bench.schema import Capacity, LimitEntry, Run
from tailgate.bench.tracing import RunTrace
from tailgate.bench.workload import Workload


async def run_find_max(
    specs: list[TargetSpec],
    workload: Workload,
    bounds: Bounds,
    spec: FindSpec,
    stop: asyncio.Event,
    *,
    slo: SLO | None = None,
    arrival: str = "constant",
    on_phase: Callable[[Phase], None] | None = None,
    trace: RunTrace | None = None,
) -> tuple[list[Run], list[Capacity]]:
    """(all runs, one capacity entry per target)."""
    runs: list[Run] = []
    entries: list[Capacity] = []
    for ts in specs:
        max_conn = 10_000 if spec.by == "rate" else int(spec.ceiling) + 16
        target = ts.build(max_conn)
        gen = LoadGenerator([target], workload, stop=stop)
        gen.slo = slo
        gen.on_phase = on_phase
        gen.trace = trace

        async def level(x: float, gen: LoadGenerator = gen) -> Run:
            if spec.by == "concurrency":
                recs = await gen.closed(int(x), bounds)
            else:
                recs = await gen.open(x, bounds, arrival=arrival, seed=os.getpid())
            return recs[0].to_run()

        try:
            made, entry = await find_max(spec, level, stopped=stop.is_set)
        finally:
            await target.client.close()
        offset = len(runs)
        entry.runs = [offset + i for i in entry.runs]
        runs += made
        entries.append(entry)
    return runs, entries


async def run_find_limit(
    specs: list[TargetSpec],
    workload: Workload,
    spec: LimitSpec,
    stop: asyncio.Event,
    *,
    slo: SLO | None = None,
    on_phase: Callable[[Phase], None] | None = None,
    trace: RunTrace | None = None,
) -> tuple[list[Run], list[LimitEntry]]:
    """(all runs, one limit entry per target)."""
    runs: list[Run] = []
    entries: list[LimitEntry] = []
    for ts in specs:
        target = ts.build(10_000)
        gen = LoadGenerator([target], workload, stop=stop)
        gen.slo = slo
        gen.on_phase = on_phase
        gen.trace = trace

        async def at(rate: float, seconds: float, gen: LoadGenerator = gen) -> Run:
            bounds = replace(Bounds(), duration=seconds, warmup=spec.warmup_s)
            recs = await gen.open(rate, bounds, seed=os.getpid())
            return recs[0].to_run()

        try:
            made, entry = await find_limit(spec, at, stopped=stop.is_set)
        finally:
            await target.client.close()
        runs += made
        entries.append(entry)
    return runs, entries
