"""Running a bench plan: targets, preflight, levels / rate / stages, worker processes, live progress."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import msgspec
from rich.console import Console
from rich.live import Live
from rich.text import Text

from tailgate.bench.goodput import SLO
from tailgate.bench.loadgen import Bounds, LoadGenerator, Phase, Target, anthropic_body
from tailgate.bench.results import RunRecorder
from tailgate.bench.schema import Load, Run
from tailgate.bench.tracing import RunTrace
from tailgate.bench.workload import RequestBody, TraceEntry, Workload
from tailgate.config.units import DURATION_FORMS, parse_duration
from tailgate.upstream import Endpoint, Timeouts, UpstreamClient, call
from tailgate.wire.anthropic import API_VERSION

if TYPE_CHECKING:
    from tailgate.telemetry.settings import Settings


class PlanError(ValueError):
    """A load option is malformed; the message names the offending token."""


@dataclass(frozen=True)
class TargetSpec:
    """A target as the command line (or a gateway config) described it; picklable for worker processes."""

    name: str
    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeouts: Timeouts = field(default_factory=Timeouts)
    headers: tuple[tuple[str, str], ...] = ()
    api: str = "openai"
    """``openai`` or ``anthropic`` (``--api``): the protocol of ``base_url`` (loadgen.Target.path)."""

    def build(self, max_connections: int) -> Target:
        endpoint = Endpoint(
            name=self.name,
            base_url=self.base_url,
            api_keys=(self.api_key,) if self.api_key else (),
            timeouts=self.timeouts,
            max_connections=max_connections,
            headers=dict(self.headers),
        )
        return Target(self.name, UpstreamClient(endpoint), self.model, self.api)


@dataclass(frozen=True)
class Plan:
    mode: str  # "closed" | "open" | "stages"
    bounds: Bounds
    levels: tuple[int, ...] = ()
    rate: float = 0.0
    arrival: str = "constant"
    stages: tuple[tuple[float, int], ...] = ()
    replay: tuple[TraceEntry, ...] = ()
    time_scale: float = 1.0
    replay_name: str = ""

    slo: SLO | None = None
    """Per-request SLO of ``--goodput``: every run counts its good requests."""
    level_requests: tuple[int, ...] = ()
    """Closed loop: this worker's ``--requests`` for each level (set by :meth:`share`); empty: ``bounds``."""

    def share(self, workers: int, index: int) -> Plan:
        """This worker's part of the load: concurrency, rate, stage targets and trace split evenly.

        ``--requests`` follows the load: a level's requests go to the workers that got some of its
        concurrency, in proportion to it (concurrency 1 over 2 workers: one worker gets all of them,
        the other none), so the workers' requests add up to the total at every level.
        """

        def split(n: int) -> int:
            return _split(n, workers)[index]

        def mine(weights: list[int]) -> int:
            assert total is not None
            return apportion(total, weights)[index]

        total = self.bounds.requests
        bounds = self.bounds
        level_requests: tuple[int, ...] = ()
        if total is not None:
            level_requests = tuple(mine(_split(c, workers)) for c in self.levels)
            if self.mode == "stages":  # by each worker's peak number of virtual users
                requests = mine(
                    [max((_split(v, workers)[k] for _, v in self.stages), default=0) for k in range(workers)]
                )
            elif self.mode == "replay":
                requests = mine([len(self.replay[k::workers]) for k in range(workers)])
            elif self.mode == "closed" and level_requests:
                requests = max(level_requests)
            else:  # open loop: every worker has the same rate
                requests = mine([1] * workers)
            bounds = replace(bounds, requests=requests)
        return replace(
            self,
            bounds=bounds,
            levels=tuple(split(c) for c in self.levels),
            rate=self.rate / workers,
            stages=tuple((s, split(v)) for s, v in self.stages),
            replay=self.replay[index::workers],
            level_requests=level_requests,
        )

    def bounds_for_level(self, i: int) -> Bounds:
        """The bounds of closed-loop level ``i`` (this worker's requests for it when shared)."""
        if i < len(self.level_requests):
            return replace(self.bounds, requests=self.level_requests[i])
        return self.bounds


