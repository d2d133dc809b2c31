"""Time series and hour-of-day views of the store, for the dashboard (docs/dashboard.md).

Two sources, never mixed:

- **probe**: the monitor's ``samples`` rows (one row per probe), with the leaderboard's rules
  (``tailgate.ledger.leaderboard``): TTFT percentiles over every successful probe; E2E percentiles and tok/s
  (mean of the rows' ``tok_s``) over successful ``long`` probes, the one workload whose requests are alike
  (a ``workload`` argument uses that workload for all three instead); error rate = failed / all probes.
  Percentiles are exact nearest rank.
- **traffic**: the gateway's ``traffic_minutes`` aggregates (several rows per minute may exist: one per
  worker or flush; they are merged). Percentiles come from the merged ``ttft_hist`` / ``e2e_hist``; the
  error rate is ``errors / requests``; tok/s is ``tok_s_sum / tok_s_n``.

Traffic percentiles come from ``tailgate.stats.LatencyHistogram`` (nearest rank, within 1/4096 relative of
exact), so a probe P90 and a traffic P90 mean the same thing.

Every function takes an open connection and an explicit ``now`` (wall-clock Unix seconds) so tests can
pin time; none writes. A database without the monitor's tables (schema version 1) reads as empty.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tailgate.ledger.leaderboard import THROUGHPUT_WORKLOAD, nearest_rank
from tailgate.ledger.samples import Sample, TrafficMinute, read_samples, read_traffic
from tailgate.ledger.store import Queryable, has_table
from tailgate.stats import LatencyHistogram

__all__ = [
    "POINT_KEYS",
    "WINDOWS",
    "catalog",
    "compare",
    "heatmap",
    "parse_window",
    "series",
]

WINDOWS: dict[str, tuple[float, float]] = {
    "15m": (900.0, 10.0),
    "1h": (3600.0, 60.0),
    "24h": (86400.0, 900.0),
    "7d": (7 * 86400.0, 3600.0),
}
"""The dashboard's chart windows: name → (length, bucket width) in seconds: 90, 60, 96 and 168 buckets.

A bucket narrower than ``traffic_minutes``' minute (``15m``: 10 s, so a fresh gateway draws a line after
20 s) takes its traffic from the raw ``requests`` ledger instead (``_read_requests``)."""

_IGNORED_OUTCOMES = ("client_closed",)
"""Outcomes the gateway's traffic recorder does not count (``tailgate.gateway.metrics.traffic_minutes``); nor do we."""

