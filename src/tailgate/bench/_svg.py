"""Inline SVG charts drawn as plain strings: axes, ticks, legend, lines and bars.

The report must open offline and forever, so there is no chart library and no JavaScript: each chart
is a static ``<svg class="chart" data-chart=KIND>`` whose data are ``<path>`` (lines) or ``<rect>`` (bars)
elements, each with a ``<title>`` so a browser shows the value on hover. Every text is escaped here;
callers pass raw strings (target names come from the command line and error text from the network).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["PALETTE", "REPORT_CSS", "Bars", "Line", "bar_chart", "fmt_num", "line_chart", "nice_ticks"]

# Tableau-10: distinguishable, and readable by most colour-blind viewers.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7")

#: The stylesheet of the offline HTML reports (bench and scenario share it: one look, one copy).
REPORT_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:13px}.meta code{background:#f4f4f4;padding:1px 4px}
.notes{background:#fff8e1;border-left:4px solid #f2b400;padding:6px 12px;margin:10px 0}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#f4f6f8}td.l,th.l{text-align:left}td.ex{white-space:normal;max-width:560px;text-align:left}
.pass{color:#1b7d2f;font-weight:600}.fail{color:#c62828;font-weight:600}
.charts{display:flex;flex-wrap:wrap;gap:12px}
.empty{color:#777;font-style:italic}.scroll{overflow-x:auto}
svg.chart{background:#fff;border:1px solid #e4e4e4}
svg.chart text{font-size:11px;fill:#333}svg.chart text.title{font-size:13px;font-weight:600}
svg.chart .axes line,svg.chart line.axes{stroke:#555}svg.chart .grid{stroke:#eee}
"""

_W, _H = 440, 250  # default box of axes and plot, before the legend column
_LEFT, _RIGHT, _TOP, _BOTTOM = 58, 12, 30, 42
_LEGEND_W, _LEGEND_ROW = 170, 16


@dataclass(frozen=True)
class Line:
    """One data line; a ``None`` y leaves a gap (a run with no successful request)."""

    label: str
    points: Sequence[tuple[float, float | None]]
    color: str
    dash: str = ""


@dataclass(frozen=True)
class Bars:
    """One bar per group for this series (a target); ``None`` draws no bar."""

    label: str
    values: Sequence[float | None]
    color: str


def fmt_num(v: float) -> str:
    """Short human number: 1,234 / 12.5 / 0.123."""
    if v != v or math.isinf(v):
        return str(v)
    a = abs(v)
    if a >= 1000 or v == int(v):
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values (1, 2, 5 × 10^k steps) covering ``[lo, hi]``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step + 1e-9) * step
    count = math.ceil((hi - first) / step - 1e-9)
    return [round(first + i * step, 12) for i in range(count + 1)]


