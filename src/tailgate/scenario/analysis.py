"""From raw records to the comparison: per policy and phase, latency, errors, shares; cut-over times.

Definitions (docs/scenarios.md):

- A request belongs to the phase in which it was *meant to be sent* (open loop: its intended send time).
- Client latency (TTFT, E2E) is the load generator's, through the measurement core: open loop, from the
  intended send time (no coordinated omission).
- Provider share: who served each request, from the gateway's ledger (``x-tailgate-provider``'s value).
- A request *went to* a provider F when F served it, failed it, or it needed more than one attempt and
  ended elsewhere (with two routes, the failed first attempt was F's).
- Cut-over after a fault on F at T: the first request sent at or after T from which fewer than 1% of the
  next :data:`WINDOW` requests went to F; the time is its send time − T. ``null``: never.
- Time to < 10 % after a fault on F at T (``below_10pct_s``): the same with a threshold of 10 % over the next
  :data:`SHORT_WINDOW` requests (2 s at 20 req/s): how fast most new traffic moved.
- Re-admission after F recovers at T: the first request from which F's served share of the next
  :data:`WINDOW` requests is at least half its share in the first phase; back to the configured share
  (``configured_s``): at least its first-phase share minus 3 points.
- Split per class (``share_by_class``): who served the requests of each traffic class (``untagged``: no
  header); ``configured_by_class`` at the run level is what the routes' weights say for each class while
  every route meets its SLO (``tailgate.routing.promises.configured_split``).
- Upstream counts come from the simulators' ground truth (``/sim/truth``): every request they received,
  the gateway's retries, hedges and probes included.
- Moved (``moved_s``) after a fault on F at T: the first request sent at or after T from which F served less
  than half its ``share_before`` (its share of the requests sent since its previous step) of the next
  :data:`WINDOW` requests; ``share_after`` is its share from T to its next step.
- Answer quality (with ``load.tool_calls`` or ``monitor:``): ``tool_calls_checked`` / ``tool_calls_broken``, the
  tool-call answers checked at the client and the broken ones among them, by intended send time;
  ``degraded_served``, the simulators' truth rows' ``degraded`` per provider, by arrival; ``canaries``, the
  monitor's graded canaries per provider, by send time.
"""

from __future__ import annotations

import bisect
import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from msgspec import UNSET

from tailgate.ledger import LedgerRow
from tailgate.ledger.samples import Sample as ProbeSample
from tailgate.routing import Route
from tailgate.routing.promises import configured_split
from tailgate.scenario.config import ScenarioConfig
from tailgate.scenario.runner import UNTAGGED, PolicyRecord, Sample, UpstreamRecord
from tailgate.scenario.schema import (
    CanaryCounts,
    Event,
    Hedge,
    OverTime,
    ScenarioRun,
    Section,
    Stats,
    UpstreamCounts,
)
from tailgate.stats import LatencyHistogram

__all__ = ["WINDOW", "PhaseSpan", "analyze_run", "phases_of"]

WINDOW = 200
"""Requests per window for cut-over and re-admission (10 s at 20 req/s)."""
SHORT_WINDOW = 40
"""Requests per window for the time to < 10 % (2 s at 20 req/s)."""
CUTOVER_SHARE = 0.01
MOSTLY_OFF_SHARE = 0.10
READMIT_FRACTION = 0.5
CONFIGURED_TOLERANCE = 0.03


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    name: str
    start: float
    end: float


def phases_of(cfg: ScenarioConfig) -> list[PhaseSpan]:
    """The phases of the timeline: the initial one, then one per step that names a phase."""
    marks = [(0.0, cfg.initial_phase)] + [(s.at, s.phase) for s in cfg.steps if s.phase is not None]
    out = []
    for i, (start, name) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else cfg.load.duration
        if end > start or i + 1 == len(marks):
            out.append(PhaseSpan(name, start, end))
    return out


def _summary(h: LatencyHistogram) -> Stats:
    if h.count == 0:
        return Stats()
    s = h.summary()
    return Stats(
        p50=round(float(s["p50"]), 1),
        p90=round(float(s["p90"]), 1),
        p99=round(float(s["p99"]), 1),
        max=round(float(s["max"]), 1),
        mean=round(float(s["mean"]), 1),
        count=h.count,
    )


@dataclass
class _Client:
    """What the client saw of a span (the first fields of a :class:`Section`)."""

    requests: int
    errors: int
    failed_before_first_token: int
    failed_after_first_token: int
    errors_by_class: dict[str, int]
    ttft_ms: Stats
    e2e_ms: Stats
    cache_hit_rate: float | None


