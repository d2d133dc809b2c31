"""Run a scenario: per policy, fresh simulators + one gateway, the same load and timeline, raw records out.

Everything runs in this process on one event loop, bound to 127.0.0.1 port 0: the simulators
(``tailgate.sim``), a gateway (``tailgate.gateway``) with its ledger in a temporary directory, and the
load tester's own generator (``tailgate.bench.loadgen``), which measures every request through the
one measurement core. Faults are applied at their times through the simulator's fault API
(``SimProvider.set_faults`` / ``clear_faults``, what ``POST`` / ``DELETE /sim/faults`` call).
Policies run one after another, each against freshly started simulators with the same seeds, so
each sees the same arrivals, classes and timeline.
"""

from __future__ import annotations

import asyncio
import logging
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from tailgate._runtime import stop_task
from tailgate.bench.loadgen import Bounds, LoadGenerator, Phase, Target
from tailgate.bench.results import RunRecorder
from tailgate.bench.shapes import ShapedWorkload
from tailgate.bench.workload import LengthDist, RequestSpec, Workload
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig, LedgerConfig
from tailgate.gateway.app import Gateway
from tailgate.gateway.process.replicas import LocalFleet
from tailgate.ledger import LedgerRow, read_rows
from tailgate.ledger.samples import Sample as ProbeSample
from tailgate.scenario.batch_client import BatchRecord, build_input, drive_batch
from tailgate.scenario.config import PolicyRun, ScenarioConfig, ScenarioStep
from tailgate.scenario.quality import MonitorBeside, ToolCallMix
from tailgate.sim.cluster import SimCluster
from tailgate.sim.config import SimConfig
from tailgate.upstream import CallResult, Endpoint, Timeouts, UpstreamClient

__all__ = [
    "NO_BATCH",
    "LiveStatus",
    "PolicyRecord",
    "Sample",
    "UpstreamRecord",
    "planned_runs",
    "run_policy",
    "run_scenario",
]

log = logging.getLogger("tailgate.scenario")


@dataclass(frozen=True, slots=True)
class Sample:
    """One client request: its intended send time (seconds after the load started) and its result."""

    t: float
    result: CallResult
    lag_ms: float
    tool_ok: bool | None = None
    """A tool-call request's answer as the client got it: True intact, False broken (``load.tool_calls``);
    None for any other request, or one that failed."""


@dataclass(frozen=True, slots=True)
class UpstreamRecord:
    """One request a simulator received (its ground truth): when (seconds after load start) and its status."""

    t: float
    provider: str
    status: int
    degraded: str | None = None
    """The answer-quality degradation the simulator served (its truth row's ``degraded``), if any."""
    batch: bool = False
    """A line of a batch job run on the provider's own batch capacity (its Batch API), not a live request."""
    request_id: str | None = None
    """The ``x-request-id`` the gateway sent (its ledger row's ``request_id``; probes ``probe-…``)."""


@dataclass
class PolicyRecord:
    """Everything measured for one policy: client samples, the gateway's ledger, the simulators' truth."""

    run: PolicyRun
    duration_s: float
    samples: list[Sample] = field(default_factory=list)
    ledger: list[LedgerRow] = field(default_factory=list)
    upstream: list[UpstreamRecord] = field(default_factory=list)
    wall0: float = 0.0
    stopped: bool = False
    """Ctrl-C stopped this run before its end."""
    counters: dict[str, float] = field(default_factory=dict)
    """The gateway's own counters at the end (hedges, pacing, probes, breaker transitions, attempts, quality
    retries)."""
    probes: list[ProbeSample] = field(default_factory=list)
    """The monitor's samples when the scenario has ``monitor:`` (canaries graded in ``accuracy_ok``)."""
    """The gateway's own counters at the end (hedges, pacing, probes, breaker transitions, attempts)."""
    batch: BatchRecord | None = None
    """The scenario's batch, when this run submitted it."""
    baseline: str | None = None
    """A run with the batch: the label of its run without it (same policy, seed and load), if one ran."""
    without_batch: bool = False
    """This run is the baseline of a run with the batch (the scenario has one; this run did not submit it)."""

    def ledger_t(self, row: LedgerRow) -> float:
        return row.ts - self.wall0


@dataclass
class LiveStatus:
    """What the progress display shows; the runner updates it as it goes."""

    policy: str = ""
    index: int = 0
    total: int = 0
    duration_s: float = 0.0
    started: float = 0.0
    phase_name: str = ""
    load: Phase | None = None
    events: list[str] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started if self.started else 0.0


