"""The load generator: closed loop (concurrency), open loop (rate from intended send times), stages.

Every request goes through the measurement core (``tailgate.upstream.call``), so bench numbers mean
what the gateway's numbers mean. With several targets, requests are interleaved target by target (one
global turn counter), so a drifting provider hits every target alike.

Open loop: request *i* is due at ``t0 + i/rate`` (constant) or after exponential gaps (Poisson). Its
latency is counted from that intended time — a slow server cannot slow the schedule down and hide its
own queueing (no coordinated omission, as in wrk2). The schedule lag (actual − intended send) is
reported beside it; a large lag means the generator itself could not keep up.

How the schedule is kept (docs/benchmarks.md, load generator capacity): the event loop's timers are
millisecond-coarse (uvloop rounds every delay to whole milliseconds and fires on a cached clock), so
the dispatcher waits on an :class:`Alarm` instead: a Linux ``timerfd`` armed at the absolute intended
time, which the kernel makes readable to the microsecond and the loop polls like any socket (no
spinning, no thread, no GIL hand-over). The next request is built (body, JSON payload, ``Call``)
while waiting, two loop turns after the previous send (once that request is on the wire), so a due
request costs only a task creation; every request already due at a wake-up is dispatched in the same
turn. "Actual" is the moment the measurement core hands the request to the connection pool
(``Sent.t``, the start of its E2E), so lag + E2E is exactly completion − intended.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tailgate.accuracy import Task, grade
from tailgate.bench.alarm import Alarm
from tailgate.bench.goodput import SLO
from tailgate.bench.results import RunRecorder
from tailgate.bench.schema import UNSET, Load
from tailgate.bench.schema import Target as RunTarget
from tailgate.bench.workload import RequestSpec, TraceEntry, Workload
from tailgate.upstream import (
    ANTHROPIC,
    OPENAI,
    Body,
    Call,
    CallResult,
    Chunk,
    Dialect,
    Headers,
    Sent,
    UpstreamClient,
    call,
)
from tailgate.wire.anthropic import API_VERSION, from_chat_body
from tailgate.wire.sse import content_text

if TYPE_CHECKING:
    from tailgate.bench.tracing import Pending, RunTrace
    from tailgate.telemetry.spans import AttrValue

anthropic_body = from_chat_body
"""The workload body in Anthropic's Messages API (:func:`tailgate.wire.anthropic.from_chat_body`, shared with
the monitor)."""


@dataclass
class Target:
    """One endpoint under test."""

    name: str
    client: UpstreamClient
    model: str
    api: str = "openai"
    """The protocol spoken to it: ``openai`` (``/chat/completions``) or ``anthropic`` (``/v1/messages``)."""

    def describe(self) -> RunTarget:
        api = UNSET if self.api == "openai" else self.api
        return RunTarget(name=self.name, base_url=self.client.endpoint.base_url, model=self.model, api=api)

    @property
    def dialect(self) -> Dialect:
        """The protocol the measurement core reads the answers in (upstream/dialect.py)."""
        return ANTHROPIC if self.api == "anthropic" else OPENAI

    @property
    def path(self) -> str:
        """Where requests go under the base URL. An Anthropic base URL is the API root (what the SDK and
        ``ANTHROPIC_BASE_URL`` take: ``https://api.deepseek.com/anthropic``, a gateway's root); one that ends in
        ``/v1`` (a gateway's OpenAI base URL) gets ``/messages``."""
        if self.api != "anthropic":
            return "/chat/completions"
        return "/messages" if self.client.endpoint.base_url.endswith("/v1") else "/v1/messages"


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


@dataclass(slots=True)
class Prepared:
    """A request built ahead of its send time: the target index, the ``Call`` (payload encoded), its task."""

    idx: int
    call: Call
    task: Task | None = None
    intended: int | None = None
    ratelimit: dict[str, str] | None = None
    """The response's ``x-ratelimit-*`` / ``retry-after`` headers, when it had any (set by :func:`execute`)."""
    headers: dict[str, str] | None = None
    """The request's own headers, read when it is sent: a traced run adds its span's ``traceparent`` here."""


def prepare(target: Target, spec: RequestSpec, idx: int = 0, *, traced: bool = False) -> Prepared:
    """Build one request of ``spec`` for ``target`` without sending it (nothing is sent until executed).
    ``traced``: its headers are a dict of its own, for the ``traceparent`` added when it is sent."""
    body = {**spec.body, "model": target.model}
    headers = {"x-tailgate-class": spec.traffic_class} if spec.traffic_class else None
    if target.api == "anthropic":
        body = anthropic_body(body)
        headers = {**(headers or {}), "anthropic-version": API_VERSION}
    if traced and headers is None:
        headers = {}
    c = call(
        target.client,
        target.path,
        body,
        stream=spec.stream,
        client_wants_usage=True,
        headers=headers,
        dialect=target.dialect,
    )
    return Prepared(idx, c, spec.task, spec.intended_tokens, headers=headers)


async def execute(p: Prepared) -> tuple[CallResult, bool | None, float]:
    """Send a prepared request; return its result, for tasks whether it was right, and when it was sent.

    The send time is ``Sent.t``: the moment the measurement core handed the request to the connection
    pool, which is also where its TTFT and E2E start (the call's start when it failed before that).
    """
    text: list[str] = []
    sent_at = time.perf_counter()
    async with p.call as c:
        async for event in c:
            if isinstance(event, Sent):
                sent_at = event.t
            elif isinstance(event, Headers) and (event.status == 429 or "x-ratelimit-limit-requests" in event.headers):
                p.ratelimit = {k: v for k, v in event.headers.items() if k.lower().startswith("x-ratelimit-")}
            elif p.task is not None and isinstance(event, Chunk | Body):
                text.append(content_text(event.raw))
    result = c.result
    assert result is not None
    right = grade(p.task, "".join(text)) if p.task is not None and result.ok else None
    return result, right, sent_at


async def one_request(
    target: Target, workload: Workload, spec: RequestSpec | None = None
) -> tuple[CallResult, bool | None]:
    """Send one request of the workload to a target; return its result and, for tasks, whether it was right."""
    result, right, _ = await execute(prepare(target, spec or workload.next()))
    return result, right


class LoadGenerator:
    """Runs phases against targets; one instance per process."""

    def __init__(self, targets: list[Target], workload: Workload, *, stop: asyncio.Event | None = None) -> None:
        self.targets = targets
        self.workload = workload
        self.stop = stop or asyncio.Event()
        self.phase: Phase | None = None
        self._turn = itertools.count()
        self.on_phase: Callable[[Phase], None] | None = None
        self.slo: SLO | None = None
        """Per-request SLO for goodput (``--goodput``); every recorder of a phase counts good requests."""
        self.trace: RunTrace | None = None
        """A traced run (``--otlp-endpoint``, ``OTEL_*``): a span per phase and per request (bench/tracing.py)."""

    def _next_target(self) -> int:
        return next(self._turn) % len(self.targets)

    def _new_phase(self, label: str, load: Load, bounds: Bounds) -> Phase:
        recorders = [RunRecorder(t.describe(), load) for t in self.targets]
        for rec in recorders:
            rec.slo = self.slo
        phase = Phase(label, recorders, bounds.requests)
        self.phase = phase
        if self.trace is not None:
            self.trace.phase(label, {"tailgate.phase": label, "tailgate.load_mode": load.mode})
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

    async def _send(self, phase: Phase, counting: Callable[[], bool], target: int | None = None) -> None:
        """Closed loop and stages: send the workload's next request now (no schedule, no lag)."""
        idx = self._next_target() if target is None else target
        phase.sent += 1
        phase.sent_by[idx] = phase.sent_by.get(idx, 0) + 1
        phase.in_flight += 1
        p = prepare(self.targets[idx], self.workload.next(), idx, traced=self.trace is not None)
        span = self._span(p)
        try:
            result, right, _ = await execute(p)
        finally:
            phase.in_flight -= 1
        counted = counting()
        if span is not None:
            self._end_span(span, p, result, right, counted=counted)
        if counted and result.error_class != "cancelled":
            phase.recorders[idx].add(result, t_done=time.perf_counter(), accuracy=right)
            if p.intended is not None:
                phase.recorders[idx].note_prompt(p.intended, result)
            if p.ratelimit:
                phase.recorders[idx].note_headers(p.ratelimit)

    async def _scheduled(self, phase: Phase, p: Prepared, intended: float, counted: bool) -> None:
        """Open loop: send a prepared request; its lag is (sent − intended) and its latency counts from intended."""
        phase.in_flight += 1
        span = self._span(p)
        try:
            result, right, sent_at = await execute(p)
        finally:
            phase.in_flight -= 1
        lag_ms = max(0.0, (sent_at - intended) * 1000.0)
        if span is not None:
            self._end_span(span, p, result, right, counted=counted, lag_ms=lag_ms)
        if counted and result.error_class != "cancelled":
            phase.recorders[p.idx].add(
                result, lag_ms=lag_ms, t_done=time.perf_counter(), accuracy=right, sent_at=sent_at
            )
            if p.intended is not None:
                phase.recorders[p.idx].note_prompt(p.intended, result)
            if p.ratelimit:
                phase.recorders[p.idx].note_headers(p.ratelimit)

    async def _schedule(
        self,
        phase: Phase,
        bounds: Bounds,
        end: float | None,
        plan: Iterator[tuple[float, Callable[[], RequestSpec]]],
        measure_from: float,
        max_in_flight: int,
    ) -> None:
        """Send each ``(intended time, spec)`` of ``plan`` at its time, whatever happened to earlier ones.

        The dispatcher is the alarm's callback: it runs in the loop turn that sees the timer expire
        (not one turn later, as a woken task would) and dispatches every request already due. The
        plan yields each request's time with a function that makes it, so the dispatcher knows the
        next time without building the request: building it (``build``) waits until the request just
        sent has gone out, then arms the alarm. Requests count as sent when dispatched (so
        ``--requests`` holds even when several go out in one turn).
        """
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        tasks: set[asyncio.Task[None]] = set()
        item: tuple[float, Callable[[], RequestSpec]] | None = next(plan, None)
        ready: Prepared | None = None
        building = False

        def build() -> None:
            """Build the next request ahead of its time, then send it if already due or arm the alarm."""
            nonlocal ready, building
            building = False
            if finished.done():  # the run ended (or failed) while this was queued: nothing more to send
                return
            if item is not None and ready is None:
                try:
                    idx = self._next_target()
                    ready = prepare(self.targets[idx], item[1](), idx, traced=self.trace is not None)
                except BaseException as exc:  # e.g. a workload error: end the run with it
                    if not finished.done():
                        finished.set_exception(exc)
                    return
            dispatch()

        def dispatch() -> None:
            nonlocal item, ready, building
            if finished.done():
                return
            try:
                # The end is judged by each request's intended time, not by the clock: a request due before the
                # end is sent however late this loop wakes (a busy machine), so the run sends exactly the
                # scheduled number. Past the end (or with nothing more due before it), the alarm waits for the
                # end itself, so the run still spans its duration.
                while item is not None and not self._should_stop(phase, bounds, None):
                    intended, make = item
                    now = time.perf_counter()
                    if end is not None and intended >= end:
                        if now < end:
                            alarm.arm(end)
                            return
                        break
                    if now < intended:
                        if ready is not None:
                            alarm.arm(intended)  # before the end (checked above)
                        elif not building:
                            # Built (and the alarm armed) two loop turns from now, once the request just
                            # dispatched is on the wire: its task runs its first step (the measurement
                            # core hands it to the pool: Sent.t) in the next turn, and aiohttp writes it
                            # from a task of its own one turn later (the ready queue is FIFO).
                            building = True
                            loop.call_soon(loop.call_soon, build)
                        return
                    if phase.in_flight >= max_in_flight:
                        if end is not None and now >= end:
                            # Past the end and held back by the in-flight cap (a stalled target): the run ends
                            # here. Otherwise a target that answers nothing would keep a timed run going for as
                            # long as its backlog takes; what was not sent shows as requests short of the rate.
                            break
                        alarm.arm(now + 0.001)  # the schedule keeps its times: the lag will show this wait
                        return
                    if ready is None:  # behind schedule (or no turn in between): build it now
                        idx = self._next_target()
                        ready = prepare(self.targets[idx], make(), idx, traced=self.trace is not None)
                    phase.sent += 1
                    phase.sent_by[ready.idx] = phase.sent_by.get(ready.idx, 0) + 1
                    task = loop.create_task(self._scheduled(phase, ready, intended, intended >= measure_from))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    ready = None
                    item = next(plan, None)
            except BaseException as exc:  # e.g. a workload error: end the run with it
                if not finished.done():
                    finished.set_exception(exc)
                return
            if not finished.done():
                finished.set_result(None)

        alarm = Alarm(loop, dispatch)
        stopper: asyncio.Future[Any] = asyncio.ensure_future(self.stop.wait())
        try:
            dispatch()
            await asyncio.wait([finished, stopper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            alarm.close()
            stopper.cancel()
            if not finished.done():
                finished.cancel()
        if not finished.cancelled() and finished.exception() is not None:
            for t in tasks:  # a dispatch error ends the run: nothing is left running behind it
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            finished.result()
        if tasks:
            await self._drain(tasks, phase)

    # -- tracing ----------------------------------------------------------------------------------

    def _span(self, p: Prepared) -> Pending | None:
        """A traced run: the request's span starts as it is sent (its ``traceparent`` in its headers)."""
        if self.trace is None or p.headers is None:
            return None
        return self.trace.start(p.headers)

    def _end_span(
        self, span: Pending, p: Prepared, result: CallResult, right: bool | None, *, counted: bool, lag_ms: float = 0.0
    ) -> None:
        assert self.trace is not None
        target = self.targets[p.idx]
        extra: dict[str, AttrValue] = {"tailgate.counted": counted}
        if self.phase is not None:
            extra["tailgate.phase"] = self.phase.label
        if lag_ms:
            extra["tailgate.schedule_lag_ms"] = lag_ms
        if right is not None:
            extra["tailgate.accuracy_ok"] = right
        self.trace.finish(
            span,
            result,
            target=target.name,
            base_url=target.client.endpoint.base_url,
            model=target.model,
            api=target.api,
            extra=extra,
        )

    # -- closed loop -----------------------------------------------------------------------------

    async def closed(self, concurrency: int, bounds: Bounds, load: Load | None = None) -> list[RunRecorder]:
        """``concurrency`` workers, each sending its next request as soon as the previous one ends."""
        phase = self._new_phase(
            f"concurrency {concurrency}", load or Load(mode="closed", concurrency=concurrency), bounds
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
                await self._send(phase, counting, k % n)

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
        load = Load(mode="open", rate=rate, arrival=arrival)
        phase = self._new_phase(f"rate {rate:g}/s", load, bounds)
        rng = random.Random(seed)
        t0 = time.perf_counter() + 0.005
        measure_from = t0 + bounds.warmup
        end = measure_from + bounds.duration if bounds.duration is not None else None
        for rec in phase.recorders:
            rec.start(measure_from)
        # The schedule runs at rate × targets and alternates targets: each target gets `rate`.
        total_rate = rate * len(self.targets)

        def plan() -> Iterator[tuple[float, Callable[[], RequestSpec]]]:
            intended = t0
            for i in itertools.count(1):
                yield intended, self.workload.next
                # constant: t0 + i/rate exactly (no drift from summing gaps)
                intended = t0 + i / total_rate if arrival == "constant" else intended + rng.expovariate(total_rate)

        await self._schedule(phase, bounds, end, plan(), measure_from, max_in_flight)
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
        load = Load(
            mode="open", replay=name, time_scale=time_scale, rate=round(len(entries) / span, 3) if span > 0 else None
        )
        phase = self._new_phase(f"replay {name}", load, bounds)
        t0 = time.perf_counter() + 0.005
        end = t0 + bounds.duration if bounds.duration is not None else None
        for rec in phase.recorders:
            rec.start(t0)
        plan = ((t0 + entry.t * time_scale, functools.partial(self.workload.for_entry, entry)) for entry in entries)
        await self._schedule(phase, bounds, end, plan, t0, 1_000_000)
        for rec in phase.recorders:
            rec.stop(time.perf_counter())
        return phase.recorders

    # -- stages (k6 ramping VUs) -------------------------------------------------------------------

    async def stages(self, plan: list[tuple[float, int]], bounds: Bounds) -> list[list[RunRecorder]]:
        """Concurrency ramps linearly from the previous stage's target to each stage's target."""
        out = []
        current = 0.0
        for i, (seconds, target_vus) in enumerate(plan):
            load = Load(mode="stage", stage=i, from_=round(current), to=target_vus, duration_s=seconds)
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
                        await self._send(phase, lambda: True, k % n)
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
