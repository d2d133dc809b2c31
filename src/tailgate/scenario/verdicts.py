"""The answers a scenario's report ends with: one sentence per question the scenario asks, from its numbers.

A scenario asks, for each step of its timeline: how much worse did the client's tail get while a provider
was faulted (P99 TTFT against the first, healthy phase), how fast did new traffic leave the faulted
provider, and how fast did a recovered one get its share back; and, for the whole run, how many requests
failed; a scenario without faults asks whether the configured split held. A fault's provider's share: when each
policy moved it away (below half its share before the fault) and whether it got more or less of the traffic
after the fault; with tool-call traffic, how many broken tool calls reached the client; with a monitor beside,
how the canaries went on each provider, phase by phase. Each sentence names every policy,
best first, and withholds a P99 of fewer than 20 requests (``tailgate.stats.shown``) rather than guessing.
Reads the results document only (``tailgate.scenario/v1``), so a saved run gives the same verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import UnsetType

from tailgate.scenario.batch_report import batch_verdicts
from tailgate.scenario.schema import ScenarioDocument, ScenarioRun, Section
from tailgate.stats.shown import MINIMUMS

__all__ = ["time_scale_note", "verdicts"]


def _times(x: float) -> str:
    """``1.0×``, ``4.5×``, ``21×``: two significant figures at most."""
    return f"{x:.1f}×" if x < 10 else f"{x:.0f}×"


def _p99(phase: Section) -> float | None:
    ttft = phase.ttft_ms
    if ttft.count < MINIMUMS["p99"] or ttft.p99 is None:
        return None
    return ttft.p99


def _listing(items: Sequence[tuple[str, str]]) -> str:
    """``adaptive 1.0×; least-latency 1.3×; weighted 21×``."""
    return "; ".join(f"{name} {what}" for name, what in items)


def _tail(runs: Sequence[ScenarioRun], index: int, baseline_name: str) -> str | None:
    """Phase ``index``: each policy's P99 TTFT as a multiple of its own first (healthy) phase's."""
    ranked: list[tuple[float, str, str]] = []
    name = None
    for run in runs:
        phases = run.phases
        if index >= len(phases):
            continue
        name = _name(phases[index])
        now, base = _p99(phases[index]), _p99(phases[0])
        if now is None or base is None or base <= 0:
            ranked.append((float("inf"), run.name, f"n<{MINIMUMS['p99']}"))
        else:
            ratio = now / base
            ranked.append((ratio, run.name, _times(ratio)))
    if name is None or not ranked:
        return None
    ranked.sort()
    first, rest = ranked[0], ranked[1:]
    if first[0] == float("inf"):
        return f"{name}: too few requests for a P99 TTFT with any policy (n<{MINIMUMS['p99']} per phase)."
    head = f"{name}: {first[1]} kept P99 TTFT at {first[2]} the {baseline_name} phase's"
    return head + (f"; {_listing([(n, w) for _, n, w in rest])}." if rest else ".")


def _event_times(runs: Sequence[ScenarioRun], k: int, key: str) -> list[tuple[float, str, str]]:
    out = []
    for run in runs:
        events = run.events
        if k >= len(events):
            continue
        value = events[k].seconds(key)
        out.append((float("inf") if value is None else value, run.name, _secs(value)))
    return sorted(out)


def _secs(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def _name(phase: Section) -> str:
    return "" if isinstance(phase.name, UnsetType) else phase.name


def _events(runs: Sequence[ScenarioRun]) -> list[str]:
    if not runs:
        return []
    out = []
    for k, ev in enumerate(runs[0].events):
        where = f"{ev.provider} at {ev.at_s:g} s"
        if ev.kind == "fault":
            ranked = _event_times(runs, k, "cutover_s")
            out.append(
                f"fault on {where}: new traffic left it (<1 %) after {_listing([(n, w) for _, n, w in ranked])}."
            )
        else:
            ranked = _event_times(runs, k, "readmit_s")
            out.append(
                f"recovery of {where}: it got half its first-phase share back after "
                f"{_listing([(n, w) for _, n, w in ranked])}."
            )
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100.0 * x:.0f} %"


def _moves(runs: Sequence[ScenarioRun]) -> list[str]:
    """Per fault: each policy's moment it moved the provider's share away, and its share before and after."""
    if not runs:
        return []
    out = []
    for k, ev in enumerate(runs[0].events):
        if ev.kind != "fault":
            continue
        ranked: list[tuple[float, str, str]] = []
        for run in runs:
            if (
                k >= len(run.events)
                or run.events[k].share_before is None
                or isinstance(run.events[k].share_before, UnsetType)
            ):
                continue
            e = run.events[k]
            before = None if isinstance(e.share_before, UnsetType) else e.share_before
            after = None if isinstance(e.share_after, UnsetType) else e.share_after
            moved = e.seconds("moved_s")
            trend = ""
            if before is not None and after is not None:
                trend = "more" if after > before else ("less" if after < before else "the same")
            share = f"{_pct(before)} → {_pct(after)}" + (f": {trend}" if trend else "")
            when = "never moved" if moved is None else f"moved at {ev.at_s + moved:.0f} s ({moved:.1f} s after)"
            ranked.append((float("inf") if moved is None else moved, run.name, f"{when}, share {share}"))
        if ranked:
            ranked.sort()
            out.append(
                f"share of {ev.provider} after its fault at {ev.at_s:g} s: {_listing([(n, w) for _, n, w in ranked])}."
            )
    return out


def _tool_calls(runs: Sequence[ScenarioRun]) -> str | None:
    ranked = []
    for run in runs:
        checked, broken = run.overall.tool_calls_checked, run.overall.tool_calls_broken
        if isinstance(checked, UnsetType) or isinstance(broken, UnsetType) or not checked:
            continue
        ranked.append((broken / checked, run.name, f"{broken:,} of {checked:,} ({100.0 * broken / checked:.1f} %)"))
    if not ranked:
        return None
    ranked.sort()
    return f"broken tool calls that reached the client: {_listing([(n, w) for _, n, w in ranked])}."


def _canaries(runs: Sequence[ScenarioRun]) -> list[str]:
    """The monitor's canaries per provider and phase, all runs together (the same providers and faults)."""
    totals: dict[str, dict[str, list[int]]] = {}
    for run in runs:
        for phase in run.phases:
            if isinstance(phase.canaries, UnsetType):
                continue
            for provider, c in phase.canaries.items():
                slot = totals.setdefault(provider, {}).setdefault(_name(phase), [0, 0])
                slot[0] += c.right
                slot[1] += c.graded
    out = []
    for provider, by_phase in totals.items():
        parts = [f"{name} {right} of {graded} right" for name, (right, graded) in by_phase.items() if graded]
        if parts:
            out.append(f"monitor canaries on {provider} (all runs): {'; '.join(parts)}.")
    return out