@dataclass
class _Served:
    """What the gateway's ledger says it served in a span."""

    gateway_requests: int
    share: dict[str, float | None]
    share_by_class: dict[str, dict[str, int | float]]
    no_provider: int
    multi_attempt: int
    cost_per_1k: float | None
    provider_e2e_ms: dict[str, Stats]


def _client(samples: Sequence[Sample]) -> _Client:
    ttft, e2e = LatencyHistogram(), LatencyHistogram()
    errors: dict[str, int] = {}
    before = after = 0
    prompt = cached = 0
    for s in samples:
        r = s.result
        if r.ok and r.cached_tokens is not None and r.prompt_tokens:  # the provider said what it cached
            prompt += r.prompt_tokens
            cached += min(r.cached_tokens, r.prompt_tokens)
        if r.ok:
            if r.ttft_ms is not None:
                ttft.record(r.ttft_ms + s.lag_ms)
            if r.e2e_ms is not None:
                e2e.record(r.e2e_ms + s.lag_ms)
            continue
        key = r.error_class or "other"
        errors[key] = errors.get(key, 0) + 1
        if r.ttft_ms is None:
            before += 1
        else:
            after += 1
    return _Client(
        requests=len(samples),
        errors=before + after,
        failed_before_first_token=before,
        failed_after_first_token=after,
        errors_by_class=dict(sorted(errors.items())),
        ttft_ms=_summary(ttft),
        e2e_ms=_summary(e2e),
        cache_hit_rate=round(cached / prompt, 4) if prompt else None,
    )


def _served(rows: Sequence[LedgerRow], providers: Sequence[str]) -> _Served:
    counts = dict.fromkeys(providers, 0)
    e2e = {p: LatencyHistogram() for p in providers}
    none = fallbacks = 0
    for row in rows:
        if row.provider is None:
            none += 1
            continue
        counts[row.provider] = counts.get(row.provider, 0) + 1
        if row.attempts > 1:
            fallbacks += 1
        if row.status == 200 and row.e2e_ms is not None and row.provider in e2e:
            e2e[row.provider].record(row.e2e_ms)
    total = len(rows)
    by_class: dict[str, dict[str, int]] = {}
    for row in rows:
        if row.provider is not None:
            c = by_class.setdefault(row.traffic_class or UNTAGGED, dict.fromkeys(providers, 0))
            c[row.provider] = c.get(row.provider, 0) + 1
    share_by_class: dict[str, dict[str, int | float]] = {}
    for cls, c in sorted(by_class.items()):
        n_cls = sum(c.values())
        share_by_class[cls] = {"requests": n_cls, **{p: round(n / n_cls, 4) for p, n in c.items()}}
    return _Served(
        gateway_requests=total,
        share={p: round(n / total, 4) if total else None for p, n in counts.items()},
        share_by_class=share_by_class,
        no_provider=none,
        multi_attempt=fallbacks,
        cost_per_1k=round(sum(r.cost or 0.0 for r in rows) / total * 1000, 6) if total else None,
        provider_e2e_ms={p: _summary(h) for p, h in e2e.items()},
    )


def _upstream(records: Sequence[UpstreamRecord], providers: Sequence[str]) -> dict[str, UpstreamCounts]:
    out = {p: UpstreamCounts() for p in providers}
    for u in records:
        slot = out.setdefault(u.provider, UpstreamCounts())
        slot.requests += 1
        if u.status == 429:
            slot.rate_limited += 1
        if u.status != 200:
            slot.errors += 1
    return out


def _went_to(row: LedgerRow, provider: str) -> bool:
    return row.provider == provider or (row.attempts > 1 and row.provider is not None)


