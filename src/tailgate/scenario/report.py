"""Showing a scenario's results: the comparison table (terminal, Markdown) and a self-contained HTML page.

All three read the results document only (``tailgate.scenario/v1``), so a saved run renders the same.
The HTML uses the load tester's inline-SVG charts (``tailgate.bench._svg``): no script, no URL.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import msgspec
from msgspec import UnsetType

from tailgate.bench._svg import PALETTE, REPORT_CSS, Bars, Line, bar_chart, line_chart
from tailgate.scenario.batch_report import BATCH_HEAD, batch_rows
from tailgate.scenario.schema import ScenarioDocument, ScenarioRun, Section, Stats, Step
from tailgate.scenario.verdicts import time_scale_note, verdicts
from tailgate.stats.shown import percentile_minimum
from tailgate.tables import Col, Grid

__all__ = ["class_rows", "comparison_rows", "event_rows", "render_html", "render_markdown", "rich_tables"]

Doc = ScenarioDocument


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{float(v):,.0f}"


def _pq(summary: Stats, q: int) -> str:
    """A percentile in ms, withheld (``n<K``) below the minimums every face uses (tailgate.stats.shown)."""
    n, minimum = summary.count, percentile_minimum(q)
    if 0 < n < minimum:
        return f"n<{minimum}"
    return _ms({50: summary.p50, 90: summary.p90, 99: summary.p99}.get(q))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100.0 * float(v):.1f}%"


def _secs(v: float | UnsetType | None) -> str:
    return "never" if v is None or isinstance(v, UnsetType) else f"{float(v):.1f} s"


def _text(v: str | UnsetType) -> str:
    return "" if isinstance(v, UnsetType) else v


def _providers(doc: Doc) -> list[str]:
    return list(doc.scenario.providers)


def comparison_head(doc: Doc) -> list[str]:
    head = ["policy", "phase", "req", "TTFT P50", "P90", "P99", "E2E P50", "P90", "P99", "errors (pre/post 1st tok)"]
    head += [f"→{p}" for p in _providers(doc)]
    return [*head, "upstream 429", "extra upstream", "cache hit", "cost /1k req"]


def _sections(run: ScenarioRun) -> list[Section]:
    """A run's phases and, when there is more than one, the whole run (``all``): one phase is the whole run."""
    phases = list(run.phases)
    return phases if len(phases) == 1 else [*phases, msgspec.structs.replace(run.overall, name="all")]


def comparison_rows(doc: Doc) -> list[list[str]]:
    """One row per policy × phase (and the whole run), latency in ms."""
    rows = []
    providers = _providers(doc)
    for run in doc.runs:
        for ph in _sections(run):
            rows.append(
                [
                    run.name,
                    _text(ph.name),
                    str(ph.requests),
                    *(_pq(ph.ttft_ms, q) for q in (50, 90, 99)),
                    *(_pq(ph.e2e_ms, q) for q in (50, 90, 99)),
                    f"{ph.errors} ({ph.failed_before_first_token}/{ph.failed_after_first_token})",
                    *[_pct(ph.share.get(p)) for p in providers],
                    str(ph.upstream_rate_limited),
                    _pct(ph.extra_upstream_ratio),
                    _pct(ph.cache_hit_rate),
                    "-" if ph.cost_per_1k is None else f"{ph.cost_per_1k:.4f}",
                ]
            )
    return rows


def event_rows(doc: Doc) -> list[list[str]]:
    """One row per policy × timeline event: moved and cut-over after a fault, re-admission after a recovery."""
    rows = []
    for run in doc.runs:
        for ev in run.events:
            if ev.kind == "fault":
                pairs = [("fault → cut-over (<1% of new traffic)", ev.cutover_s)]
                if not isinstance(ev.below_10pct_s, UnsetType):
                    pairs.insert(0, ("fault → <10% of new traffic", ev.below_10pct_s))
                if isinstance(ev.share_before, float) and not isinstance(ev.moved_s, UnsetType):
                    pairs.insert(0, ("fault → moved (<½ its share before)", ev.moved_s))
            else:
                pairs = [("recovery → re-admission (≥½ first-phase share)", ev.readmit_s)]
                if not isinstance(ev.configured_s, UnsetType):
                    pairs.append(("recovery → first-phase share (−3 points)", ev.configured_s))
            for what, value in pairs:
                rows.append([run.name, f"{ev.at_s:g} s", ev.provider, what, _secs(value)])
    return rows