@dataclass(frozen=True)
class _Frame:
    """Maps data coordinates into the plot rectangle."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    width: int
    height: int
    legend_w: int = _LEGEND_W

    def x(self, v: float) -> float:
        return _LEFT + (v - self.x_lo) / ((self.x_hi - self.x_lo) or 1.0) * (self.width - _LEFT - _RIGHT)

    def y(self, v: float) -> float:
        bottom = self.height - _BOTTOM
        return bottom - (v - self.y_lo) / ((self.y_hi - self.y_lo) or 1.0) * (bottom - _TOP)


def _open(kind: str, title: str, n_legend: int, plot_w: int, legend_w: int) -> tuple[list[str], int]:
    height = max(_H, _TOP + _LEGEND_ROW * n_legend + 10)
    width = plot_w + legend_w
    parts = [
        f'<svg class="chart" data-chart="{escape(kind)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<text class="title" x="{_LEFT}" y="18">{escape(title)}</text>',
    ]
    return parts, height


def _axes(
    f: _Frame, x_ticks: Sequence[tuple[float, str]], y_ticks: Sequence[float], x_label: str, y_label: str
) -> list[str]:
    bottom, right = f.height - _BOTTOM, f.width - _RIGHT
    out = [f'<g class="axes"><line x1="{_LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}"/>']
    out.append(f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}"/></g>')
    for v in y_ticks:
        y = f.y(v)
        out.append(f'<line class="grid" x1="{_LEFT}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{_LEFT - 5}" y="{y + 4:.1f}" text-anchor="end">{fmt_num(v)}</text>')
    for v, text in x_ticks:
        x = f.x(v)
        out.append(f'<line class="axes" x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{escape(text)}</text>')
    mid_x, mid_y = (_LEFT + right) / 2, (_TOP + bottom) / 2
    out.append(f'<text class="label" x="{mid_x:.0f}" y="{f.height - 6}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text class="label" x="14" y="{mid_y:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {mid_y:.0f})">{escape(y_label)}</text>'
    )
    return out


def _legend(f: _Frame, entries: Sequence[tuple[str, str, str]], bar: bool = False) -> list[str]:
    out = ['<g class="legend">']
    x0 = f.width + 6
    for i, (label, color, dash) in enumerate(entries):
        y = _TOP + i * _LEGEND_ROW + 8
        if bar:
            out.append(f'<rect x="{x0}" y="{y - 6}" width="16" height="10" fill="{color}"/>')
        else:
            d = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<line x1="{x0}" y1="{y}" x2="{x0 + 18}" y2="{y}" stroke="{color}" stroke-width="2"{d}/>')
        fit = max(4, (f.legend_w - 32) // 6)  # ~6 px a character at 11 px: keep long names inside the svg
        shown = label if len(label) <= fit else label[: fit - 1] + "…"
        out.append(f'<text x="{x0 + 24}" y="{y + 4}">{escape(shown)}<title>{escape(label)}</title></text>')
    out.append("</g>")
    return out


def _segments(f: _Frame, points: Sequence[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    segs: list[list[tuple[float, float]]] = [[]]
    for x, y in points:
        if y is None:
            segs.append([])
        else:
            segs[-1].append((f.x(x), f.y(y)))
    return [s for s in segs if s]


def _line(f: _Frame, line: Line, markers: bool) -> list[str]:
    out: list[str] = []
    dash = f' stroke-dasharray="{line.dash}"' if line.dash else ""
    for seg in _segments(f, line.points):
        d = "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in seg)
        out.append(
            f'<path class="data" d="{d}" fill="none" stroke="{line.color}" stroke-width="2"{dash}>'
            f"<title>{escape(line.label)}</title></path>"
        )
        if markers:
            out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{line.color}"/>' for x, y in seg)
    return out


def line_chart(
    kind: str,
    title: str,
    lines: Sequence[Line],
    *,
    x_label: str,
    y_label: str,
    categories: Sequence[str] | None = None,
    y_max: float | None = None,
    width: int = _W,
    legend_width: int = _LEGEND_W,
) -> str:
    """Lines over a numeric x axis, or over ``categories`` (x = index) with point markers."""
    ys = [y for ln in lines for _, y in ln.points if y is not None]
    y_ticks = nice_ticks(0.0, y_max if y_max is not None else max(ys, default=1.0))
    if categories is not None:
        x_lo, x_hi = -0.5, len(categories) - 0.5
        x_ticks = [(float(i), c) for i, c in enumerate(categories)]
    else:
        xs = [x for ln in lines for x, _ in ln.points]
        ticks = nice_ticks(min(xs, default=0.0), max(xs, default=1.0))
        x_lo, x_hi = ticks[0], ticks[-1]
        x_ticks = [(t, fmt_num(t)) for t in ticks]
    parts, height = _open(kind, title, len(lines), width, legend_width)
    f = _Frame(x_lo, x_hi, y_ticks[0], y_ticks[-1], width, height, legend_width)
    parts += _axes(f, x_ticks, y_ticks, x_label, y_label)
    for ln in lines:
        parts += _line(f, ln, markers=categories is not None)
    parts += _legend(f, [(ln.label, ln.color, ln.dash) for ln in lines])
    parts.append("</svg>")
    return "\n".join(parts)


def bar_chart(kind: str, title: str, groups: Sequence[str], series: Sequence[Bars], *, y_label: str) -> str:
    """Grouped bars: one group per x category, one bar per series inside it."""
    ys = [v for s in series for v in s.values if v is not None]
    y_ticks = nice_ticks(0.0, max(ys, default=1.0))
    parts, height = _open(kind, title, len(series), _W, _LEGEND_W)
    f = _Frame(-0.5, len(groups) - 0.5, y_ticks[0], y_ticks[-1], _W, height)
    parts += _axes(f, [(float(i), g) for i, g in enumerate(groups)], y_ticks, "", y_label)
    slot = (f.x(1.0) - f.x(0.0)) * 0.8 / max(len(series), 1)
    for gi, group in enumerate(groups):
        x0 = f.x(gi) - slot * len(series) / 2
        for si, s in enumerate(series):
            v = s.values[gi] if gi < len(s.values) else None
            if v is None:
                continue
            top = f.y(v)
            parts.append(
                f'<rect class="data" x="{x0 + si * slot:.1f}" y="{top:.1f}" width="{slot * 0.92:.1f}" '
                f'height="{f.y(0.0) - top:.1f}" fill="{s.color}">'
                f"<title>{escape(f'{s.label} @ {group}: {fmt_num(v)}')}</title></rect>"
            )
    parts += _legend(f, [(s.label, s.color, "") for s in series], bar=True)
    parts.append("</svg>")
    return "\n".join(parts)