UNTAGGED = "untagged"
"""The class name in ``load.classes`` for requests sent without an ``x-tailgate-class`` header."""


def _draw_class(classes: list[tuple[str, float]], rng: random.Random, spec: RequestSpec) -> RequestSpec:
    if not classes:
        return spec
    u, acc = rng.random(), 0.0
    for name, share in classes:
        acc += share
        if u < acc:
            return replace(spec, traffic_class=None if name == UNTAGGED else name)
    last = classes[-1][0]
    return replace(spec, traffic_class=None if last == UNTAGGED else last)


def _shares(classes: dict[str, float]) -> list[tuple[str, float]]:
    total = sum(classes.values())
    return [(name, share / total) for name, share in classes.items() if share > 0]


class _ClassMixWorkload(Workload):
    """The bench workload, with each request's traffic class drawn from the scenario's mix."""

    def __init__(self, classes: dict[str, float], tool_calls: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._classes = _shares(classes)
        self._class_rng = random.Random(self.seed + 1)
        self._tools = ToolCallMix(tool_calls, self.seed)

    def next(self) -> RequestSpec:
        return self._tools.apply(_draw_class(self._classes, self._class_rng, super().next()))


class _ClassMixShaped(ShapedWorkload):
    """A bench shape (``multi-turn``), with each request's traffic class drawn from the scenario's mix."""

    def __init__(self, classes: dict[str, float], tool_calls: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._classes = _shares(classes)
        self._class_rng = random.Random(self.seed + 1)
        self._tools = ToolCallMix(tool_calls, self.seed)

    def next(self) -> RequestSpec:
        return self._tools.apply(_draw_class(self._classes, self._class_rng, super().next()))


class _Capture(RunRecorder):
    """A bench run recorder that also keeps every result (the scenario splits them by phase)."""

    def __init__(self, base: RunRecorder, sink: list[tuple[CallResult, float, bool | None]]) -> None:
        super().__init__(base.target, base.load)
        self._sink = sink

    def add(
        self,
        result: CallResult,
        *,
        lag_ms: float = 0.0,
        t_done: float | None = None,
        accuracy: bool | None = None,
        sent_at: float | None = None,
    ) -> None:
        super().add(result, lag_ms=lag_ms, t_done=t_done, accuracy=accuracy, sent_at=sent_at)
        if result.error_class != "cancelled":
            self._sink.append((result, lag_ms, accuracy))


_COUNTERS = frozenset(
    {
        "tailgate_hedges",
        "tailgate_paced",
        "tailgate_probes",
        "tailgate_breaker_transitions",
        "tailgate_upstream_attempts",
        "tailgate_quality_retries",
    }
)


def _counters(gateway: Gateway) -> dict[str, float]:
    """Non-zero ``*_total`` samples of the gateway counters that explain a run, keyed ``name{label=value,…}``."""
    out: dict[str, float] = {}
    for metric in gateway.metrics.registry.collect():
        if metric.name not in _COUNTERS:
            continue
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.value:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def _gateway_config(cfg: ScenarioConfig, run: PolicyRun, cluster: SimCluster, ledger: Path) -> GatewayConfig:
    """The scenario's gateway section, pointed at the simulators, with this run's policy and hedge."""
    gw = cfg.gateway
    providers = {}
    for name, pc in gw.providers.items():
        sim = cluster.providers[name]
        keys = list(pc.api_keys) or [SecretStr(k) for k in sim.spec.api_keys[:1]] or [SecretStr(f"sk-scenario-{name}")]
        update: dict[str, object] = {"base_url": sim.url, "api_keys": keys}
        if pc.anthropic_base_url is not None:  # any value: the simulator's Anthropic endpoint (its API root)
            update["anthropic_base_url"] = sim.url.removesuffix("/v1")
        providers[name] = pc.model_copy(update=update)
    hedge = cfg.hedge_of(run)
    models = {
        alias: m.model_copy(update={"policy": run.policy, **({"hedge": hedge} if alias == cfg.alias else {})})
        for alias, m in gw.models.items()
    }
    routing = gw.routing.model_copy(update={"policy": run.policy})
    if run.pacing is not None:
        routing = routing.model_copy(update={"pacing": routing.pacing.model_copy(update={"enabled": run.pacing})})
    if run.affinity is not None:
        affinity = routing.affinity.model_copy(update={"enabled": run.affinity})
        routing = routing.model_copy(update={"affinity": affinity})
    if run.quality is not None:
        routing = routing.model_copy(update={"quality": routing.quality.model_copy(update={"enabled": run.quality})})
    return gw.model_copy(
        update={
            "providers": providers,
            "models": models,
            "routing": routing,
            "ledger": LedgerConfig(enabled=True, path=str(ledger), flush_interval=0.2),
            "trace": gw.trace.model_copy(update={"path": None}),
        }
    )


async def _timeline(cluster: SimCluster, steps: list[ScenarioStep], t0: float, status: LiveStatus) -> None:
    for step in steps:
        delay = t0 + step.at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if step.phase is not None:
            status.phase_name = step.phase
        if step.provider is not None:
            provider = cluster.providers[step.provider]
            if step.clear:
                provider.clear_faults()
            if step.set is not None:
                provider.set_faults(step.set)
            what = (
                "clear"
                if step.set is None
                else ("clear + " if step.clear else "") + str(step.set.model_dump(exclude_unset=True))
            )
            status.events.append(f"{step.at:6.1f}s {step.provider}: {what}")


async def _batch_end(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Wait for the batch's client to finish (it bounds its own wait), or for Ctrl-C."""
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        await stop_task(task)
    elif task.exception() is not None:
        log.warning("scenario batch: its client failed: %r", task.exception())


async def run_policy(
    cfg: ScenarioConfig,
    run: PolicyRun,
    stop: asyncio.Event,
    status: LiveStatus | None = None,
    *,
    replicas: int = 1,
    with_batch: bool = False,
) -> PolicyRecord:
    """One policy: start fresh simulators and a gateway (``replicas`` > 1: a fleet on a private Redis, one
    port; gateway/process/replicas.py), drive the load and the timeline (and, ``with_batch``, submit the
    scenario's batch through the gateway's Batch API and wait for it), collect records."""
    status = status or LiveStatus()
    sim_cfg = SimConfig(seed=cfg.seed, time_scale=cfg.time_scale, truth_size=1_000_000, providers=cfg.providers)
    record = PolicyRecord(run=run, duration_s=cfg.load.duration)
    batch = cfg.batch if with_batch else None
    payload = b""
    if batch is not None:
        record.batch = BatchRecord(
            lines=batch.lines,
            endpoint=batch.endpoint,
            alias=cfg.batch_alias,
            completion_window=batch.completion_window,
            window_s=batch.window_s,
        )
        payload = build_input(batch, cfg.batch_alias, cfg.seed)
    captured: list[tuple[CallResult, float, bool | None]] = []
    load = cfg.load
    with tempfile.TemporaryDirectory(prefix="tailgate-scenario-") as tmp:
        ledger_path = Path(tmp) / "ledger.db"
        async with SimCluster(sim_cfg.specs(), host=sim_cfg.host) as cluster:
            gw_cfg = _gateway_config(cfg, run, cluster, ledger_path)
            fleet = LocalFleet(
                gw_cfg, resolve_providers(gw_cfg, "scenario gateway"), replicas=replicas, ledger_path=ledger_path
            )
            await fleet.start()
            client: UpstreamClient | None = None
            beside: MonitorBeside | None = None
            try:
                url = fleet.url
                # The client waits as long as users would; the gateway's own timeouts decide failures.
                timeouts = Timeouts(connect=5.0, headers=None, first_token=None, idle=None, total=None)
                endpoint = Endpoint(
                    name=run.label,
                    base_url=url,
                    api_keys=("sk-scenario-client",),
                    timeouts=timeouts,
                    max_connections=100_000,
                )
                client = UpstreamClient(endpoint)
                workload: Workload
                if load.workload == "multi-turn":
                    workload = _ClassMixShaped(
                        load.classes,
                        input_tokens=LengthDist(load.input_tokens),
                        max_tokens=load.max_tokens,
                        stream=load.stream,
                        seed=cfg.seed,
                        shape="multi-turn",
                        turns=load.turns,
                        tool_calls=load.tool_calls,
                    )
                else:
                    workload = _ClassMixWorkload(
                        load.classes,
                        input_tokens=LengthDist(load.input_tokens),
                        max_tokens=load.max_tokens,
                        stream=load.stream,
                        seed=cfg.seed,
                        tool_calls=load.tool_calls,
                    )
                gen = LoadGenerator([Target(run.label, client, cfg.alias, load.api)], workload, stop=stop)

                def on_phase(phase: Phase) -> None:
                    phase.recorders[:] = [_Capture(r, captured) for r in phase.recorders]
                    status.load = phase

                gen.on_phase = on_phase
                status.policy, status.duration_s, status.phase_name = run.label, load.duration, cfg.initial_phase
                status.events = []
                record.wall0 = time.time()
                if cfg.monitor is not None:  # its first round at once, beside the load's first requests
                    beside = await MonitorBeside.start(
                        gw_cfg,
                        resolve_providers(gw_cfg, "scenario monitor"),
                        ledger_path,
                        interval_s=cfg.monitor.interval,
                        jitter=cfg.monitor.jitter,
                        workloads=tuple(cfg.monitor.workloads),
                        seed=cfg.seed,
                    )
                t0 = status.started = time.perf_counter()
                timeline = asyncio.create_task(_timeline(cluster, cfg.steps, t0, status))
                load_done = asyncio.Event()
                batch_task = None
                if batch is not None and record.batch is not None:
                    batch_task = asyncio.create_task(
                        drive_batch(
                            record.batch,
                            payload,
                            base_url=url,
                            api_key="sk-scenario-client",
                            store=ledger_path,
                            submit_at=batch.submit_at,
                            t0=t0,
                            load_done=load_done,
                            wait_s=batch.wait,
                        )
                    )
                try:
                    bounds = Bounds(duration=load.duration, warmup=0.0)
                    if load.rate is not None:
                        await gen.open(
                            load.rate, bounds, arrival=load.arrival, seed=cfg.seed, max_in_flight=load.max_in_flight
                        )
                    else:
                        assert load.concurrency is not None
                        await gen.closed(load.concurrency, bounds)
                finally:
                    await stop_task(timeline, reraise=True)
                    if beside is not None:
                        await beside.close()
                        record.probes = beside.samples
                    load_done.set()
                    if batch_task is not None:
                        status.phase_name = "batch (after the load)"
                        await _batch_end(batch_task, stop)
                record.stopped = stop.is_set()
                for gateway in fleet.gateways:  # a fleet's counters add up
                    for k, v in _counters(gateway).items():
                        record.counters[k] = record.counters.get(k, 0.0) + v
                for p in cluster.providers.values():
                    record.upstream += [
                        UpstreamRecord(
                            r.received_at - record.wall0,
                            p.name,
                            r.status,
                            r.degraded,
                            r.batch_id is not None,
                            r.client_request_id,
                        )
                        for r in p.truth.records()
                    ]
            finally:
                if client is not None:
                    await client.close()
                await fleet.close()
        if ledger_path.exists():
            record.ledger = read_rows(ledger_path)
    record.upstream.sort(key=lambda u: u.t)
    for result, lag_ms, tool_ok in captured:
        intended = result.started_at - lag_ms / 1000.0 - record.wall0
        record.samples.append(Sample(intended, result, lag_ms, tool_ok))
    record.samples.sort(key=lambda s: s.t)
    return record


async def run_scenario(
    cfg: ScenarioConfig,
    runs: list[PolicyRun],
    stop: asyncio.Event,
    status: LiveStatus | None = None,
    on_done: Callable[[PolicyRecord], None] | None = None,
    *,
    replicas: int = 1,
) -> list[PolicyRecord]:
    """Every policy in turn (stops early on ``stop``); returns the records of the runs that started."""
    status = status or LiveStatus()
    out = []
    plan = planned_runs(cfg, runs)
    status.total = len(plan)
    for i, (run, with_batch, baseline) in enumerate(plan):
        if stop.is_set():
            break
        status.index = i + 1
        record = await run_policy(cfg, run, stop, status, replicas=replicas, with_batch=with_batch)
        record.baseline = baseline
        record.without_batch = cfg.batch is not None and not with_batch
        out.append(record)
        if on_done is not None:
            on_done(record)
    return out


NO_BATCH = " (no batch)"
"""Appended to a policy's label for its run without the scenario's batch (its baseline)."""


def planned_runs(cfg: ScenarioConfig, runs: list[PolicyRun]) -> list[tuple[PolicyRun, bool, str | None]]:
    """The runs to do, in order: ``(run, with the batch, the label of its baseline run)``. A scenario with a batch
    and ``batch.baseline`` runs each policy first without the batch (labelled ``<label> (no batch)``)."""
    if cfg.batch is None:
        return [(run, False, None) for run in runs]
    out: list[tuple[PolicyRun, bool, str | None]] = []
    for run in runs:
        if cfg.batch.baseline:
            base = run.model_copy(update={"name": run.label + NO_BATCH})
            out.append((base, False, None))
            out.append((run, True, base.label))
        else:
            out.append((run, True, None))
    return out
