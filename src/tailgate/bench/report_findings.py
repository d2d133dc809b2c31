"""The HTML report's sections for what a search found: capacity curves and answers, rate limits.

Same rules as :mod:`tailgate.bench.report`: inline SVG only, every string from the document escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from tailgate.bench._svg import PALETTE, Line, fmt_num, line_chart

Doc = Mapping[str, Any]


def _v(x: Any, digits: int = 1) -> str:
    if x is None:
        return "—"
    return fmt_num(round(float(x), digits))


def _td(v: Any, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<td{attr}>{escape(str(v))}</td>"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    ths = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "\n".join(f"<tr>{''.join(r)}</tr>" for r in rows)
    return f"<table><thead><tr>{ths}</tr></thead><tbody>\n{body}\n</tbody></table>"


def _capacity_one(cap: Doc) -> str:
    curve = [p for p in cap.get("curve") or [] if isinstance(p, Mapping)]
    unit = "concurrency" if cap.get("by") == "concurrency" else "req/s offered"
    pts = [(float(p["level"]), p) for p in curve]
    latency = [
        Line(f"{label}", [(x, p.get(key)) for x, p in pts], PALETTE[i % len(PALETTE)], dash)
        for i, (label, key, dash) in enumerate(
            [
                ("TTFT P90", "ttft_ms_p90", ""),
                ("TTFT P99", "ttft_ms_p99", "2 3"),
                ("E2E P90", "e2e_ms_p90", ""),
                ("E2E P99", "e2e_ms_p99", "2 3"),
            ]
        )
    ]
    rates = [
        Line("req/s", [(x, p.get("req_per_s")) for x, p in pts], PALETTE[0]),
        Line("goodput/s", [(x, p.get("goodput_req_per_s")) for x, p in pts], PALETTE[2], "6 3"),
    ]
    if any(p.get("completed_per_s") is not None for _, p in pts):
        rates.append(Line("finished/s", [(x, p.get("completed_per_s")) for x, p in pts], PALETTE[3], "2 3"))
    charts = [
        line_chart(
            "capacity-latency", f"{cap.get('target')}: latency along the search", latency, x_label=unit, y_label="ms"
        ),
        line_chart(
            "capacity-rate", f"{cap.get('target')}: throughput and goodput", rates, x_label=unit, y_label="req/s"
        ),
    ]
    rows = [
        [
            _td(_v(p["level"], 3)),
            _td("pass" if p.get("passed") else "FAIL", "pass" if p.get("passed") else "fail"),
            _td(p.get("repeats")),
            _td(_v(p.get("req_per_s"))),
            _td(_v(p.get("completed_per_s"))),
            _td(_v(p.get("goodput_req_per_s"))),
            _td(_v(p.get("ttft_ms_p90"), 0)),
            _td(_v(p.get("ttft_ms_p99"), 0)),
            _td(_v(p.get("e2e_ms_p90"), 0)),
            _td(_v(p.get("e2e_ms_p99"), 0)),
            _td(_v(None if p.get("error_rate") is None else 100 * float(p["error_rate"]), 2) + " %"),
            _td(p.get("rate_limited", 0)),
        ]
        for _, p in pts
    ]
    d = cap.get("decay_at_answer") or {}
    facts = [
        f"<b>{escape(str(cap.get('summary', '')))}</b>",
        f"knee of {escape(str(cap.get('knee_metric', '')))}: {escape(_v(cap.get('knee'), 3))}",
        "decay at the answer vs level "
        + escape(
            f"{_v(d.get('base_level'), 3)}: P99 E2E ×{_v(d.get('p99_e2e_ratio'), 2)}, "
            f"P99 TTFT ×{_v(d.get('p99_ttft_ratio'), 2)}, mean tok/s ×{_v(d.get('mean_tok_s_ratio'), 2)}"
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


def capacity_section(doc: Doc) -> str | None:
    """Per searched target: the answer with its bracket, the knee, the decay, the curve walked (charts, table)."""
    caps = [c for c in doc.get("capacity") or [] if isinstance(c, Mapping)]
    if not caps:
        return None
    return "\n".join(_capacity_one(c) for c in caps)


def rate_limit_section(doc: Doc) -> str | None:
    """Rate-limit flags (runs that met 429s) and ``--find-limit`` results."""
    flags = [f for f in doc.get("rate_limits") or [] if isinstance(f, Mapping)]
    limits = [x for x in doc.get("limits") or [] if isinstance(x, Mapping)]
    if not flags and not limits:
        return None
    out = []
    for f in flags:
        out.append(f'<div class="notes"><b>{escape(str(f.get("target")))}: {escape(str(f.get("flag")))}</b></div>')
    rows = [
        [
            _td(f.get("target"), "l"),
            _td(_v(f.get("per_s"))),
            _td(_v(f.get("rpm"), 0)),
            _td(_v(f.get("limit_requests_header"), 0)),
            _td(_v(f.get("tpm_header"), 0)),
            _td(_v(f.get("retry_after_s_max"), 2)),
            _td(f"{f.get('refused')} / {f.get('requests')}"),
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
        out.append(f"<p>--find-limit: {escape(str(lim.get('summary')))}</p>")
    return "\n".join(out)