def _split(n: int, workers: int) -> list[int]:
    """``n`` split evenly over ``workers`` (the first ones get one more)."""
    return [n // workers + (1 if k < n % workers else 0) for k in range(workers)]


def apportion(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights``, in whole numbers that add up to ``total``
    (largest remainders first, ties to the lower index); all zero when every weight is zero."""
    whole = sum(weights)
    if whole <= 0:
        return [0] * len(weights)
    exact = [total * w / whole for w in weights]
    out = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda k: (-(exact[k] - out[k]), k))
    for k in order[: total - sum(out)]:
        out[k] += 1
    return out


def parse_levels(text: str) -> tuple[int, ...]:
    levels = []
    for token in text.split(","):
        token = token.strip()
        if not token.isdigit() or int(token) < 1:
            raise PlanError(f"--concurrency: {token!r} is not a positive integer (use e.g. 1,10,50,100)")
        levels.append(int(token))
    return tuple(levels)


_STAGE = re.compile(r"^\s*([^:]+):(\d+)\s*$")


def parse_stages(text: str) -> tuple[tuple[float, int], ...]:
    """``30s:10,1m:50,30s:0`` → ((30, 10), (60, 50), (30, 0))."""
    out = []
    for token in text.split(","):
        match = _STAGE.match(token)
        if match is None:
            raise PlanError(f"--stages: {token!r} is not DURATION:TARGET (use e.g. 30s:10,1m:50,30s:0)")
        try:
            seconds = float(parse_duration(match.group(1)))
        except ValueError:
            raise PlanError(f"--stages: {match.group(1)!r} in {token!r} is not a duration ({DURATION_FORMS})") from None
        out.append((seconds, int(match.group(2))))
    return tuple(out)


async def preflight(specs: list[TargetSpec]) -> list[str]:
    """One tiny request per target before the run: problems that would make every request fail."""
    problems = []
    for spec in specs:
        target = spec.build(2)
        body: RequestBody = {"model": spec.model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
        headers = None
        if spec.api == "anthropic":
            body, headers = anthropic_body(body), {"anthropic-version": API_VERSION}
        try:
            result = await call(
                target.client, target.path, body, stream=False, headers=headers, dialect=target.dialect
            ).collect()
        finally:
            await target.client.close()
        if result.error_class == "connect":
            problems.append(
                f"cannot reach target {spec.name!r} at {spec.base_url}: {result.detail or 'connection failed'}"
            )
        elif result.status in (401, 403):
            problems.append(f"target {spec.name!r} refused the API key (HTTP {result.status}): {result.error}")
        elif result.status == 404:
            problems.append(f"target {spec.name!r} answered 404 for model {spec.model!r}: {result.error}")
        elif result.error_class == "malformed":
            kind = "Anthropic's Messages API" if spec.api == "anthropic" else "an OpenAI API"
            problems.append(f"target {spec.name!r} does not answer like {kind} (malformed): {result.detail}")
    return problems


async def run_plan(
    specs: list[TargetSpec],
    workload: Workload,
    plan: Plan,
    stop: asyncio.Event,
    on_phase: Callable[[Phase], None] | None = None,
    trace: RunTrace | None = None,
) -> list[Run]:
    """Run the whole plan in this process; return the run objects in order. ``trace``: a span per phase and
    per request (bench/tracing.py)."""
    # Closed loop never has more requests in flight than workers; an open loop has as many as the
    # server holds, so its pool must not cap them (a capped pool would queue requests inside the
    # generator, where neither the schedule lag nor the server sees it).
    max_conn = 10_000 if plan.mode == "open" else max([*plan.levels, *(v for _, v in plan.stages), 1]) + 16
    targets = [spec.build(max_conn) for spec in specs]
    gen = LoadGenerator(targets, workload, stop=stop)
    gen.on_phase = on_phase
    gen.slo = plan.slo
    gen.trace = trace
    runs: list[RunRecorder] = []
    try:
        if plan.mode == "closed":
            for i, level in enumerate(plan.levels):
                runs += (
                    await gen.closed(level, plan.bounds_for_level(i))
                    if level > 0
                    else _empty(targets, Load(mode="closed", concurrency=level))
                )
                if stop.is_set():
                    break
        elif plan.mode == "replay":
            runs += await gen.replay(list(plan.replay), plan.time_scale, plan.bounds, plan.replay_name)
        elif plan.mode == "open":
            runs += await gen.open(plan.rate, plan.bounds, arrival=plan.arrival, seed=os.getpid())
        else:
            for group in await gen.stages(list(plan.stages), plan.bounds):
                runs += group
    finally:
        for t in targets:
            await t.client.close()
    return [r.to_run() for r in runs]


def _empty(targets: list[Target], load: Load) -> list[RunRecorder]:
    recs = [RunRecorder(t.describe(), load) for t in targets]
    now = time.perf_counter()
    for r in recs:
        r.start(now)
        r.stop(now)
    return recs


def _worker_entry(
    specs: list[TargetSpec], workload: Workload, plan: Plan, traced: tuple[Settings, str] | None
) -> tuple[list[Run], tuple[int, int, int]]:
    """One worker's share; with ``traced`` (the settings, the run's root as a ``traceparent``) its spans go under
    the parent's root. Returns its runs and its spans (made, exported, dropped)."""
    from tailgate._runtime import run

    trace = RunTrace(traced[0], parent=traced[1]) if traced is not None else None
    try:
        runs = run(lambda stop: run_plan(specs, workload, plan, stop, trace=trace))
    finally:
        report = trace.close() if trace is not None else None
    return runs, (report.spans, report.exported, report.dropped) if report is not None else (0, 0, 0)


def run_workers(
    specs: list[TargetSpec], workload: Workload, plan: Plan, workers: int, trace: RunTrace | None = None
) -> list[Run]:
    """Run the plan in ``workers`` processes (each with its share) and merge their runs exactly; with ``trace``
    every worker exports its spans under its root (their counts are added to ``trace``'s)."""
    ctx = multiprocessing.get_context("spawn")
    traced = (trace.settings, trace.traceparent()) if trace is not None else None
    with ctx.Pool(workers) as pool:
        shares = [
            (specs, replace(workload, seed=workload.seed + i), plan.share(workers, i), traced) for i in range(workers)
        ]
        outcomes = pool.starmap(_worker_entry, shares)
        results = [runs for runs, _ in outcomes]
        # Let the workers exit by themselves: leaving the block without this terminates them with
        # SIGTERM, which a worker ignores once its event loop has installed (and left) its own SIGTERM
        # handler, and then the pool's join waits forever (seen in benchmarks/loadgen_capacity.py).
        pool.close()
        pool.join()
    # Each worker labels its runs with its share (concurrency 4 of 8, or 0 of 1); the merged run is the
    # whole level, and shares of an uneven split must carry one label to merge at all.
    for runs in results:
        for j, run_ in enumerate(runs):
            run_.load = _whole_load(run_.load, plan, j // max(1, len(specs)))
    merged: list[Run] = []
    for parts in zip(*results, strict=False):
        acc = RunRecorder.from_run(parts[0])
        for other in parts[1:]:
            acc.merge(RunRecorder.from_run(other))
        merged.append(acc.to_run())
    if trace is not None:
        for _, counts in outcomes:
            trace.add_worker_spans(*counts)
    return merged


def _whole_load(load: Load, plan: Plan, k: int) -> Load:
    """A worker's run label with its share replaced by the whole plan's value for phase ``k``."""
    if load.mode == "closed" and k < len(plan.levels):
        return msgspec.structs.replace(load, concurrency=plan.levels[k])
    if load.mode == "open":
        return msgspec.structs.replace(load, rate=plan.rate)
    if load.mode == "stage" and k < len(plan.stages):
        return msgspec.structs.replace(load, from_=plan.stages[k - 1][1] if k else 0, to=plan.stages[k][1])
    return load


class Progress:
    """Live view of the phase in progress (done/total, req/s, live P90, errors)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.phase: Phase | None = None
        # Rich refreshes a live view from a thread of its own, 4 times a second, even when there is no
        # terminal to draw on; each refresh holds the GIL the event loop needs, and in the open loop
        # they showed as a 4 Hz comb of 0.5-1 ms schedule lags (docs/benchmarks.md). With no
        # terminal (a file, a pipe, a CI log) nothing would be drawn: no refresh thread at all.
        self.live = Live(
            console=console,
            refresh_per_second=4,
            transient=True,
            get_renderable=self._render,
            auto_refresh=console.is_terminal,
        )

    async def lines(self, every: float = 5.0) -> None:
        """Off a terminal (a pipe, a CI log) nothing is drawn: print the live line every ``every`` seconds
        instead, so a reader knows the run goes on (one short print per 5 s; no refresh thread)."""
        if self.console.is_terminal:
            return
        while True:
            await asyncio.sleep(every)
            if self.phase is not None:
                self.console.print(f"progress: {self._render().plain}", markup=False, highlight=False)

    def on_phase(self, phase: Phase) -> None:
        if self.phase is not None:
            self.console.print(f"done: {self.phase.label} — {self.phase.done} requests, {self.phase.errors} errors")
        self.phase = phase

    def _render(self) -> Text:
        # One line of text: a rich Table took ~1 ms to lay out and draw (a line ~0.1 ms), all of it
        # holding the GIL the event loop needs to keep an open loop's schedule.
        p = self.phase
        if p is None:
            return Text("")
        elapsed = max(1e-6, time.perf_counter() - p.started)
        p90s = [v for r in p.recorders if (v := r.live_p90_e2e()) is not None]
        done = f"{p.done}" + (f"/{p.total}" if p.total else "")
        p90 = f"{max(p90s):.0f} ms" if p90s else "-"
        return Text(
            f"{p.label}   done {done}   {p.done / elapsed:.1f} req/s   {p.in_flight} in flight   "
            f"live P90 E2E {p90}   {p.errors} errors",
            no_wrap=True,
            overflow="ellipsis",
        )