def _first_window(
    times: Sequence[float],
    flags: Sequence[bool],
    start: float,
    end: float,
    ok: Callable[[float], bool],
    window: int = WINDOW,
) -> float | None:
    """Send time of the first request in [start, end) whose next ``window`` requests (within the span) pass ``ok``."""
    lo = bisect.bisect_left(times, start)
    hi = bisect.bisect_left(times, end)
    if hi - lo < 1:
        return None
    prefix = [0]
    for f in flags[lo:hi]:
        prefix.append(prefix[-1] + int(f))
    n = hi - lo
    for i in range(n):
        j = min(n, i + window)
        if j - i < min(window, max(20, n // 4)):
            return None  # too few requests left to judge
        if ok((prefix[j] - prefix[i]) / (j - i)):
            return times[lo + i]
    return None


def _share(times: Sequence[float], flags: Sequence[bool], start: float, end: float) -> float | None:
    """The share of requests sent in [start, end) whose flag is set; None without requests."""
    lo, hi = bisect.bisect_left(times, start), bisect.bisect_left(times, end)
    return round(sum(flags[lo:hi]) / (hi - lo), 4) if hi > lo else None


def _quality(
    section: Section,
    samples: Sequence[Sample],
    upstream: Sequence[UpstreamRecord],
    probes: Sequence[ProbeSample],
    providers: Sequence[str],
    tool_calls: bool,
) -> None:
    if tool_calls:
        checked = [s.tool_ok for s in samples if s.tool_ok is not None]
        section.tool_calls_checked, section.tool_calls_broken = len(checked), checked.count(False)
    degraded: dict[str, dict[str, int]] = {p: {} for p in providers}
    for u in upstream:
        if u.degraded is not None:
            slot = degraded.setdefault(u.provider, {})
            slot[u.degraded] = slot.get(u.degraded, 0) + 1
    section.degraded_served = {p: dict(sorted(c.items())) for p, c in degraded.items()}
    canaries = {p: CanaryCounts() for p in providers}
    for probe in probes:
        if probe.accuracy_ok is not None:
            c = canaries.setdefault(probe.provider, CanaryCounts())
            c.graded += 1
            c.right += probe.accuracy_ok
    section.canaries = canaries


def _events(cfg: ScenarioConfig, record: PolicyRecord, baseline: dict[str, float | None]) -> list[Event]:
    rows = sorted(record.ledger, key=lambda r: r.ts)
    times = [record.ledger_t(r) for r in rows]
    steps = cfg.steps
    out = []
    for k, step in enumerate(steps):
        if step.provider is None:
            continue
        provider = step.provider
        nxt = next((s.at for s in steps[k + 1 :] if s.provider == provider), record.duration_s)
        event = Event(at_s=round(step.at, 3), provider=provider, kind=step.kind)
        if step.phase is not None:
            event.phase = step.phase
        if step.kind == "fault":
            prev = max((s.at for s in steps[:k] if s.provider == provider), default=0.0)
            served = [r.provider == provider for r in rows]
            before = _share(times, served, prev, step.at)
            event.share_before, event.share_after = before, _share(times, served, step.at, nxt)
            if before:
                t = _first_window(times, served, step.at, nxt, functools.partial(operator.gt, before / 2))
                event.moved_s = None if t is None else round(max(0.0, t - step.at), 3)
            else:
                event.moved_s = None
            flags = [_went_to(r, provider) for r in rows]
            t = _first_window(times, flags, step.at, nxt, lambda share: share < CUTOVER_SHARE)
            event.cutover_s = None if t is None else round(max(0.0, t - step.at), 3)
            t = _first_window(times, flags, step.at, nxt, lambda share: share < MOSTLY_OFF_SHARE, SHORT_WINDOW)
            event.below_10pct_s = None if t is None else round(max(0.0, t - step.at), 3)
        else:
            base = baseline.get(provider)
            flags = [r.provider == provider for r in rows]
            if base:
                goal = READMIT_FRACTION * base
                t = _first_window(times, flags, step.at, nxt, functools.partial(operator.le, goal))
                event.readmit_s = None if t is None else round(max(0.0, t - step.at), 3)
                full = base - CONFIGURED_TOLERANCE
                t = _first_window(times, flags, step.at, nxt, functools.partial(operator.le, full))
                event.configured_s = None if t is None else round(max(0.0, t - step.at), 3)
            else:
                event.readmit_s = event.configured_s = None
        out.append(event)
    return out


def _section(
    samples: Sequence[Sample],
    rows: Sequence[LedgerRow],
    upstream: Sequence[UpstreamRecord],
    providers: Sequence[str],
    span: PhaseSpan | None = None,
) -> Section:
    client = _client(samples)
    served = _served(rows, providers)
    up = _upstream(upstream, providers)
    total_up = sum(v.requests for v in up.values())
    limited = sum(v.rate_limited for v in up.values())
    n = client.requests
    return Section(
        name=UNSET if span is None else span.name,
        start_s=UNSET if span is None else round(span.start, 3),
        end_s=UNSET if span is None else round(span.end, 3),
        **vars(client),
        **vars(served),
        upstream=up,
        upstream_requests=total_up,
        upstream_rate_limited=limited,
        upstream_rate_limited_ratio=round(limited / n, 5) if n else None,
        extra_upstream_ratio=round(total_up / n - 1.0, 4) if n else None,
    )


_T = TypeVar("_T")


def _between(items: Sequence[_T], times: Sequence[float], start: float, end: float) -> list[_T]:
    return list(items[bisect.bisect_left(times, start) : bisect.bisect_left(times, end)])


def _buckets(record: PolicyRecord, providers: Sequence[str], size: float) -> OverTime:
    """Per time bucket: the share each provider served and the client's P99 E2E (for the charts)."""
    n = max(1, int(record.duration_s / size + 0.999))
    share: dict[str, list[float | None]] = {p: [None] * n for p in providers}
    counts = [dict.fromkeys(providers, 0) for _ in range(n)]
    for row in record.ledger:
        b = int(record.ledger_t(row) / size)
        if 0 <= b < n and row.provider in counts[b]:
            counts[b][row.provider] += 1
    for b, c in enumerate(counts):
        total = sum(c.values())
        for p in providers:
            share[p][b] = round(c[p] / total, 4) if total else None
    hists = [LatencyHistogram() for _ in range(n)]
    for s in record.samples:
        b = int(s.t / size)
        if 0 <= b < n and s.result.ok and s.result.e2e_ms is not None:
            hists[b].record(s.result.e2e_ms + s.lag_ms)
    p99 = [round(h.percentile(99.0), 1) if h.count else None for h in hists]
    return OverTime(bucket_s=size, share=share, p99_e2e_ms=p99)


_BATCH_JOB_LANES = frozenset({"batch-lane", "provider-batch"})
"""The ledger lanes of a batch job's lines (docs/batch.md); every other row is a live request of the load."""


def analyze_run(cfg: ScenarioConfig, record: PolicyRecord) -> ScenarioRun:
    """The run object of the results document (schema in docs/scenarios.md). The phases are the load's: a
    batch's lines (ledger lanes ``batch-lane`` / ``provider-batch``, the providers' batch jobs) are left out of
    them and judged apart (``tailgate.scenario.batch_analysis``)."""
    providers = list(cfg.providers)
    spans = phases_of(cfg)
    s_times = [s.t for s in record.samples]
    live = [r for r in record.ledger if r.lane not in _BATCH_JOB_LANES]  # live requests: batch-live ones too
    if len(live) < len(record.ledger) or any(u.batch for u in record.upstream):
        record = replace(record, ledger=live, upstream=[u for u in record.upstream if not u.batch])
    rows = sorted(record.ledger, key=lambda r: r.ts)
    r_times = [record.ledger_t(r) for r in rows]
    u_times = [u.t for u in record.upstream]
    end = spans[-1].end if spans else record.duration_s
    probes = sorted(record.probes, key=lambda p: p.ts)
    p_times = [p.ts - record.wall0 for p in probes]
    quality = cfg.load.tool_calls > 0 or cfg.monitor is not None
    phases = []
    for span in spans:
        stop = end + 3600.0 if span is spans[-1] else span.end  # late arrivals belong to the last phase
        samples = _between(record.samples, s_times, span.start, stop)
        upstream = _between(record.upstream, u_times, span.start, stop)
        section = _section(samples, _between(rows, r_times, span.start, stop), upstream, providers, span)
        if quality:
            in_span = _between(probes, p_times, span.start, stop)
            _quality(section, samples, upstream, in_span, providers, cfg.load.tool_calls > 0)
        phases.append(section)
    upstream = [u for u in record.upstream if u.t >= 0.0]
    overall = _section(record.samples, rows, upstream, providers)
    if quality:
        in_run = [p for p, t in zip(probes, p_times, strict=True) if t >= 0.0]
        _quality(overall, record.samples, upstream, in_run, providers, cfg.load.tool_calls > 0)
    baseline = phases[0].share if phases else {}
    bucket = max(0.5, round(record.duration_s / 60.0, 1))
    alias = cfg.gateway.models[cfg.alias]
    routes = [Route(cfg.alias, r.provider, r.model, r.weight, frozenset(r.classes)) for r in alias.routes]
    classes = sorted(set(cfg.load.classes) or {UNTAGGED})
    configured = {
        cls: {r.provider: round(v, 4) for r, v in configured_split(routes, None if cls == UNTAGGED else cls).items()}
        for cls in classes
    }
    hedge = cfg.hedge_of(record.run)
    return ScenarioRun(
        name=record.run.label,
        policy=record.run.policy,
        configured_by_class=configured,
        hedge=None if hedge is None else Hedge(after=hedge.after, budget=hedge.budget),
        pacing=record.run.pacing if record.run.pacing is not None else cfg.gateway.routing.pacing.enabled,
        affinity=record.run.affinity if record.run.affinity is not None else cfg.gateway.routing.affinity.enabled,
        stopped_early=record.stopped,
        overall=overall,
        phases=phases,
        events=_events(cfg, record, baseline),
        over_time=_buckets(record, providers, bucket),
        gateway_counters=dict(sorted(record.counters.items())),
    )
