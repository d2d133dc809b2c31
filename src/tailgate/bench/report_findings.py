"""The HTML report's sections for what a search found: capacity curves and answers, rate limits.

Same rules as :mod:`tailgate.bench.report`: inline SVG only, every string from the document escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from tailgate.bench._svg import PALETTE, Line, fmt_num, line_chart
from tailgate.bench.schema import BenchDocument, Capacity, UnsetType


def _v(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "—"
    return fmt_num(round(float(x), digits))


def _td(v: str | int | None, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{escape(str(v))}</td>"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    ths = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "\n".join(f"<tr>{''.join(r)}</tr>" for r in rows)
    return f"<table><thead><tr>{ths}</tr></thead><tbody>\n{body}\n</tbody></table>"


def _capacity_one(cap: Capacity) -> str:
    unit = "concurrency" if cap.by == "concurrency" else "req/s offered"
    pts = [(float(p.level), p) for p in cap.curve]
    latency = [
        Line(f"{label}", [(x, p.latency(metric, stat)) for x, p in pts], PALETTE[i % len(PALETTE)], dash)
        for i, (label, metric, stat, dash) in enumerate(
            [
                ("TTFT P90", "ttft_ms", "p90", ""),
                ("TTFT P99", "ttft_ms", "p99", "2 3"),
                ("E2E P90", "e2e_ms", "p90", ""),
                ("E2E P99", "e2e_ms", "p99", "2 3"),
            ]
        )
    ]
    rates = [
        Line("req/s", [(x, p.req_per_s) for x, p in pts], PALETTE[0]),
        Line("goodput/s", [(x, p.goodput_req_per_s) for x, p in pts], PALETTE[2], "6 3"),
    ]
    if any(p.completed_per_s is not None for _, p in pts):
        rates.append(Line("finished/s", [(x, p.completed_per_s) for x, p in pts], PALETTE[3], "2 3"))
    charts = [
        line_chart("capacity-latency", f"{cap.target}: latency along the search", latency, x_label=unit, y_label="ms"),
        line_chart("capacity-rate", f"{cap.target}: throughput and goodput", rates, x_label=unit, y_label="req/s"),
    ]
    rows = [
        [
            _td(_v(p.level, 3)),
            _td("pass" if p.passed else "FAIL", "pass" if p.passed else "fail"),
            _td(p.repeats),
            _td(_v(p.req_per_s)),
            _td(_v(p.completed_per_s)),
            _td(_v(p.goodput_req_per_s)),
            _td(_v(p.ttft_ms_p90, 0)),
            _td(_v(p.ttft_ms_p99, 0)),
            _td(_v(p.e2e_ms_p90, 0)),
            _td(_v(p.e2e_ms_p99, 0)),
            _td(_v(None if p.error_rate is None else 100 * p.error_rate, 2) + " %"),
            _td(p.rate_limited),
        ]
        for _, p in pts
    ]
    d = cap.decay_at_answer
    facts = [
        f"<b>{escape(cap.summary)}</b>",
        f"knee of {escape(cap.knee_metric)}: {escape(_v(cap.knee, 3))}",
        "decay at the answer vs level "
        + escape(
            f"{_v(None if d is None else d.base_level, 3)}: "
            f"P99 E2E ×{_v(None if d is None else d.p99_e2e_ratio, 2)}, "
            f"P99 TTFT ×{_v(None if d is None else d.p99_ttft_ratio, 2)}, "
            f"mean tok/s ×{_v(None if d is None else d.mean_tok_s_ratio, 2)}"
        ),
    ]
    head = ["level", "verdict", "runs", "req/s", "finished/s", "goodput/s", "TTFT P90", "TTFT P99", "E2E P90"]
    head.append("E2E P99")
    return (
        "<p>"
        + "<br>".join(facts)
        + "</p>\n"
        + '<div class="charts">\n'
        + "\n".join(charts)
        + "\n</div>\n"
        + _table([*head, "errors", "429s"], rows)
    )


def capacity_section(doc: BenchDocument) -> str | None:
    """Per searched target: the answer with its bracket, the knee, the decay, the curve walked (charts, table)."""
    caps = [] if isinstance(doc.capacity, UnsetType) else doc.capacity
    if not caps:
        return None
    return "\n".join(_capacity_one(c) for c in caps)


def rate_limit_section(doc: BenchDocument) -> str | None:
    """Rate-limit flags (runs that met 429s) and ``--find-limit`` results."""
    flags = [] if isinstance(doc.rate_limits, UnsetType) else doc.rate_limits
    limits = [] if isinstance(doc.limits, UnsetType) else doc.limits
    if not flags and not limits:
        return None
    out = []
    for f in flags:
        out.append(f'<div class="notes"><b>{escape(f.target)}: {escape(f.flag)}</b></div>')
    rows = [
        [
            _td(f.target, "l"),
            _td(_v(f.per_s)),
            _td(_v(f.rpm, 0)),
            _td(_v(f.limit_requests_header, 0)),
            _td(_v(f.tpm_header, 0)),
            _td(_v(f.retry_after_s_max, 2)),
            _td(f"{f.refused} / {f.requests}"),
        ]
        for f in flags
    ]
    if rows:
        out.append(
            _table(
                [
                    "target",
                    "admitted req/s",
                    "RPM",
                    "x-ratelimit-limit-requests",
                    "…-limit-tokens",
                    "max Retry-After s",
                    "refused / requests",
                ],
                rows,
            )
            + "<p>Latency percentiles elsewhere in this report are of admitted requests only; each run's "
            "<code>rate_limit.refused_ms</code> holds the refused ones.</p>"
        )
    for lim in limits:
        out.append(f"<p>--find-limit: {escape(lim.summary)}</p>")
    return "\n".join(out)
