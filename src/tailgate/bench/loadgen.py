"""The load generator: closed loop (concurrency), open loop (rate from intended send times), stages.

Every request goes through the measurement core (``tailgate.upstream.call``), so bench numbers mean
what the gateway's numbers mean. With several targets, requests are interleaved target by target (one
global turn counter), so a drifting provider hits every target alike.

Open loop: request *i* is due at ``t0 + i/rate`` (constant) or after exponential gaps (Poisson). Its
latency is counted from that intended time — a slow server cannot slow the schedule down and hide its
own queueing (no coordinated omission, as in wrk2). The schedule lag (actual − intended send) is
reported beside it; a large lag means the generator itself could not keep up.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tailgate.accuracy import grade
from tailgate.bench.results import RunRecorder
from tailgate.bench.workload import RequestSpec, TraceEntry, Workload
from tailgate.upstream import Body, CallResult, Chunk, UpstreamClient, call


@dataclass
class Target:
    """One endpoint under test."""

    name: str
    client: UpstreamClient
    model: str

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "base_url": self.client.endpoint.base_url, "model": self.model}


@dataclass
class Bounds:
    """When a run (one level or stage) ends: whichever comes first."""

    duration: float | None = 30.0
    requests: int | None = None
    warmup: float = 0.0
    """Seconds at the start whose requests are sent but not counted."""
    max_errors: int | None = None


@dataclass
class Phase:
    """Live state of the run in progress (read by the progress display)."""

    label: str
    recorders: list[RunRecorder]
    total: int | None
    started: float = field(default_factory=time.perf_counter)
    sent: int = 0
    sent_by: dict[int, int] = field(default_factory=dict)
    """Sent per target index (``--requests`` bounds each target)."""
    in_flight: int = 0
    stop: bool = False

    @property
    def done(self) -> int:
        return sum(r.requests for r in self.recorders)

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.recorders)


async def one_request(
    target: Target, workload: Workload, spec: RequestSpec | None = None
) -> tuple[CallResult, bool | None]:
    """Send one request of the workload to a target; return its result and, for tasks, whether it was right."""
    spec = spec or workload.next()
    body = {**spec.body, "model": target.model}
    headers = {"x-tailgate-class": spec.traffic_class} if spec.traffic_class else None
    text: list[str] = []
    async with call(
        target.client, "/chat/completions", body, stream=spec.stream, client_wants_usage=True, headers=headers
    ) as c:
        async for event in c:
            if spec.task is not None and isinstance(event, Chunk | Body):
                text.append(_content(event.raw))
    result = c.result
    assert result is not None
    right = grade(spec.task, "".join(text)) if spec.task is not None and result.ok else None
    return result, right


def _content(raw: bytes) -> str:
    """The assistant text in one SSE frame or a whole body (only for accuracy grading)."""
    import json

    out = []
    for line in raw.split(b"\n"):
        data = line[5:].strip() if line.startswith(b"data:") else (line if line.startswith(b"{") else b"")
        if not data or data == b"[DONE]":
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        for choice in obj.get("choices") or []:
            part = (choice.get("delta") or choice.get("message") or {}).get("content")
            if part:
                out.append(part)
    return "".join(out)


class LoadGenerator:
    """Runs phases against targets; one instance per process."""

    def __init__(self, targets: list[Target], workload: Workload, *, stop: asyncio.Event | None = None) -> None:
        self.targets = targets
        self.workload = workload
        self.stop = stop or asyncio.Event()
        self.phase: Phase | None = None
        self._turn = itertools.count()
        self.on_phase: Callable[[Phase], None] | None = None

    def _next_target(self) -> int:
        return next(self._turn) % len(self.targets)

    def _new_phase(self, label: str, load: dict[str, Any], bounds: Bounds) -> Phase:
        recorders = [RunRecorder(t.describe(), dict(load)) for t in self.targets]
        phase = Phase(label, recorders, bounds.requests)
        self.phase = phase
        if self.on_phase is not None:
            self.on_phase(phase)
        return phase

    def _should_stop(self, phase: Phase, bounds: Bounds, end: float | None, target: int | None = None) -> bool:
        if phase.stop or self.stop.is_set():
            return True
        if end is not None and time.perf_counter() >= end:
            return True
        if bounds.requests is not None:  # per target: a worker of one target stops on its target's count
            if target is not None and phase.sent_by.get(target, 0) >= bounds.requests:
                return True
            if phase.sent >= bounds.requests * len(self.targets):
                return True
        return bounds.max_errors is not None and phase.errors >= bounds.max_errors

    async def _send(
        self,
        phase: Phase,
        counting: Callable[[], bool],
        intended: float | None = None,
        spec: RequestSpec | None = None,
        target: int | None = None,
    ) -> None:
        idx = self._next_target() if target is None else target
        phase.sent += 1
        phase.sent_by[idx] = phase.sent_by.get(idx, 0) + 1
        phase.in_flight += 1
        # Open loop: how late this request leaves against its schedule (0 for closed loop).
        lag_ms = max(0.0, (time.perf_counter() - intended) * 1000.0) if intended is not None else 0.0
        try:
            result, right = await one_request(self.targets[idx], self.workload, spec)
        finally:
            phase.in_flight -= 1
        if counting() and result.error_class != "cancelled":
            phase.recorders[idx].add(result, lag_ms=lag_ms, t_done=time.perf_counter(), accuracy=right)

    # -- closed loop -----------------------------------------------------------------------------

    async def closed(self, concurrency: int, bounds: Bounds, load: dict[str, Any] | None = None) -> list[RunRecorder]:
        """``concurrency`` workers, each sending its next request as soon as the previous one ends."""
        phase = self._new_phase(
            f"concurrency {concurrency}", load or {"mode": "closed", "concurrency": concurrency}, bounds
        )
        t0 = time.perf_counter()
        measure_from = t0 + bounds.warmup
        end = measure_from + bounds.duration if bounds.duration is not None else None
        started = False

        def counting() -> bool:
            nonlocal started
            if not started and time.perf_counter() >= measure_from:
                started = True
                for rec in phase.recorders:
                    rec.start(measure_from)
            return started

        # Workers start spread over the warm-up (at most 1 s): N workers started at once stay in
        # lockstep (equal latencies end together and start together), a burst no real user population
        # makes and one that would charge the server's accept queue to the first requests of each wave.
        ramp = min(1.0, bounds.warmup)

        n = len(self.targets)

        async def worker(k: int) -> None:
            # Each target gets its own `concurrency` workers (so each sees the level asked for, whatever
            # the other's speed); their starts alternate between targets, so sends interleave in time.
            if ramp > 0:
                await asyncio.sleep(ramp * (k // n) / concurrency)
            while not self._should_stop(phase, bounds, end, k % n):
                await self._send(phase, counting, target=k % n)

        await self._run_workers([worker(k) for k in range(concurrency * n)], phase, end)
        counting()
        stop_t = time.perf_counter() if end is None else min(end, time.perf_counter())
        for rec in phase.recorders:
            if not started:
                rec.start(measure_from)
            rec.stop(stop_t)
        return phase.recorders

    # -- open loop --------------------------------------------------------------------------------

    async def open(
        self, rate: float, bounds: Bounds, *, arrival: str = "constant", seed: int = 0, max_in_flight: int = 10_000
    ) -> list[RunRecorder]:
        """Send at ``rate`` req/s from a schedule; latency counts from each request's intended send time."""
        load = {"mode": "open", "rate": rate, "arrival": arrival}
        phase = self._new_phase(f"rate {rate:g}/s", load, bounds)
        rng = random.Random(seed)
        t0 = time.perf_counter() + 0.005
        measure_from = t0 + bounds.warmup
        end = measure_from + bounds.duration if bounds.duration is not None else None
        for rec in phase.recorders:
            rec.start(measure_from)
        tasks: set[asyncio.Task[None]] = set()
        intended = t0
        while not self._should_stop(phase, bounds, end):
            delay = intended - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if phase.in_flight >= max_in_flight:
                await asyncio.sleep(0.001)  # the schedule keeps its times: the lag will show this wait
                continue
            counted = _const(intended >= measure_from)
            task = asyncio.create_task(self._send(phase, counted, intended))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            # The schedule runs at rate × targets and alternates targets: each target gets `rate`.
            total_rate = rate * len(self.targets)
            gap = 1.0 / total_rate if arrival == "constant" else rng.expovariate(total_rate)
            intended += gap
        if tasks:
            await self._drain(tasks, phase)
        stop_t = min(end, time.perf_counter()) if end is not None else time.perf_counter()
        for rec in phase.recorders:
            rec.stop(stop_t)
        return phase.recorders

    # -- replay -----------------------------------------------------------------------------------

    async def replay(
        self, entries: list[TraceEntry], time_scale: float, bounds: Bounds, name: str
    ) -> list[RunRecorder]:
        """Send a recorded trace on its own schedule (× ``time_scale``), open loop: latency from intended send."""
        span = entries[-1].t * time_scale
        load = {
            "mode": "open",
            "replay": name,
            "time_scale": time_scale,
            "rate": round(len(entries) / span, 3) if span > 0 else None,
        }
        phase = self._new_phase(f"replay {name}", load, bounds)
        t0 = time.perf_counter() + 0.005
        end = t0 + bounds.duration if bounds.duration is not None else None
        for rec in phase.recorders:
            rec.start(t0)
        tasks: set[asyncio.Task[None]] = set()
        for entry in entries:
            if self._should_stop(phase, bounds, end):
                break
            intended = t0 + entry.t * time_scale
            delay = intended - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self._send(phase, _const(True), intended, self.workload.for_entry(entry)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await self._drain(tasks, phase)
        for rec in phase.recorders:
            rec.stop(time.perf_counter())
        return phase.recorders

    # -- stages (k6 ramping VUs) -------------------------------------------------------------------

    async def stages(self, plan: list[tuple[float, int]], bounds: Bounds) -> list[list[RunRecorder]]:
        """Concurrency ramps linearly from the previous stage's target to each stage's target."""
        out = []
        current = 0.0
        for i, (seconds, target_vus) in enumerate(plan):
            load = {"mode": "stage", "stage": i, "from": round(current), "to": target_vus, "duration_s": seconds}
            phase = self._new_phase(f"stage {i + 1}: {round(current)}→{target_vus}", load, bounds)
            start = time.perf_counter()
            end = start + seconds
            for rec in phase.recorders:
                rec.start(start)
            begin = current
            peak = max(int(begin), target_vus, 1)

            def allowed(
                begin: float = begin, start: float = start, seconds: float = seconds, goal: int = target_vus
            ) -> float:
                frac = min(1.0, (time.perf_counter() - start) / seconds) if seconds > 0 else 1.0
                return begin + (goal - begin) * frac

            n = len(self.targets)

            async def vu(
                k: int, phase: Phase = phase, end: float = end, allowed: Callable[[], float] = allowed, n: int = n
            ) -> None:
                while not self._should_stop(phase, bounds, end, k % n):
                    if k // n < allowed():  # per target, like the closed loop
                        await self._send(phase, lambda: True, target=k % n)
                    else:
                        await asyncio.sleep(0.05)

            await self._run_workers([vu(k) for k in range(peak * n)], phase, end)
            for rec in phase.recorders:
                rec.stop(min(end, time.perf_counter()))
            out.append(phase.recorders)
            current = float(target_vus)
            if self.stop.is_set():
                break
        return out

    # -- plumbing ---------------------------------------------------------------------------------

    async def _run_workers(self, coros: list[Any], phase: Phase, end: float | None) -> None:
        tasks = [asyncio.create_task(c) for c in coros]
        await self._drain(set(tasks), phase)

    async def _drain(self, tasks: set[asyncio.Task[None]], phase: Phase) -> None:
        """Wait for the tasks; on Ctrl-C (the stop event) cancel what is in flight and keep the results."""
        stopper: asyncio.Task[Any] = asyncio.create_task(self.stop.wait())
        try:
            pending: set[asyncio.Task[Any]] = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending | {stopper}, return_when=asyncio.FIRST_COMPLETED)
                pending.discard(stopper)
                if stopper in done:
                    phase.stop = True
                    for t in pending:
                        t.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    break
        finally:
            stopper.cancel()


def _const(value: bool) -> Callable[[], bool]:
    return lambda: value
