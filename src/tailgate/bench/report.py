"""The HTML report of a ``tailgate bench`` run: one self-contained offline file.

Input is the ``results.json`` document (schema ``tailgate.bench/v1``). Output has inline CSS and inline
SVG charts only (see ``_svg``): no script, no font, no URL, so it can be mailed, archived and opened
years later. Every string from the document is escaped: target names and error examples come from
the command line and from the network.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape
from itertools import pairwise
from typing import Any

from tailgate.bench._svg import PALETTE, REPORT_CSS, Bars, Line, bar_chart, fmt_num, line_chart
from tailgate.bench.results import describe_load
from tailgate.stats import LatencyHistogram
from tailgate.stats.shown import wilson

__all__ = ["render_html"]

Doc = Mapping[str, Any]
_DASHES = {"p50": "", "p90": "6 3", "p99": "2 3"}
_CDF_QS = [q / 2 for q in range(181)] + [90.5 + q / 2 for q in range(19)] + [99.5, 99.9, 100.0]
_NO_OK = "no successful requests"


# -- reading the document ----------------------------------------------------------------------


def _num(v: Any) -> float | None:
    """A finite number or None (null fields, a missing key, a string where a number was expected)."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def _metric(run: Doc, name: str, field: str) -> float | None:
    return _num(((run.get("metrics") or {}).get(name) or {}).get(field))


def _target(run: Doc) -> str:
    return str((run.get("target") or {}).get("name") or "?")


def _load_label(load: Doc) -> str:
    """The load as results.py names it everywhere, with ``closed`` dropped: ``c=10`` fits an axis tick."""
    return describe_load(load).removeprefix("closed ")


def _load_key(load: Doc) -> float:
    """Sort key inside one mode: concurrency or rate (stages keep their order: key 0, stable sort)."""
    return _num(load.get("concurrency")) or _num(load.get("rate")) or 0.0


def _run_label(run: Doc) -> str:
    return f"{_target(run)} · {_load_label(run.get('load') or {})}"


def _has_ok(run: Doc) -> bool:
    return bool(run.get("successes")) and _metric(run, "e2e_ms", "p50") is not None


def _loads(runs: Sequence[Doc]) -> list[str]:
    """Distinct load labels, ordered by mode then concurrency / rate / first appearance."""
    order = {"closed": 0, "open": 1, "stage": 2}
    seen: dict[str, tuple[int, float, int]] = {}
    for i, r in enumerate(runs):
        load = r.get("load") or {}
        seen.setdefault(_load_label(load), (order.get(str(load.get("mode")), 3), _load_key(load), i))
    return sorted(seen, key=seen.__getitem__)


def _targets(runs: Sequence[Doc]) -> list[str]:
    return list(dict.fromkeys(_target(r) for r in runs))


def _histogram(run: Doc, name: str) -> LatencyHistogram | None:
    data = (run.get("histograms") or {}).get(name)
    if not isinstance(data, Mapping):
        return None
    try:
        h = LatencyHistogram.from_dict(data)
    except ValueError:
        return None
    return h if h.count else None


# -- charts --------------------------------------------------------------------------------------


def _color(targets: Sequence[str], name: str) -> str:
    return PALETTE[targets.index(name) % len(PALETTE)]


def _latency_vs_load(runs: Sequence[Doc]) -> list[str]:
    """P50/P90/P99 of E2E and TTFT per load level: colour = target, dash = percentile."""
    loads, targets = _loads(runs), _targets(runs)
    charts = []
    for metric, title in (("e2e_ms", "E2E latency"), ("ttft_ms", "TTFT")):
        lines = []
        for t in targets:
            by_load = {_load_label(r.get("load") or {}): r for r in runs if _target(r) == t}
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


def _cdfs(runs: Sequence[Doc]) -> tuple[list[str], list[str]]:
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


