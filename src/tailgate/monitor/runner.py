"""One monitor round: every provider × model × workload probed once through the measurement core.

Providers are probed side by side; within a provider at most ``concurrency`` probes are in flight, and
each waits for the provider's pacer (``limits.rpm`` / ``limits.tpm`` from the config, shared by all its
keys) — a probe that would wait longer than ``max_pacing_wait_s`` is skipped and reported, not sent.
A 429 pauses that provider's probes for its ``Retry-After``. A target with ``api = "anthropic"`` is probed at
the provider's ``anthropic_base_url`` (``/v1/messages``, the same probe said in Anthropic's Messages API, its own
connection pool, the provider's one pacer) and measured by the same core as chat. Every probe that was sent becomes one
:class:`~tailgate.ledger.samples.Sample` (failures included: they are the reliability column).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tailgate.accuracy import grade, grade_call
from tailgate.config.resolve import ResolvedProvider, display_url
from tailgate.config.schema import GatewayConfig
from tailgate.ledger.samples import Sample, SampleStore, tok_s
from tailgate.monitor.workloads import WORKLOADS, Probe, build_probe, content_text, tool_call_of
from tailgate.routing import Pacer
from tailgate.upstream import ANTHROPIC, OPENAI, Body, Chunk, UpstreamClient, call, endpoint_for
from tailgate.wire.anthropic import API_VERSION, from_chat_body

if TYPE_CHECKING:
    from tailgate.monitor.tracing import RoundSpan, RoundTracer

__all__ = ["APIS", "Monitor", "RoundReport", "Skipped", "Target", "endpoint_for", "targets_from_config"]

log = logging.getLogger("tailgate.monitor")

MAX_PAUSE_S = 300.0
APIS = ("openai", "anthropic")
"""The protocols the monitor probes with: ``openai`` (``base_url`` + ``/chat/completions``) and ``anthropic``
(``anthropic_base_url`` + ``/v1/messages``)."""


@dataclass(frozen=True, slots=True, order=True)
class Target:
    """One provider × upstream model × protocol to probe."""

    provider: str
    model: str
    api: str = "openai"
    """``openai`` or ``anthropic`` (the provider's ``anthropic_base_url``)."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A probe that was not sent, and why."""

    target: Target
    workload: str
    reason: str


@dataclass(slots=True)
class RoundReport:
    """What one round did."""

    index: int
    started_at: float
    """Wall-clock Unix seconds."""
    duration_s: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    pruned: int = 0
    """Samples deleted by retention after the round."""
    stored: bool = True
    """False when the store could not write the round's samples (they are retried with the next round)."""
    details: list[str | None] = field(default_factory=list)
    """Beside ``samples``, one for one: the measurement core's reason for a failed probe (``CallResult.detail``,
    e.g. ``ConnectionRefusedError: …``); None for a success. Printed, never stored."""

    @property
    def ok(self) -> int:
        return sum(1 for s in self.samples if s.ok)

    @property
    def failed(self) -> int:
        return len(self.samples) - self.ok

    def errors(self) -> Counter[str]:
        return Counter(s.error_class for s in self.samples if s.error_class is not None)

    def summary(self) -> str:
        """One progress line: probes, successes, failures by class, skips, time."""
        parts = [f"round {self.index}: {len(self.samples)} probes, {self.ok} ok"]
        if self.failed:
            classes = ", ".join(f"{k} {v}" for k, v in sorted(self.errors().items()))
            parts.append(f"{self.failed} failed ({classes})")
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped ({self.skipped[0].reason})")
        if self.pruned:
            parts.append(f"{self.pruned} old samples deleted")
        if not self.stored:
            parts.append("NOT STORED (database unwritable; retrying)")
        return ", ".join(parts) + f" in {self.duration_s:.1f} s"


def targets_from_config(
    config: GatewayConfig,
    providers: Mapping[str, ResolvedProvider] | None = None,
    apis: Sequence[str] = ("openai",),
) -> list[Target]:
    """Every distinct (provider, upstream model) pair the config's routes name, in config order, once per api
    in ``apis``. ``anthropic`` targets only the providers with an ``anthropic_base_url`` (from the config or
    its preset, read from ``providers``); the others have no Anthropic endpoint to probe."""
    bad = [a for a in apis if a not in APIS]
    if bad or not apis:
        raise ValueError(f"unknown api {bad}; known: {', '.join(APIS)}")
    seen: dict[Target, None] = {}
    for api in apis:
        for model in config.models.values():
            for route in model.routes:
                if api == "anthropic":
                    resolved = (providers or {}).get(route.provider)
                    if resolved is None or resolved.anthropic_base_url is None:
                        continue
                seen.setdefault(Target(route.provider, route.model, api), None)
    return list(seen)


@dataclass(slots=True)
class _Provider:
    client: UpstreamClient
    pacer: Pacer
    slots: asyncio.Semaphore


class Monitor:
    """Probes ``targets`` round by round and stores every sample; ``await close()`` at the end.

    ``wall`` is the wall clock stamped on samples (injectable for tests); pacing runs on the pacer's
    monotonic clock. ``retention_s``: after each round, delete samples and traffic minutes older than that.
    """

    def __init__(
        self,
        providers: Mapping[str, ResolvedProvider],
        targets: Sequence[Target],
        store: SampleStore,
        *,
        workloads: Sequence[str] = WORKLOADS,
        concurrency: int = 2,
        max_pacing_wait_s: float = 60.0,
        probe_timeout_s: float = 120.0,
        retention_s: float | None = None,
        wall: Callable[[], float] = time.time,
        tracer: RoundTracer | None = None,
    ) -> None:
        unknown = [t.provider for t in targets if t.provider not in providers]
        if unknown:
            raise ValueError(f"targets name unknown providers: {', '.join(sorted(set(unknown)))}")
        native = [
            t.provider for t in targets if t.api == "anthropic" and providers[t.provider].anthropic_base_url is None
        ]
        if native:
            raise ValueError(
                f"anthropic targets name providers without anthropic_base_url: {', '.join(sorted(set(native)))}"
            )
        bad_api = [t.api for t in targets if t.api not in APIS]
        if bad_api:
            raise ValueError(f"unknown api {sorted(set(bad_api))}; known: {', '.join(APIS)}")
        bad = [w for w in workloads if w not in WORKLOADS]
        if bad or not workloads:
            raise ValueError(f"unknown workloads {bad}; known: {', '.join(WORKLOADS)}")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.targets = list(targets)
        self.urls = {name: display_url(p.base_url) for name, p in providers.items()}
        """Provider (``NAME (anthropic)`` for its Anthropic endpoint) → its base URL as safe to print (a failed
        probe's line says where it went)."""
        self.urls.update(
            {
                f"{n} (anthropic)": display_url(p.anthropic_base_url)
                for n, p in providers.items()
                if p.anthropic_base_url
            }
        )
        self.workloads = tuple(workloads)
        self.waiting: dict[int, tuple[str, str, float]] = {}
        """The probes sent and not yet answered: a number → (provider label as in ``urls``, workload, send time
        on ``time.perf_counter()``); what a progress line names while a round waits (:meth:`awaited`)."""
        self.store = store
        self.max_pacing_wait_s = max_pacing_wait_s
        self.retention_s = retention_s
        self._wall = wall
        self.tracer = tracer
        """With telemetry on: each round a trace, each probe a span in it (monitor/tracing.py)."""
        self._propagate = {name: p.propagate_trace for name, p in providers.items()}
        self._providers: dict[str, _Provider] = {}
        self._anthropic: dict[str, UpstreamClient] = {}
        """Provider → a pool to its ``anthropic_base_url`` (only for providers with anthropic targets)."""
        for target in self.targets:
            resolved = providers[target.provider]
            endpoint = endpoint_for(resolved, max_total_s=probe_timeout_s)
            if target.provider not in self._providers:
                self._providers[target.provider] = _Provider(
                    client=UpstreamClient(endpoint),
                    pacer=Pacer(resolved.limits.rpm, resolved.limits.tpm),
                    slots=asyncio.Semaphore(concurrency),
                )
            if target.api == "anthropic" and target.provider not in self._anthropic:
                assert resolved.anthropic_base_url is not None  # checked above
                messages_endpoint = dataclasses.replace(endpoint, base_url=resolved.anthropic_base_url)
                self._anthropic[target.provider] = UpstreamClient(messages_endpoint)

    async def close(self) -> None:
        for p in self._providers.values():
            await p.client.close()
        for client in self._anthropic.values():
            await client.close()

    async def run_round(self, index: int) -> RoundReport:
        """Probe every target with every workload once, store the samples, apply retention."""
        report = RoundReport(index=index, started_at=self._wall())
        t0 = time.perf_counter()
        jobs = [(target, workload) for workload in self.workloads for target in self.targets]
        traced = self.tracer.round(index) if self.tracer is not None else None
        outcomes = await asyncio.gather(*(self._probe(t, w, index, report.started_at, traced) for t, w in jobs))
        for (target, workload), outcome in zip(jobs, outcomes, strict=True):
            if isinstance(outcome, tuple):
                sample, detail = outcome
                report.samples.append(sample)
                report.details.append(detail)
                self.store.add(sample)
            else:
                report.skipped.append(Skipped(target, workload, outcome))
        if traced is not None and self.tracer is not None:
            failed = sum(1 for o in outcomes if isinstance(o, tuple) and not o[0].ok)
            skipped = sum(1 for o in outcomes if not isinstance(o, tuple))
            self.tracer.end_round(traced, probes=len(outcomes) - skipped, failed=failed, skipped=skipped)
        report.stored = await self.store.flush()
        if self.retention_s is not None:
            try:
                report.pruned, _ = await self.store.prune(self._wall() - self.retention_s)
            except Exception as exc:  # retention failing must not stop probing; the next round retries
                log.warning("monitor: retention delete failed: %r", exc)
        report.duration_s = time.perf_counter() - t0
        return report

    def awaited(self, now: float | None = None) -> list[tuple[str, list[str], float]]:
        """The providers a round is waiting for: (label, its workloads in flight, seconds since the oldest was
        sent), the longest wait first."""
        now = time.perf_counter() if now is None else now
        by: dict[str, tuple[list[str], float]] = {}
        for label, workload, sent in self.waiting.values():
            workloads, oldest = by.get(label, ([], sent))
            workloads.append(workload)
            by[label] = (workloads, min(oldest, sent))
        return sorted(((k, w, now - t) for k, (w, t) in by.items()), key=lambda x: -x[2])

    async def _probe(
        self, target: Target, workload: str, index: int, round_wall: float, trace: RoundSpan | None = None
    ) -> tuple[Sample, str | None] | str:
        state = self._providers[target.provider]
        probe = build_probe(workload, index, round_wall)
        async with state.slots:
            waited = 0.0
            while not state.pacer.try_acquire(probe.tokens_estimate):
                wait = max(state.pacer.available_in(probe.tokens_estimate), 0.01)
                if waited + wait > self.max_pacing_wait_s:
                    return "paced: over the provider's limits for this round"
                await asyncio.sleep(wait)
                waited += wait
            body = {**probe.body, "model": target.model}
            client, path, headers, dialect = state.client, "/chat/completions", None, OPENAI
            if target.api == "anthropic":  # the same probe, said in Anthropic's Messages API
                body = from_chat_body(body)
                if probe.task is not None and probe.task.tools:  # the tool canary's tool, in Anthropic's shape
                    body["tools"] = [
                        {
                            "name": t["function"]["name"],
                            "description": t["function"].get("description", ""),
                            "input_schema": t["function"]["parameters"],
                        }
                        for t in probe.task.tools
                    ]
                client, path, headers, dialect = (
                    self._anthropic[target.provider],
                    "/v1/messages",
                    {"anthropic-version": API_VERSION},
                    ANTHROPIC,
                )
            text: list[str] = []
            raws: list[bytes] = []
            request_id = f"tailgate-monitor-{index}-{workload}"
            label = target.provider if target.api == "openai" else f"{target.provider} ({target.api})"
            ticket = id(text)  # unique while this probe runs
            self.waiting[ticket] = (label, workload, time.perf_counter())
            span = None
            if trace is not None and self.tracer is not None:
                carrier = dict(headers or {}) if self._propagate.get(target.provider) else None  # propagate_trace
                span = self.tracer.probe(carrier, trace)
                headers = carrier if carrier is not None else headers
            try:
                async with call(
                    client,
                    path,
                    body,
                    stream=True,
                    client_wants_usage=True,
                    request_id=request_id,
                    headers=headers,
                    dialect=dialect,
                ) as c:
                    async for event in c:
                        if probe.task is not None and isinstance(event, Chunk | Body):
                            if probe.task.tools:
                                raws.append(event.raw)
                            else:
                                text.append(content_text(event.raw))
            finally:
                del self.waiting[ticket]
        result = c.result
        assert result is not None  # a finished iteration always leaves the result
        if result.status == 429 and result.retry_after_s:
            state.pacer.pause_for(min(result.retry_after_s, MAX_PAUSE_S))
        ok = result.error_class is None
        graded = _graded(probe, text, raws) if ok else None
        if span is not None and trace is not None and self.tracer is not None:
            self.tracer.end_probe(
                trace,
                span,
                result,
                provider=target.provider,
                model=target.model,
                api=target.api,
                base_url=self.urls.get(label, ""),
                workload=workload,
                accuracy_ok=graded,
            )
        sample = Sample(
            ts=result.started_at,
            provider=target.provider,
            model=target.model,
            workload=workload,
            status=result.status,
            error_class=result.error_class,
            ttft_ms=result.ttft_ms,
            e2e_ms=result.e2e_ms,
            output_tokens=result.output_tokens if result.status is not None else None,
            tok_s=tok_s(result.output_tokens, result.ttft_ms, result.e2e_ms) if ok else None,
            accuracy_ok=graded,
            ttft_answer_ms=result.ttft_answer_ms,
            reasoning_tokens=result.reasoning_tokens,
            api=target.api,
        )
        return sample, None if ok else result.detail


def _graded(probe: Probe, text: list[str], raws: list[bytes]) -> bool | None:
    """A canary's grade: a tool task by its call's name and arguments, any other by the answer's text."""
    task = probe.task
    if task is None:
        return None
    if task.tools:
        return grade_call(task, *tool_call_of(b"\n".join(raws)))
    return grade(task, "".join(text))