CLASS_HEAD = ["policy", "phase", "class", "req", "configured", "served", "max deviation"]


def class_rows(doc: Doc) -> list[list[str]]:
    """One row per policy × phase × traffic class: the configured split against the served one."""
    rows = []
    for run in doc.runs:
        configured = run.configured_by_class
        for ph in _sections(run):
            for cls, served in ph.share_by_class.items():
                want = configured.get(cls) or {}
                providers = [p for p in served if p != "requests"]
                dev = max((abs(served.get(p, 0.0) - want.get(p, 0.0)) for p in providers), default=0.0)
                rows.append(
                    [
                        run.name,
                        _text(ph.name),
                        cls,
                        str(served.get("requests", 0)),
                        " / ".join(f"{p} {_pct(want.get(p, 0.0))}" for p in providers),
                        " / ".join(f"{p} {_pct(served.get(p))}" for p in providers),
                        f"{100.0 * dev:.1f} pt",
                    ]
                )
    return rows


EVENT_HEAD = ["policy", "at", "provider", "event", "time"]

COMPARISON_LEGEND = (
    "req: client requests sent in the phase; n<K: fewer than K samples for that percentile; "
    "errors (pre/post 1st tok): requests that failed for the client, before / after their first token; "
    "→provider: share of the phase's successful requests that provider served; "
    "upstream 429: upstream answers 429 (rate limited); "
    "extra upstream: upstream attempts ÷ client requests − 1 (retries, failovers), both counted by time in the "
    "phase, so requests crossing a phase boundary can make it negative; "
    "cache hit: prompt tokens served from a provider's cache; cost /1k req: from the providers' prices."
)
"""What each derived column of the comparison table measures, said once under it."""


def _cols(head: Sequence[str], left: int, keep: Sequence[int] | None = None) -> tuple[Col, ...]:
    return tuple(
        Col(h, h, 0 if i < left else (keep[i] if keep is not None else 1), left=i < left) for i, h in enumerate(head)
    )


def rich_tables(doc: Doc) -> list[Grid]:
    """The comparison, events and class tables, to fit to the terminal (``tailgate.tables``)."""
    title = f"scenario {doc.scenario.name}: client latency (ms) per phase, share served per provider"
    head = comparison_head(doc)
    # Narrow terminals lose the P50s and the upstream extras first; policy, phase, P99s and shares stay.
    keep = [0, 0, 1, 3, 2, 1, 3, 2, 1, 2, *([1] * len(_providers(doc))), 4, 4, 3, 4]
    out = [
        Grid(
            _cols(head, 2, keep),
            tuple(tuple(r) for r in comparison_rows(doc)),
            title=title,
            caption=COMPARISON_LEGEND,
        )
    ]
    events = event_rows(doc)
    if events:
        out.append(Grid(_cols(EVENT_HEAD, 4), tuple(tuple(r) for r in events), title="timeline events"))
    classes = class_rows(doc)
    if classes:
        out.append(
            Grid(
                _cols(CLASS_HEAD, 3),
                tuple(tuple(r) for r in classes),
                title="split per traffic class (configured: the weights while every route meets its SLO)",
            )
        )
    if batches := batch_rows(doc):
        out.append(Grid(_cols(BATCH_HEAD, 3), tuple(tuple(r) for r in batches), title="the batch beside the load"))
    return out


def _md(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(doc: Doc) -> str:
    """The comparison (and events) as Markdown tables, then the verdicts, for docs."""
    parts = [_md(comparison_head(doc), comparison_rows(doc))]
    events = event_rows(doc)
    if events:
        parts.append(_md(EVENT_HEAD, events))
    classes = class_rows(doc)
    if classes:
        parts.append(_md(CLASS_HEAD, classes))
    if batches := batch_rows(doc):
        parts.append(_md(BATCH_HEAD, batches))
    if said := verdicts(doc):
        parts.append("\n".join(f"- {line}" for line in said))
    if note := time_scale_note(doc):
        parts.append(f"Note: {note}.")
    return "\n\n".join(parts) + "\n"


def _html_table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 2) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=l' if i < left else ''}>{escape(c)}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f'<div class="scroll"><table><tr>{th}</tr>{body}</table></div>'


