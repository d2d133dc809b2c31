"""``tailgate demo``: start the stack, send background traffic, run the failover drill, report."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from rich.console import Console
from rich.live import Live
from rich.table import Table

from tailgate._runtime import stop_task, wait_for_stop
from tailgate.demo.drill import PHASES, DrillPlan, PhaseReport, PhaseWindow, analyse, configured_shares
from tailgate.demo.probes import without_probes
from tailgate.demo.show import banner, drill_legend, drill_summary, drill_table, drill_verdict, live_line
from tailgate.demo.stack import MODEL, PRIMARY, Stack, StackOptions, start_stack
from tailgate.demo.traffic import Traffic, TrafficShape
from tailgate.gateway.process.replicas import redis_available
from tailgate.sim.provider import SimProvider
from tailgate.stats import LatencyHistogram
from tailgate.upstream import Endpoint, UpstreamClient, call

# What each drill phase does to the primary, through the simulator's fault API (docs/simulator.md).
FAULTS: dict[str, dict[str, Any] | None] = {
    "degraded": {"latency_multiplier": 5},
    "outage": {"outage": True},
    "restored": None,  # DELETE /sim/faults: clear everything
}


@dataclass(frozen=True, slots=True)
class DemoOptions:
    port: int = 0
    duration: float | None = None
    drill: bool = True
    all_providers: bool = False
    time_scale: float = 1.0
    rate: float = 15.0
    db: Path | None = None
    check_requests: int = 0
    """Send this many requests straight to each provider first and show what each simulator timed."""
    replicas: int = 1
    """Run the gateway as this many replicas on a private redis-server (when one is installed)."""
    keep: bool = False
    """After the drill keep serving until Ctrl-C (without it, and without ``duration``, the demo ends after
    the drill's report)."""


async def _check_providers(console: Console, stack: Stack, n: int) -> None:
    """Send ``n`` streamed requests to each simulated provider directly; print what each one timed."""

    async def one(p: SimProvider) -> int:
        async with UpstreamClient(Endpoint(p.name, p.url)) as client:
            body = {
                "model": MODEL,
                "stream": True,
                "max_tokens": 16,
                "messages": [{"role": "user", "content": "Say hi."}],
            }
            results = await asyncio.gather(
                *(call(client, "/chat/completions", body, stream=True).collect() for _ in range(n))
            )
        return sum(1 for r in results if r.ok)

    providers = list(stack.cluster.providers.values())
    answered = await asyncio.gather(*(one(p) for p in providers))
    table = Table(
        "provider",
        "preset",
        "answered",
        "P50 TTFT",
        "P90 TTFT",
        "P90 E2E",
        title="each provider, straight (the simulator's own ground truth, ms)",
    )
    for ok, p in zip(answered, providers, strict=True):
        ttft, e2e = LatencyHistogram(), LatencyHistogram()
        for rec in p.truth.records():
            if rec.status == 200 and rec.ttft_ms is not None and rec.e2e_ms is not None:
                ttft.record(rec.ttft_ms)
                e2e.record(rec.e2e_ms)
        table.add_row(
            p.name,
            p.spec.preset,
            f"{ok}/{n}",
            f"{ttft.percentile(50):.0f}",
            f"{ttft.percentile(90):.0f}",
            f"{e2e.percentile(90):.0f}",
        )
    console.print(table)


async def _set_faults(session: aiohttp.ClientSession, provider: SimProvider, faults: dict[str, Any] | None) -> None:
    """POST merges a fault set, DELETE clears all (the simulator's run-time fault API)."""
    url = f"{provider.root_url}/sim/faults"
    method = session.delete(url) if faults is None else session.post(url, json=faults)
    async with method as resp:
        resp.raise_for_status()


PROGRESS_EVERY_S = 5.0
"""Off a terminal the live line is printed this often."""


class _Progress:
    """The live line on a terminal; elsewhere (pipes, tests) the same line every ``PROGRESS_EVERY_S``."""

    def __init__(self, console: Console, traffic: Traffic) -> None:
        self.console = console
        self.traffic = traffic
        self.phase = "warm-up"
        self._live: Live | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.console.is_terminal:
            self._live = Live(console=self.console, refresh_per_second=4, transient=True)
            self._live.start()
            self._task = asyncio.create_task(self._tick())
        else:  # a pipe or a log: a plain line every few seconds, so a reader knows it still runs
            self._task = asyncio.create_task(self._lines())

    async def _lines(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            if self.traffic.records:
                self.console.print(live_line(self.phase, self.traffic.live()))

    def end_phase(self) -> None:
        """How the phase that ends now ended (its last seconds), printed before the next phase's fault."""
        if self.traffic.records:
            self.console.print(live_line(self.phase, self.traffic.live(), ended=True))

    def set_phase(self, phase: str, note: str = "") -> None:
        self.phase = phase
        self.console.print(f"[bold yellow]▶ {phase}[/] {note}".rstrip())

    async def _tick(self) -> None:
        while self._live is not None:
            self._live.update(live_line(self.phase, self.traffic.live()))
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        if self._task is not None:
            await stop_task(self._task, reraise=True)
        if self._live is not None:
            self._live.stop()
            self._live = None


async def _drill(
    stop: asyncio.Event,
    stack: Stack,
    plan: DrillPlan,
    progress: _Progress,
    wall: Callable[[], float],
) -> list[PhaseWindow]:
    """Run the phases against the primary; return the windows that ran (fewer when stopped early)."""
    lengths = {"warm-up": plan.warmup, "degraded": plan.degraded, "outage": plan.outage, "restored": plan.restored}
    notes = {
        "warm-up": f"background traffic; the drill starts in {plan.warmup:.0f} s",
        "degraded": f"POST /sim/faults {{'latency_multiplier': 5}} on the {PRIMARY}",
        "outage": f"POST /sim/faults {{'outage': true}} on the {PRIMARY}: it answers 503 to everything",
        "restored": f"DELETE /sim/faults on the {PRIMARY}: healthy again",
    }
    windows: list[PhaseWindow] = []
    async with aiohttp.ClientSession() as session:
        for name in PHASES:
            if stop.is_set():
                break
            if windows:
                progress.end_phase()  # the last phase's line first, then the next phase's fault
            if name in FAULTS:
                await _set_faults(session, stack.primary, FAULTS[name])
            start = wall()
            progress.set_phase(name, notes[name])
            await wait_for_stop(stop, lengths[name])
            windows.append(PhaseWindow(name, start, wall()))
        if windows and not stop.is_set():
            progress.end_phase()
        if windows and windows[-1].name != "restored":
            with contextlib.suppress(aiohttp.ClientError):
                await _set_faults(session, stack.primary, None)  # stopped mid-drill: leave it healthy
    return windows


async def run_demo(stop: asyncio.Event, options: DemoOptions, console: Console | None = None) -> None:
    """The whole demo; returns when done (``duration``) or when ``stop`` is set (Ctrl-C)."""
    console = console or Console()
    replicas = options.replicas
    if replicas > 1 and not redis_available():
        console.print(
            f"[yellow]--replicas {replicas}: redis-server is not installed (apt-get install redis-server); "
            "running one gateway[/]"
        )
        replicas = 1
    elif replicas > 1:
        console.print(
            f"fleet       {replicas} gateway replicas on one port, sharing state through a private redis-server"
        )
    stack = await start_stack(
        StackOptions(
            port=options.port,
            all_providers=options.all_providers,
            time_scale=options.time_scale,
            db=options.db,
            replicas=replicas,
        )
    )
    try:
        banner(console, stack)
        if options.check_requests:
            await _check_providers(console, stack, options.check_requests)
        if options.duration == 0 or stop.is_set():
            return
        await _serve(stop, stack, options, console)
    finally:
        await stack.close()


async def _serve(stop: asyncio.Event, stack: Stack, options: DemoOptions, console: Console) -> None:
    traffic = Traffic(stack.url, MODEL, TrafficShape(rate=options.rate))
    sender = asyncio.create_task(traffic.run())
    progress = _Progress(console, traffic)
    started = time.time()
    console.print(
        f"Background traffic: ~{options.rate:g} req/s open loop (Poisson), {traffic.shape.batch_share:.0%} batch. "
        + _ending(options)
    )
    progress.start()
    try:
        if not options.drill:
            progress.set_phase("serving", f"the gateway serves on {stack.url}")
            await wait_for_stop(stop, options.duration)
            return
        windows = await _drill(
            stop, stack, plan=DrillPlan.for_duration(options.duration), progress=progress, wall=time.time
        )
        if not windows:
            return
        keep = options.keep and options.duration is None and not stop.is_set()
        if not keep:
            traffic.stop()
            progress.set_phase("draining", "drill done; no new requests; waiting for those in flight, then the report")
        else:
            progress.set_phase(
                "serving", "drill done; results once its last requests finish (--keep: then it serves on)"
            )
        await _settle(stop, traffic, windows[-1].end, 2.0 if stop.is_set() else 20.0)
        await progress.stop()
        if stop.is_set():
            console.print(
                "[yellow]stopped during the drill: requests still in flight were cancelled and are not counted[/]"
            )
        reports = _report(console, stack, traffic, windows)
        if len(windows) == len(PHASES):
            console.print(drill_verdict(reports), soft_wrap=True)
        dash = f"{stack.root_url}/dashboard" if stack.dashboard else stack.url
        if keep:
            progress.start()
            progress.set_phase("serving", f"--keep: the gateway keeps serving on {stack.url}; Ctrl-C to stop")
            console.print(f"dashboard   [bold cyan]{dash}[/] (open until Ctrl-C)")
            await stop.wait()
        elif not stop.is_set():
            console.print(
                f"dashboard   {dash} closes now: the demo is done. "
                "[bold]tailgate demo --keep[/] keeps it serving after the drill until Ctrl-C.",
                soft_wrap=True,
            )
    finally:
        traffic.stop()
        await progress.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        await traffic.drain(2.0)
        ok = sum(1 for r in traffic.records if r.ok)
        console.print(
            f"served {ok} of {len(traffic.records)} requests in {time.time() - started:.0f} s; "
            f"ledger and store: {stack.db}" + (" (temporary, removed now)" if stack.temporary else "")
        )


async def _settle(stop: asyncio.Event, traffic: Traffic, before: float, grace: float) -> None:
    """Wait (at most ``grace`` s, or until ``stop``) for the requests sent before ``before`` to finish."""
    end = time.monotonic() + grace
    while traffic.in_flight_sent_before(before) and time.monotonic() < end and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


def _ending(options: DemoOptions) -> str:
    """How this run ends, said at its start."""
    if options.duration is not None:
        return f"Running for {options.duration:g} s."
    if not options.drill or options.keep:
        return "Serving until Ctrl-C" + (" (--keep: after the drill too)." if options.drill else ".")
    plan = DrillPlan.for_duration(None)
    return f"The drill takes ~{plan.total:.0f} s; the demo ends after its report (--keep serves on; Ctrl-C stops)."


def _report(console: Console, stack: Stack, traffic: Traffic, windows: list[PhaseWindow]) -> list[PhaseReport]:
    arrivals = sorted(
        r.received_at
        for r in stack.primary.truth.records()
        if r.received_at >= windows[0].start and not (r.client_request_id or "").startswith("probe-")
    )  # the gateway's own active probes are not traffic
    if stack.monitor is not None:  # count the gateway's traffic to the primary, not the monitor's probes
        arrivals = without_probes(arrivals, stack.monitor.probe_times(PRIMARY))
    reports = analyse(windows, traffic.records, arrivals, PRIMARY)
    configured = configured_shares(stack.gateway.aliases[MODEL], traffic.shape.batch_share)
    console.print(drill_table(reports, configured))
    for line in drill_legend(configured, traffic.shape.batch_share):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    for line in drill_summary(reports):
        console.print(line, soft_wrap=True)
    return reports
