"""The HTML report of a ``tailgate bench`` run: one self-contained offline file.

Input is the ``results.json`` document (schema ``tailgate.bench/v1``). Output has inline CSS and inline
SVG charts only (see ``_svg``): no script, no font, no URL, so it can be mailed, archived and opened
years later. Every string from the document is escaped: target names and error examples come from
the command line and from the network.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from html import escape
from itertools import pairwise

import msgspec

from tailgate.bench._svg import PALETTE, REPORT_CSS, Bars, Line, bar_chart, fmt_num, line_chart
from tailgate.bench.results import describe_load
from tailgate.bench.schema import Accuracy, BenchDocument, DecayRow, Load, Run, ThresholdResult, UnsetType
from tailgate.stats import LatencyHistogram
from tailgate.stats.shown import wilson

__all__ = ["render_html"]

_DASHES = {"p50": "", "p90": "6 3", "p99": "2 3"}
_CDF_QS = [q / 2 for q in range(181)] + [90.5 + q / 2 for q in range(19)] + [99.5, 99.9, 100.0]
_NO_OK = "no successful requests"


# -- reading the document ----------------------------------------------------------------------


def _num(v: float | None) -> float | None:
    """A finite number or None."""
    if v is None or isinstance(v, bool) or not math.isfinite(v):
        return None
    return float(v)


def _metric(run: Run, name: str, field: str) -> float | None:
    return _num(run.metric(name, field))


def _target(run: Run) -> str:
    return run.target.name or "?"


def _load_label(load: Load) -> str:
    """The load as results.py names it everywhere, with ``closed`` dropped: ``c=10`` fits an axis tick."""
    return describe_load(load).removeprefix("closed ")


def _load_key(load: Load) -> float:
    """Sort key inside one mode: concurrency or rate (stages keep their order: key 0, stable sort)."""
    c = load.get_concurrency()
    return (None if c is None else float(c)) or load.get_rate() or 0.0


def _run_label(run: Run) -> str:
    return f"{_target(run)} · {_load_label(run.load)}"


def _has_ok(run: Run) -> bool:
    return bool(run.successes) and _metric(run, "e2e_ms", "p50") is not None


def _loads(runs: Sequence[Run]) -> list[str]:
    """Distinct load labels, ordered by mode then concurrency / rate / first appearance."""
    order = {"closed": 0, "open": 1, "stage": 2}
    seen: dict[str, tuple[int, float, int]] = {}
    for i, r in enumerate(runs):
        seen.setdefault(_load_label(r.load), (order.get(r.load.mode, 3), _load_key(r.load), i))
    return sorted(seen, key=seen.__getitem__)


def _targets(runs: Sequence[Run]) -> list[str]:
    return list(dict.fromkeys(_target(r) for r in runs))


def _histogram(run: Run, name: str) -> LatencyHistogram | None:
    data = run.histogram(name)
    if data is None:
        return None
    try:
        h = LatencyHistogram.from_dict(msgspec.structs.asdict(data))
    except ValueError:
        return None
    return h if h.count else None


# -- charts --------------------------------------------------------------------------------------


def _color(targets: Sequence[str], name: str) -> str:
    return PALETTE[targets.index(name) % len(PALETTE)]


def _latency_vs_load(runs: Sequence[Run]) -> list[str]:
    """P50/P90/P99 of E2E and TTFT per load level: colour = target, dash = percentile."""
    loads, targets = _loads(runs), _targets(runs)
    charts = []
    for metric, title in (("e2e_ms", "E2E latency"), ("ttft_ms", "TTFT")):
        lines = []
        for t in targets:
            by_load = {_load_label(r.load): r for r in runs if _target(r) == t}
            for pct, dash in _DASHES.items():
                pts = [
                    (float(i), _metric(by_load[lv], metric, pct) if lv in by_load else None)
                    for i, lv in enumerate(loads)
                ]
                lines.append(Line(f"{t} {pct.upper()}", pts, _color(targets, t), dash))
        charts.append(
            line_chart(
                "latency-vs-load", f"{title} percentiles vs load", lines, x_label="load", y_label="ms", categories=loads
            )
        )
    return charts


def _cdfs(runs: Sequence[Run]) -> tuple[list[str], list[str]]:
    """One CDF chart per metric with one line per run; the runs without that histogram are named."""
    charts, missing = [], []
    for metric, title in (("ttft_ms", "TTFT"), ("e2e_ms", "E2E latency")):
        lines = []
        for i, r in enumerate(runs):
            h = _histogram(r, metric)
            if h is None:
                missing.append(f"{_run_label(r)} ({title})")
                continue
            pts = [(h.percentile(q), q) for q in _CDF_QS]
            lines.append(Line(_run_label(r), pts, PALETTE[i % len(PALETTE)]))
        if lines:
            charts.append(line_chart("cdf", f"{title} CDF", lines, x_label="ms", y_label="percentile", y_max=100.0))
    return charts, missing


def _timeline(run: Run) -> str | None:
    """Successful and failed requests per second over the run, from the per-interval timeline."""
    tl = run.points()
    if not tl:
        return None
    ts = [float(p.t) for p in tl]
    steps = sorted(b - a for a, b in pairwise(ts) if b > a)
    dt = steps[len(steps) // 2] if steps else 1.0  # the interval width; a median ignores a short last one
    ok = [(t, float(p.ok) / dt) for t, p in zip(ts, tl, strict=True)]
    err = [(t, float(p.errors) / dt) for t, p in zip(ts, tl, strict=True)]
    lines = [Line("ok req/s", ok, PALETTE[0]), Line("errors/s", err, PALETTE[3], "4 2")]
    label = _run_label(run)
    return line_chart("timeline", label, lines, x_label="seconds", y_label="per second", width=330, legend_width=90)


def _target_bars(runs: Sequence[Run]) -> list[str]:
    """Target vs target at each load: P90 TTFT, P90 E2E and req/s side by side."""
    loads, targets = _loads(runs), _targets(runs)
    cell = {(_target(r), _load_label(r.load)): r for r in runs}
    specs: list[tuple[str, str, Callable[[Run], float | None]]] = [
        ("P90 TTFT", "ms", lambda r: _metric(r, "ttft_ms", "p90")),
        ("P90 E2E", "ms", lambda r: _metric(r, "e2e_ms", "p90")),
        ("Throughput", "req/s", lambda r: _num(r.throughput.req_per_s)),
    ]
    charts = []
    for title, unit, get in specs:
        series = [
            Bars(t, [get(cell[t, lv]) if (t, lv) in cell else None for lv in loads], _color(targets, t))
            for t in targets
        ]
        charts.append(bar_chart("targets", f"{title} by target", loads, series, y_label=unit))
    return charts


# -- tables --------------------------------------------------------------------------------------


def _cell(v: str | int | None, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{escape(str(v))}</td>"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], left: int = 0, last_left: bool = False) -> str:
    """``rows`` hold ready ``<td>`` cells; the first ``left`` columns (and the last if asked) are text."""
    lefts = {*range(left), *([len(head) - 1] if last_left else [])}
    ths = "".join(f"<th{' class=l' if i in lefts else ''}>{escape(h)}</th>" for i, h in enumerate(head))
    body = "\n".join(f"<tr>{''.join(r)}</tr>" for r in rows)
    return f"<table><thead><tr>{ths}</tr></thead><tbody>\n{body}\n</tbody></table>"


def _ms(v: float | None) -> str:
    return "—" if v is None else fmt_num(v)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.2f} %"


_LAT_LABEL = {"ttft_answer_ms": "TTFT answer"}


def _summary_table(runs: Sequence[Run]) -> str:
    lag = any(r.metrics.get("schedule_lag_ms") for r in runs)
    head = ["target", "load", "requests", "ok", "error rate", "req/s", "out tok/s"]
    lat = [(m, p) for m in ("ttft_ms", "e2e_ms", "itl_ms") for p in ("p50", "p90", "p99")]
    lat.insert(3, ("ttft_answer_ms", "p90"))  # time to first answer token (thinking models), beside TTFT
    head += [_LAT_LABEL.get(m, m.split("_")[0].upper()) + f" {p.upper()} ms" for m, p in lat]
    head += ["lag P99 ms"] if lag else []
    rows = []
    for r in runs:
        tp = r.throughput
        est = " (est.)" if r.tokens.estimated else ""
        row = [_cell(_target(r), "l"), _cell(_load_label(r.load), "l")]
        row += [_cell(r.requests), _cell(r.successes), _cell(_pct(_num(r.error_rate)))]
        row += [_cell(_ms(_num(tp.req_per_s))), _cell(_ms(_num(tp.output_tokens_per_s)) + est)]
        row += [_cell(_ms(_metric(r, m, p))) for m, p in lat]
        row += [_cell(_ms(_metric(r, "schedule_lag_ms", "p99")))] if lag else []
        rows.append(row)
    return '<div class="scroll">' + _table(head, rows, left=2) + "</div>"


def _errors_table(runs: Sequence[Run]) -> str | None:
    rows = []
    for r in runs:
        examples = {} if isinstance(r.error_examples, UnsetType) else r.error_examples
        for cls, n in sorted(r.errors.items(), key=lambda kv: -kv[1]):
            ex = examples.get(cls, "")
            ex = ex if len(ex) <= 400 else ex[:400] + "…"
            rows.append([_cell(_target(r), "l"), _cell(_load_label(r.load), "l"), _cell(cls, "l")])
            rows[-1] += [_cell(n), _cell(ex, "ex")]
    return _table(["target", "load", "class", "count", "example"], rows, left=3, last_left=True) if rows else None


def _decay_table(decay: Sequence[DecayRow]) -> str | None:
    def ratio(v: float | None) -> str:
        x = _num(v)
        return "—" if x is None else f"{x:.2f}×"

    rows = [
        [_cell(d.target, "l"), _cell(d.concurrency)]
        + [_cell(ratio(x)) for x in (d.p99_e2e_ratio, d.p99_ttft_ratio, d.mean_tok_s_ratio)]
        + [_cell(_ms(_num(d.req_per_s)))]
        for d in decay
    ]
    head = ["target", "concurrency", "P99 E2E ÷ c=1", "P99 TTFT ÷ c=1", "mean tok/s ÷ c=1", "req/s"]
    return _table(head, rows, left=1) if rows else None


def _thresholds_table(thresholds: Sequence[ThresholdResult]) -> str | None:
    rows = []
    for t in thresholds:
        shown = fmt_num(v) if (v := _num(t.value)) is not None else "—"
        verdict = _cell("PASS", "pass") if t.passed else _cell("FAIL", "fail")
        rows.append([_cell(t.expr, "l"), _cell(t.target or "all", "l"), _cell(_load_label(t.load), "l")])
        limit = _num(t.limit)
        rows[-1] += [_cell(shown), _cell("" if limit is None else fmt_num(limit)), verdict]
    return _table(["threshold", "target", "load", "value", "limit", "result"], rows, left=3) if rows else None


def _accuracy_table(runs: Sequence[Run]) -> str | None:
    """Right, total and percent of the runs that graded answers, with the Wilson interval."""
    acc = [(r, r.accuracy) for r in runs if isinstance(r.accuracy, Accuracy)]
    if not acc:
        return None

    def interval(a: Accuracy) -> str:
        if a.total <= 0:
            return "—"
        lo, hi = wilson(a.right, a.total)
        return f"{100 * lo:.0f}–{100 * hi:.0f} % (n={a.total})"

    rows = [
        [
            _cell(_target(r), "l"),
            _cell(_load_label(r.load), "l"),
            _cell(a.right),
            _cell(a.total),
            _cell(fmt_num(a.pct)),
            _cell(interval(a)),
        ]
        for r, a in acc
    ]
    return _table(["target", "load", "right", "total", "pct", "95% interval (Wilson)"], rows, left=2)


# -- page ----------------------------------------------------------------------------------------


def _section(title: str, body: str | None, empty: str) -> str:
    return f"<h2>{escape(title)}</h2>\n" + (body if body else f'<p class="empty">{escape(empty)}</p>')


def _charts(items: Sequence[str]) -> str:
    return '<div class="charts">\n' + "\n".join(items) + "\n</div>"


def _when(epoch: float) -> str:
    """A readable UTC time (``2026-12-04 21:46:16 UTC``) for the document's Unix ``started_at``."""
    import datetime as dt

    try:
        return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):
        return str(epoch)