def _timeline(run: Doc) -> str | None:
    """Successful and failed requests per second over the run, from the per-interval timeline."""
    tl = [p for p in run.get("timeline") or [] if isinstance(p, Mapping) and _num(p.get("t")) is not None]
    if not tl:
        return None
    ts = [_num(p["t"]) or 0.0 for p in tl]
    steps = sorted(b - a for a, b in pairwise(ts) if b > a)
    dt = steps[len(steps) // 2] if steps else 1.0  # the interval width; a median ignores a short last one
    ok = [(t, (_num(p.get("ok")) or 0.0) / dt) for t, p in zip(ts, tl, strict=True)]
    err = [(t, (_num(p.get("errors")) or 0.0) / dt) for t, p in zip(ts, tl, strict=True)]
    lines = [Line("ok req/s", ok, PALETTE[0]), Line("errors/s", err, PALETTE[3], "4 2")]
    label = _run_label(run)
    return line_chart("timeline", label, lines, x_label="seconds", y_label="per second", width=330, legend_width=90)


def _target_bars(runs: Sequence[Doc]) -> list[str]:
    """Target vs target at each load: P90 TTFT, P90 E2E and req/s side by side."""
    loads, targets = _loads(runs), _targets(runs)
    cell = {(_target(r), _load_label(r.get("load") or {})): r for r in runs}
    specs: list[tuple[str, str, Callable[[Doc], float | None]]] = [
        ("P90 TTFT", "ms", lambda r: _metric(r, "ttft_ms", "p90")),
        ("P90 E2E", "ms", lambda r: _metric(r, "e2e_ms", "p90")),
        ("Throughput", "req/s", lambda r: _num((r.get("throughput") or {}).get("req_per_s"))),
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


def _cell(v: Any, cls: str = "") -> str:
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


def _summary_table(runs: Sequence[Doc]) -> str:
    lag = any((r.get("metrics") or {}).get("schedule_lag_ms") for r in runs)
    head = ["target", "load", "requests", "ok", "error rate", "req/s", "out tok/s"]
    lat = [(m, p) for m in ("ttft_ms", "e2e_ms", "itl_ms") for p in ("p50", "p90", "p99")]
    lat.insert(3, ("ttft_answer_ms", "p90"))  # time to first answer token (thinking models), beside TTFT
    head += [_LAT_LABEL.get(m, m.split("_")[0].upper()) + f" {p.upper()} ms" for m, p in lat]
    head += ["lag P99 ms"] if lag else []
    rows = []
    for r in runs:
        tp = r.get("throughput") or {}
        est = " (est.)" if (r.get("tokens") or {}).get("estimated") else ""
        row = [_cell(_target(r), "l"), _cell(_load_label(r.get("load") or {}), "l")]
        row += [_cell(r.get("requests", "—")), _cell(r.get("successes", "—")), _cell(_pct(_num(r.get("error_rate"))))]
        row += [_cell(_ms(_num(tp.get("req_per_s")))), _cell(_ms(_num(tp.get("output_tokens_per_s"))) + est)]
        row += [_cell(_ms(_metric(r, m, p))) for m, p in lat]
        row += [_cell(_ms(_metric(r, "schedule_lag_ms", "p99")))] if lag else []
        rows.append(row)
    return '<div class="scroll">' + _table(head, rows, left=2) + "</div>"


def _errors_table(runs: Sequence[Doc]) -> str | None:
    rows = []
    for r in runs:
        examples = r.get("error_examples") or {}
        for cls, n in sorted((r.get("errors") or {}).items(), key=lambda kv: -(_num(kv[1]) or 0)):
            ex = str(examples.get(cls, ""))
            ex = ex if len(ex) <= 400 else ex[:400] + "…"
            rows.append([_cell(_target(r), "l"), _cell(_load_label(r.get("load") or {}), "l"), _cell(cls, "l")])
            rows[-1] += [_cell(n), _cell(ex, "ex")]
    return _table(["target", "load", "class", "count", "example"], rows, left=3, last_left=True) if rows else None


def _decay_table(decay: Sequence[Doc]) -> str | None:
    def ratio(v: Any) -> str:
        x = _num(v)
        return "—" if x is None else f"{x:.2f}×"

    rows = [
        [_cell(d.get("target", "?"), "l"), _cell(d.get("concurrency", "?"))]
        + [_cell(ratio(d.get(k))) for k in ("p99_e2e_ratio", "p99_ttft_ratio", "mean_tok_s_ratio")]
        + [_cell(_ms(_num(d.get("req_per_s"))))]
        for d in decay
    ]
    head = ["target", "concurrency", "P99 E2E ÷ c=1", "P99 TTFT ÷ c=1", "mean tok/s ÷ c=1", "req/s"]
    return _table(head, rows, left=1) if rows else None


def _thresholds_table(thresholds: Sequence[Doc]) -> str | None:
    rows = []
    for t in thresholds:
        ok = bool(t.get("passed"))
        value = t.get("value")
        shown = fmt_num(v) if (v := _num(value)) is not None else ("—" if value is None else value)
        load = t.get("load")
        load = _load_label(load) if isinstance(load, Mapping) else load or ""
        verdict = _cell("PASS", "pass") if ok else _cell("FAIL", "fail")
        rows.append([_cell(t.get("expr", "?"), "l"), _cell(t.get("target") or "all", "l"), _cell(load, "l")])
        limit = t.get("limit", "")
        rows[-1] += [_cell(shown), _cell(fmt_num(x) if (x := _num(limit)) is not None else limit), verdict]
    return _table(["threshold", "target", "load", "value", "limit", "result"], rows, left=3) if rows else None


def _accuracy_table(runs: Sequence[Doc]) -> str | None:
    """Accuracy fields as given (scalars shown, nested values as compact JSON): the suite owns their meaning."""
    acc = [(r, r["accuracy"]) for r in runs if isinstance(r.get("accuracy"), Mapping)]
    keys = list(dict.fromkeys(k for _, a in acc for k in a))
    if not acc:
        return None

    def show(v: Any) -> str:
        if isinstance(v, float):
            return fmt_num(v)
        return "—" if v is None else str(v) if isinstance(v, str | int) else json.dumps(v, ensure_ascii=False)

    def interval(a: Mapping[str, Any]) -> str:
        right, total = a.get("right"), a.get("total")
        if not isinstance(right, int) or not isinstance(total, int) or total <= 0:
            return "—"
        lo, hi = wilson(right, total)
        return f"{100 * lo:.0f}–{100 * hi:.0f} % (n={total})"

    rows = [
        [_cell(_target(r), "l"), _cell(_load_label(r.get("load") or {}), "l")]
        + [_cell(show(a.get(k))) for k in keys]
        + [_cell(interval(a))]
        for r, a in acc
    ]
    return _table(["target", "load", *keys, "95% interval (Wilson)"], rows, left=2)


# -- page ----------------------------------------------------------------------------------------


def _section(title: str, body: str | None, empty: str) -> str:
    return f"<h2>{escape(title)}</h2>\n" + (body if body else f'<p class="empty">{escape(empty)}</p>')


def _charts(items: Sequence[str]) -> str:
    return '<div class="charts">\n' + "\n".join(items) + "\n</div>"


def _when(epoch: Any) -> str:
    """A readable UTC time (``2026-12-04 21:46:16 UTC``) for the document's Unix ``started_at``."""
    import datetime as dt

    try:
        return dt.datetime.fromtimestamp(float(epoch), dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?" if epoch is None else str(epoch)


def _header(doc: Doc, runs: Sequence[Doc]) -> str:
    cmd = " ".join(str(c) for c in doc.get("command") or [])
    meta = [
        f"tailgate {escape(str(doc.get('tailgate_version', '?')))}",
        f"started {escape(_when(doc.get('started_at')))}",
        f"{len(runs)} run(s), {len(_targets(runs))} target(s)",
    ]
    out = ["<h1>tailgate bench report</h1>", f'<p class="meta">{" · ".join(meta)}</p>']
    if cmd:
        out.append(f'<p class="meta"><code>{escape(cmd)}</code></p>')
    targets = {_target(r): r.get("target") or {} for r in runs}
    rows = [
        [_cell(n, "l"), _cell(t.get("base_url", ""), "l"), _cell(t.get("model", ""), "l")] for n, t in targets.items()
    ]
    if rows:
        out.append(_table(["target", "base URL", "model"], rows, left=3))
    notes = [str(n) for n in doc.get("notes") or []]
    if notes:
        out.append('<div class="notes"><ul>' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul></div>")
    return "\n".join(out)


def _chart_sections(runs: Sequence[Doc]) -> list[str]:
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


def render_html(doc: Doc) -> str:
    """The whole report for one ``results.json`` document, as a self-contained HTML page."""
    runs = [r for r in doc.get("runs") or [] if isinstance(r, Mapping)]
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
            _decay_table(doc.get("decay") or []),
            "no decay table: the sweep has no concurrency 1",
        ),
        _section("Thresholds", _thresholds_table(doc.get("thresholds") or []), "no thresholds given"),
        _section("Accuracy", _accuracy_table(runs), "accuracy suite not run"),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{REPORT_CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