def _errors(runs: Sequence[ScenarioRun]) -> str | None:
    ranked = []
    for run in runs:
        n, errors = run.overall.requests, run.overall.errors
        if n:
            ranked.append((errors / n, run.name, f"{errors:,} of {n:,} ({100.0 * errors / n:.1f} %)"))
    if not ranked:
        return None
    ranked.sort()
    return f"requests that failed for the client: {_listing([(n, w) for _, n, w in ranked])}."


def _split(runs: Sequence[ScenarioRun]) -> str | None:
    """Without faults: how far the served split strayed from the configured one (worst class, points)."""
    ranked = []
    for run in runs:
        configured = run.configured_by_class
        worst: float | None = None
        for cls, served in run.overall.share_by_class.items():
            want = configured.get(cls) or {}
            for p, v in served.items():
                if p != "requests":
                    dev = abs(float(v) - want.get(p, 0.0))
                    worst = dev if worst is None else max(worst, dev)
        if worst is not None:
            ranked.append((worst, run.name, f"{100.0 * worst:.1f} points"))
    if not ranked:
        return None
    ranked.sort()
    return f"served split against the configured one (worst class): {_listing([(n, w) for _, n, w in ranked])}."


def verdicts(doc: ScenarioDocument) -> list[str]:
    """One sentence per question the scenario asks, computed from the document's numbers."""
    runs = [r for r in doc.runs if r.phases]
    if not runs:
        return []
    first = _name(runs[0].phases[0])
    out: list[str] = []
    has_faults = any(ev.kind == "fault" for r in runs for ev in r.events)
    for i in range(1, max(len(r.phases) for r in runs)):
        sentence = _tail(runs, i, first)
        if sentence:
            out.append(sentence)
    out += _events(runs)
    out += _moves(runs)
    if (tools := _tool_calls(runs)) is not None:
        out.append(tools)
    out += _canaries(runs)
    if not has_faults and (split := _split(runs)):
        out.append(split)
    if (errors := _errors(runs)) is not None:
        out.append(errors)
    return out + batch_verdicts(doc)


def time_scale_note(doc: ScenarioDocument) -> str | None:
    """A caveat when the run was not at time scale 1 (the recorded results are)."""
    scale = doc.scenario.time_scale or 1.0
    if scale == 1.0:
        return None
    return (
        f"run at --time-scale {scale:g}: every time of the scenario was scaled (phases, faults, the run's length), "
        "so reaction times and per-phase samples differ from a run at 1; the results docs/routing.md records "
        "are at --time-scale 1"
    )