def _header(doc: BenchDocument, runs: Sequence[Run]) -> str:
    cmd = " ".join(doc.command)
    meta = [
        f"tailgate {escape(doc.tailgate_version)}",
        f"started {escape(_when(doc.started_at))}",
        f"{len(runs)} run(s), {len(_targets(runs))} target(s)",
    ]
    out = ["<h1>tailgate bench report</h1>", f'<p class="meta">{" · ".join(meta)}</p>']
    if cmd:
        out.append(f'<p class="meta"><code>{escape(cmd)}</code></p>')
    targets = {_target(r): r.target for r in runs}
    rows = [[_cell(n, "l"), _cell(_given(t.base_url), "l"), _cell(_given(t.model), "l")] for n, t in targets.items()]
    if rows:
        out.append(_table(["target", "base URL", "model"], rows, left=3))
    notes = doc.notes
    if notes:
        out.append('<div class="notes"><ul>' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul></div>")
    return "\n".join(out)


def _chart_sections(runs: Sequence[Run]) -> list[str]:
    ok_runs = [r for r in runs if _has_ok(r)]
    cdfs, missing = _cdfs(ok_runs)
    cdf_body = _charts(cdfs) if cdfs else None
    if missing:
        note = f'<p class="empty">no histogram for: {escape(", ".join(missing))}</p>'
        cdf_body = (cdf_body or "") + note
    timelines = [c for c in map(_timeline, runs) if c]
    return [
        _section("Latency percentiles vs load", _charts(_latency_vs_load(ok_runs)) if ok_runs else None, _NO_OK),
        _section("TTFT and E2E CDFs", cdf_body, _NO_OK),
        _section("Requests and errors over time", _charts(timelines) if timelines else None, "no timeline recorded"),
        _section("Target vs target", _charts(_target_bars(ok_runs)) if ok_runs else None, _NO_OK),
    ]


def _given(x: str | UnsetType) -> str:
    return "" if isinstance(x, UnsetType) else x


def render_html(doc: BenchDocument) -> str:
    """The whole report for one ``results.json`` document, as a self-contained HTML page."""
    runs = doc.runs
    title = "tailgate bench: " + ", ".join(_targets(runs))
    from tailgate.bench.report_findings import capacity_section, rate_limit_section

    found = [
        _section(title, body, "")
        for title, body in (("Capacity", capacity_section(doc)), ("Rate limits", rate_limit_section(doc)))
        if body
    ]
    body = [
        _header(doc, runs),
        *found,
        _section("Runs", _summary_table(runs) if runs else None, "no runs"),
        *_chart_sections(runs),
        _section("Errors by class", _errors_table(runs), "no errors"),
        _section(
            "Decay (ratio to concurrency 1)",
            _decay_table(doc.decay),
            "no decay table: the sweep has no concurrency 1",
        ),
        _section("Thresholds", _thresholds_table(doc.thresholds), "no thresholds given"),
        _section("Accuracy", _accuracy_table(runs), "accuracy suite not run"),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{REPORT_CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