def _charts(doc: Doc) -> list[str]:
    runs = doc.runs
    providers = _providers(doc)
    colors = {run.name: PALETTE[i % len(PALETTE)] for i, run in enumerate(runs)}
    charts = []
    phases = [p.name for p in doc.scenario.phases]
    for metric in ("e2e_ms", "ttft_ms"):
        series = [
            Bars(
                run.name, [(ph.e2e_ms if metric == "e2e_ms" else ph.ttft_ms).p99 for ph in run.phases], colors[run.name]
            )
            for run in runs
        ]
        label = "E2E" if metric == "e2e_ms" else "TTFT"
        charts.append(bar_chart(f"p99-{metric}", f"P99 {label} per phase", phases, series, y_label="ms"))
    lines = []
    for run in runs:
        ot = run.over_time
        size = float(ot.bucket_s)
        pts = [(i * size, v) for i, v in enumerate(ot.p99_e2e_ms)]
        lines.append(Line(run.name, pts, colors[run.name]))
    charts.append(line_chart("p99-over-time", "client P99 E2E over time", lines, x_label="s", y_label="ms"))
    for p in providers:
        share_lines = []
        for run in runs:
            ot = run.over_time
            size = float(ot.bucket_s)
            vals = ot.share.get(p) or []
            share_lines.append(
                Line(
                    run.name,
                    [(i * size, None if v is None else 100.0 * v) for i, v in enumerate(vals)],
                    colors[run.name],
                )
            )
        charts.append(
            line_chart(f"share-{p}", f"share served by {p}", share_lines, x_label="s", y_label="%", y_max=100.0)
        )
    progress = []
    for run in runs:
        if isinstance(run.batch, UnsetType) or not run.batch.progress:
            continue
        points = run.batch.progress
        progress.append(
            Line(f"{run.name}: answered", [(t, done + failed) for t, done, failed, _ in points], colors[run.name])
        )
        progress.append(Line(f"{run.name}: waiting", [(t, pending) for t, _, _, pending in points], PALETTE[-1]))
    if progress:
        charts.append(
            line_chart("batch-progress", "the batch's lines over time", progress, x_label="s", y_label="lines")
        )
    return charts


def render_html(doc: Doc) -> str:
    """One self-contained page: header, comparison table, events, charts."""
    scenario = doc.scenario
    name = scenario.name
    cmd = " ".join(doc.command)
    meta = f"tailgate {doc.tailgate_version} · started {doc.started_at}"
    parts = [f"<h1>tailgate scenario: {escape(name)}</h1>", f'<p class="meta">{escape(meta)}</p>']
    if cmd:
        parts.append(f'<p class="meta"><code>{escape(cmd)}</code></p>')
    if scenario.description:
        parts.append(f"<p>{escape(scenario.description)}</p>")
    if doc.partial:
        parts.append('<div class="notes">Stopped early: partial results.</div>')
    if note := time_scale_note(doc):
        parts.append(f'<div class="notes">{escape(note[0].upper() + note[1:])}.</div>')
    timeline = [[f"{s.at:g} s", _text(s.phase), _text(s.provider), _step_text(s)] for s in scenario.timeline]
    parts.append("<h2>Timeline</h2>" + _html_table(["at", "phase", "provider", "action"], timeline, left=4))
    parts.append("<h2>Comparison (client latency in ms)</h2>" + _html_table(comparison_head(doc), comparison_rows(doc)))
    events = event_rows(doc)
    if events:
        parts.append("<h2>Cut-over and re-admission</h2>" + _html_table(EVENT_HEAD, events, left=4))
    if classes := class_rows(doc):
        parts.append("<h2>Split per traffic class</h2>" + _html_table(CLASS_HEAD, classes, left=3))
    if batches := batch_rows(doc):
        parts.append("<h2>The batch beside the load</h2>" + _html_table(BATCH_HEAD, batches, left=3))
    if said := verdicts(doc):
        parts.append("<h2>Verdicts</h2><ul>" + "".join(f"<li>{escape(v)}</li>" for v in said) + "</ul>")
    parts.append('<h2>Charts</h2><div class="charts">' + "\n".join(_charts(doc)) + "</div>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f"<title>{escape('tailgate scenario: ' + name)}</title>\n<style>{REPORT_CSS}</style></head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def _step_text(step: Step) -> str:
    out = []
    if step.clear is True:
        out.append("clear faults")
    if not isinstance(step.set, UnsetType) and step.set:
        out.append("set " + ", ".join(f"{k}={v}" for k, v in step.set.items()))
    return "; ".join(out) or "phase marker"