WORKLOADS = ("short", "long", "accuracy")
PCTS = (50, 90, 99)
POINT_KEYS = (
    "count",
    "errors",
    "error_rate",
    *(f"{m}_p{q}" for m in ("ttft", "e2e") for q in PCTS),
    "tok_s",
)
"""The numbers of one bucket / cell / row: ``count`` is probes or requests, latencies are milliseconds."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_WINDOW_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_window(text: str) -> float:
    """``"7d"`` → 604800.0; also ``s``, ``m``, ``h``, ``w`` suffixes and plain seconds. Raises ``ValueError``."""
    match = _WINDOW_RE.match(text)
    if match is not None:
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        try:
            seconds = float(text)
        except ValueError:
            raise ValueError(f"window must look like 1h, 24h or 7d, got {text!r}") from None
    if math.isnan(seconds) or not 0.0 < seconds <= 366 * 86400.0:
        raise ValueError(f"window must be between 1 s and a year, got {text!r}")
    return seconds


def _check_workload(workload: str | None) -> None:
    if workload is not None and workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, got {workload!r}")


def _has_table(conn: Queryable, name: str) -> bool:
    return has_table(conn, name)


def _hist(text: str | None) -> LatencyHistogram | None:
    """A stored histogram column, or None when empty or unreadable (a damaged row must not break a view)."""
    if not text:
        return None
    try:
        return LatencyHistogram.from_dict(json.loads(text))
    except (ValueError, TypeError):
        return None


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


@dataclass
class _Acc:
    """What one bucket, heatmap cell or comparison row gathers from one source."""

    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    ttft_hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    e2e_hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    count: int = 0
    errors: int = 0
    tok_s_sum: float = 0.0
    tok_s_n: int = 0

    def add_sample(self, s: Sample, workload: str | None) -> None:
        self.count += 1
        if s.error_class is not None:
            self.errors += 1
            return
        if s.ttft_ms is not None:
            self.ttft.append(s.ttft_ms)
        if s.workload != (workload or THROUGHPUT_WORKLOAD):
            return
        if s.e2e_ms is not None:
            self.e2e.append(s.e2e_ms)
        if s.tok_s is not None:
            self.tok_s_sum += s.tok_s
            self.tok_s_n += 1

    def add_traffic(self, t: TrafficMinute) -> None:
        self.count += t.requests
        self.errors += t.errors
        self.tok_s_sum += t.tok_s_sum
        self.tok_s_n += t.tok_s_n
        for text, target in ((t.ttft_hist, self.ttft_hist), (t.e2e_hist, self.e2e_hist)):
            h = _hist(text)
            if h is not None and h.unit == target.unit:
                target.merge(h)

    def add_request(self, r: _Request) -> None:
        """One ``requests`` row, by the rules the gateway's ``TrafficRecorder.observe`` applies to a minute:
        latencies and tok/s from successful requests only, TTFT and tok/s from streamed ones only."""
        outcome, stream, output_tokens, ttft_ms, e2e_ms = r.outcome, r.stream, r.output_tokens, r.ttft_ms, r.e2e_ms
        self.count += 1
        if outcome != "ok":
            self.errors += 1
            return
        if stream and ttft_ms is not None:
            self.ttft.append(max(ttft_ms, 0.0))
        if e2e_ms is not None:
            self.e2e.append(max(e2e_ms, 0.0))
            if stream and ttft_ms is not None and output_tokens is not None and output_tokens > 1 and e2e_ms > ttft_ms:
                self.tok_s_sum += (output_tokens - 1) * 1000.0 / (e2e_ms - ttft_ms)
                self.tok_s_n += 1

    def percentile(self, metric: str, q: int) -> float | None:
        values: list[float] = self.ttft if metric == "ttft" else self.e2e
        if values:
            return _r(nearest_rank(values, q))
        hist = self.ttft_hist if metric == "ttft" else self.e2e_hist
        return _r(hist.percentile(q)) if hist.count else None

    def point(self) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {
            "count": self.count,
            "errors": self.errors,
            "error_rate": round(self.errors / self.count, 4) if self.count else None,
        }
        for metric in ("ttft", "e2e"):
            for q in PCTS:
                out[f"{metric}_p{q}"] = self.percentile(metric, q)
        out["tok_s"] = _r(self.tok_s_sum / self.tok_s_n) if self.tok_s_n else None
        return out


def _read(
    conn: Queryable,
    *,
    since: float,
    until: float,
    provider: str | None = None,
    model: str | None = None,
    workload: str | None = None,
) -> tuple[list[Sample], list[TrafficMinute]]:
    """Probe samples and traffic rows with ``since <= time <= until`` (empty without the monitor's tables)."""
    samples: list[Sample] = []
    traffic: list[TrafficMinute] = []
    if _has_table(conn, "samples"):
        samples = read_samples(conn, since=since, until=until, provider=provider, model=model)
        if workload is not None:
            samples = [s for s in samples if s.workload == workload]
    if _has_table(conn, "traffic_minutes"):
        traffic = read_traffic(conn, since=since, until=until, provider=provider, model=model)
    return samples, traffic


RAW_TRAFFIC_S = 900.0
"""Windows up to this long (``15m``) take their traffic from the ``requests`` ledger rather than from
``traffic_minutes``: the recorder writes a minute only once it has ended, so a fresh gateway's first minute
would show no traffic at all, and a minute cannot be split into 10 s buckets."""


@dataclass(frozen=True)
class _Request:
    """One ``requests`` row, the columns a traffic bucket needs."""

    ts: float
    provider: str
    model: str
    outcome: str
    stream: bool
    output_tokens: int | None
    ttft_ms: float | None
    e2e_ms: float | None


def _read_requests(
    conn: Queryable, *, since: float, until: float, provider: str | None = None, model: str | None = None
) -> list[_Request]:
    """The gateway's ``requests`` rows with ``since <= ts < until`` that tried a provider (``upstream_model``
    set), less the outcomes the traffic recorder ignores."""
    if not _has_table(conn, "requests"):
        return []
    rows = conn.execute(
        "SELECT ts, provider, upstream_model, outcome, stream, output_tokens, ttft_ms, e2e_ms FROM requests "
        "WHERE ts >= ? AND ts < ? AND provider IS NOT NULL AND upstream_model IS NOT NULL "
        "AND (? IS NULL OR provider = ?) AND (? IS NULL OR upstream_model = ?)",
        (since, until, provider, provider, model, model),
    ).fetchall()
    return [
        _Request(float(ts), str(p), str(m), str(outcome), bool(stream), out, ttft, e2e)
        for ts, p, m, outcome, stream, out, ttft, e2e in rows
        if outcome not in _IGNORED_OUTCOMES
    ]


def _columns(accs: Iterable[_Acc]) -> dict[str, list[Any]]:
    points = [a.point() for a in accs]
    return {key: [p[key] for p in points] for key in POINT_KEYS}


def series(
    conn: Queryable,
    *,
    provider: str,
    model: str | None = None,
    window: str = "1h",
    now: float,
    workload: str | None = None,
) -> dict[str, Any]:
    """Per-bucket P50/P90/P99 TTFT and E2E, tok/s and error rate of one provider, probe and traffic apart.

    ``window`` is a key of ``WINDOWS``. Buckets are aligned to multiples of their width (UTC); the last one
    holds ``now``. ``t`` lists each bucket's start and every column in ``probe`` / ``traffic`` is aligned with
    it (a uPlot data table); a bucket without data has ``count`` 0 and ``None`` elsewhere. ``model`` None
    pools every model of the provider.
    """
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
    _check_workload(workload)
    length, width = WINDOWS[window]
    n = round(length / width)
    first = math.floor(now / width) * width - (n - 1) * width
    end = first + n * width
    probe = [_Acc() for _ in range(n)]
    traffic = [_Acc() for _ in range(n)]
    samples, minutes = _read(conn, since=first, until=end, provider=provider, model=model, workload=workload)
    for s in samples:
        if s.ts < end:
            probe[int((s.ts - first) // width)].add_sample(s, workload)
    if width < 60.0:
        # A traffic minute cannot be split: bucket the ledger's own rows (the same counting rules).
        for r in _read_requests(conn, since=first, until=end, provider=provider, model=model):
            traffic[int((r.ts - first) // width)].add_request(r)
    else:
        for t in minutes:
            if t.minute < end:
                traffic[int((t.minute - first) // width)].add_traffic(t)
    return {
        "provider": provider,
        "model": model,
        "workload": workload,
        "window": window,
        "window_s": length,
        "bucket_s": width,
        "now": now,
        "t": [first + i * width for i in range(n)],
        "probe": _columns(probe),
        "traffic": _columns(traffic),
    }


def heatmap(
    conn: Queryable,
    *,
    window_s: float,
    now: float,
    model: str | None = None,
    tz_offset_min: int = 0,
    workload: str | None = None,
) -> dict[str, Any]:
    """P90 E2E by hour of day × provider over ``[now - window_s, now]``, probe and traffic apart.

    Hours are UTC shifted by ``tz_offset_min`` minutes (the page sends the browser's offset, so 11:00 is the
    user's 11:00). ``probe`` / ``traffic`` map provider → 24 values (``None``: no data), ``probe_n`` /
    ``traffic_n`` the E2E values behind each cell (successful probes, or successful requests). A provider
    appears once it has one such value.
    """
    _check_workload(workload)
    shift = tz_offset_min * 60.0
    cells: dict[str, dict[str, list[_Acc]]] = {"probe": {}, "traffic": {}}

    def cell(source: str, provider: str, ts: float) -> _Acc:
        row = cells[source].get(provider)
        if row is None:
            row = cells[source][provider] = [_Acc() for _ in range(24)]
        return row[int(((ts + shift) % 86400.0) // 3600.0)]

    # Only E2E is shown, so read just that (a week of a busy store is ~10^5 rows: no dataclass per row).
    span = (now - window_s, now, model, model)
    if _has_table(conn, "samples"):
        rows = conn.execute(
            "SELECT ts, provider, e2e_ms FROM samples WHERE ts >= ? AND ts <= ? AND (? IS NULL OR model = ?) "
            "AND error_class IS NULL AND workload = ? AND e2e_ms IS NOT NULL",
            (*span, workload or THROUGHPUT_WORKLOAD),
        )
        for ts, provider, e2e in rows:
            cell("probe", provider, ts).e2e.append(e2e)
    if _has_table(conn, "traffic_minutes"):
        rows = conn.execute(
            "SELECT minute, provider, e2e_hist FROM traffic_minutes "
            "WHERE minute >= ? AND minute <= ? AND (? IS NULL OR model = ?)",
            span,
        )
        for minute, provider, text in rows:
            target = cell("traffic", provider, minute).e2e_hist
            h = _hist(text)
            if h is not None and h.unit == target.unit:
                target.merge(h)
    out: dict[str, Any] = {
        "window_s": window_s,
        "now": now,
        "model": model,
        "workload": workload,
        "tz_offset_min": tz_offset_min,
        "hours": list(range(24)),
        "providers": sorted(set(cells["probe"]) | set(cells["traffic"])),
    }
    for source, by_provider in cells.items():
        ordered = sorted(by_provider.items())
        out[source] = {p: [a.percentile("e2e", 90) for a in accs] for p, accs in ordered}
        out[f"{source}_n"] = {p: [len(a.e2e) + a.e2e_hist.count for a in accs] for p, accs in ordered}
    return out


def compare(
    conn: Queryable,
    *,
    window_s: float,
    now: float,
    model: str | None = None,
    workload: str | None = None,
) -> dict[str, Any]:
    """Probe and traffic numbers of each provider × model over ``[now - window_s, now]``, side by side.

    ``rows``: ``provider``, ``model``, and ``probe`` / ``traffic`` objects with the ``POINT_KEYS``.
    """
    _check_workload(workload)
    probe: dict[tuple[str, str], _Acc] = {}
    traffic: dict[tuple[str, str], _Acc] = {}
    samples, minutes = _read(conn, since=now - window_s, until=now, model=model, workload=workload)
    for s in samples:
        probe.setdefault((s.provider, s.model), _Acc()).add_sample(s, workload)
    if window_s <= RAW_TRAFFIC_S:
        for r in _read_requests(conn, since=now - window_s, until=now, model=model):
            traffic.setdefault((r.provider, r.model), _Acc()).add_request(r)
    else:
        for t in minutes:
            traffic.setdefault((t.provider, t.model), _Acc()).add_traffic(t)
    return {
        "window_s": window_s,
        "now": now,
        "model": model,
        "workload": workload,
        "rows": [
            {
                "provider": p,
                "model": m,
                "probe": probe.get((p, m), _Acc()).point(),
                "traffic": traffic.get((p, m), _Acc()).point(),
            }
            for p, m in sorted(set(probe) | set(traffic))
        ],
    }


def catalog(conn: Queryable, *, window_s: float, now: float) -> dict[str, Any]:
    """The provider × model pairs with data in ``[now - window_s, now]``: probe samples and traffic requests."""
    pairs: dict[tuple[str, str], dict[str, int]] = {}
    since = now - window_s
    if _has_table(conn, "samples"):
        for provider, model, n in conn.execute(
            "SELECT provider, model, COUNT(*) FROM samples WHERE ts >= ? AND ts <= ? GROUP BY provider, model",
            (since, now),
        ):
            pairs.setdefault((provider, model), {"samples": 0, "requests": 0})["samples"] = int(n)
    if window_s <= RAW_TRAFFIC_S:
        for r in _read_requests(conn, since=since, until=now):
            pairs.setdefault((r.provider, r.model), {"samples": 0, "requests": 0})["requests"] += 1
    elif _has_table(conn, "traffic_minutes"):
        for provider, model, n in conn.execute(
            "SELECT provider, model, SUM(requests) FROM traffic_minutes WHERE minute >= ? AND minute <= ? "
            "GROUP BY provider, model",
            (since, now),
        ):
            pairs.setdefault((provider, model), {"samples": 0, "requests": 0})["requests"] = int(n or 0)
    return {
        "window_s": window_s,
        "now": now,
        "pairs": [{"provider": p, "model": m, **counts} for (p, m), counts in sorted(pairs.items())],
    }
