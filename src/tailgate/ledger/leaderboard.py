"""The leaderboard: per provider × model numbers over a window, from probe samples and traffic minutes.

Pure computation (``build``) over rows read from the store (``compute`` reads them). Every column is
defined in docs/monitor.md; in short, over the window ``[now - window_s, now]``:

* throughput (``tok_s_*``, ``snapshot_tok_s``, ``peak_trough``) from successful ``long`` probes, the
  workload with ~200 output tokens (a short chat's handful of tokens makes a noisy rate). ``tok_s_avg``
  is the mean of the per-request tok/s; ``tok_s_min``/``tok_s_max`` are the lowest/highest mean of a
  time bucket (``window_s / 168``, at least 60 s: one hour for 7 days) so that one slow request is not
  "the 7-day minimum"; ``peak_trough`` = max / min.
* TTFT percentiles from every successful probe; E2E percentiles from successful ``long`` probes (the
  same request everywhere, so providers compare). Percentiles are exact nearest-rank over the samples.
* reliability = successes / attempts over every probe; accuracy = right / graded accuracy tasks.
* ``traffic_*``: the gateway's passive numbers, merged from ``traffic_minutes`` (histogram percentiles:
  within 1/4096 relative of exact, see tailgate.stats). ``traffic_cache_hit_pct`` is the provider's (not
  the model's) observed prompt-cache hit rate: 100 × cached ÷ prompt tokens of the gateway's requests whose
  answer said how many were cached, from the ledger's hourly roll-ups (whole hours) and the rows not rolled
  up yet; None when no request reported it.

Too few samples for a number to mean anything gives ``None`` and an entry in ``insufficient``
(``{"ttft_p99_ms": "n<20"}``) instead of a misleading value; the minimums are in :data:`MINIMUMS`.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypedDict

from tailgate.ledger.quality import read_rates
from tailgate.ledger.samples import Sample, TrafficMinute, read_samples
from tailgate.ledger.store import Queryable, dialect_of
from tailgate.ledger.traffic_hours import read_window
from tailgate.stats import LatencyHistogram
from tailgate.stats.shown import MINIMUMS as _MINIMUMS
from tailgate.stats.shown import wilson

__all__ = [
    "MINIMUMS",
    "SORTS",
    "LeaderRow",
    "Prior",
    "ProviderInfo",
    "bucket_seconds",
    "build",
    "cache_hit_pct",
    "compute",
    "nearest_rank",
    "recent_priors",
]

MINIMUMS = _MINIMUMS
"""Smallest sample counts for a number to be shown (else None + an ``insufficient`` note ``n<K``);
the same for every face (``tailgate.stats.shown``)."""

THROUGHPUT_WORKLOAD = "long"
BUCKETS_PER_WINDOW = 168  # 7 days / 168 = one hour


def bucket_seconds(window_s: float) -> float:
    """Width of the time buckets behind tok/s min/max: ``window_s / 168``, at least 60 s."""
    return max(60.0, window_s / BUCKETS_PER_WINDOW)


def nearest_rank(values: list[float], q: float) -> float:
    """Exact nearest-rank percentile of ``values`` (sorted or not; non-empty), as tailgate.stats defines it."""
    return _ranked(sorted(values), q)


def _ranked(ordered: list[float], q: float) -> float:
    """``nearest_rank`` of values already sorted."""
    rank = max(1, math.ceil(q / 100.0 * len(ordered) * (1.0 - 1e-12)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """What the config says about a provider (price per million tokens, max output length)."""

    price_input: float | None = None
    price_output: float | None = None
    currency: str | None = None
    max_output_tokens: int | None = None
    price_cached_input: float | None = None
    """``price.cached_input``: a cached prompt token's price; None when unset (cached tokens cost ``input``)."""


@dataclass(frozen=True, slots=True)
class LeaderRow:
    """One provider × model × api on the leaderboard; ``to_dict()`` is the JSON form (same keys)."""

    provider: str
    model: str
    samples: int = 0
    """Probe samples in the window, every workload, successes and failures."""
    snapshot_tok_s: float | None = None
    snapshot_ts: float | None = None
    tok_s_avg: float | None = None
    tok_s_min: float | None = None
    tok_s_max: float | None = None
    peak_trough: float | None = None
    tok_s_n: int = 0
    tok_s_buckets: int = 0
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    ttft_n: int = 0
    ttft_answer_p50_ms: float | None = None
    """Time to the first answer token (not reasoning); equals TTFT for a model that does not think."""
    ttft_answer_p90_ms: float | None = None
    ttft_answer_p99_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p90_ms: float | None = None
    e2e_p99_ms: float | None = None
    e2e_n: int = 0
    reliability_pct: float | None = None
    attempts: int = 0
    accuracy_pct: float | None = None
    accuracy_n: int = 0
    accuracy_low_pct: float | None = None
    """The 95 % Wilson interval of ``accuracy_pct`` (None where the accuracy itself is withheld)."""
    accuracy_high_pct: float | None = None
    price_input: float | None = None
    price_output: float | None = None
    currency: str | None = None
    max_output_tokens: int | None = None
    price_cached_input: float | None = None
    traffic_requests: int = 0
    traffic_reliability_pct: float | None = None
    traffic_tok_s_avg: float | None = None
    traffic_ttft_p50_ms: float | None = None
    traffic_ttft_p90_ms: float | None = None
    traffic_ttft_p99_ms: float | None = None
    api: str = "openai"
    """The protocol the probes spoke: ``openai`` or ``anthropic`` (the provider's ``anthropic_base_url``); a
    provider probed both ways has two rows. The gateway's traffic columns are on the ``openai`` row."""
    traffic_e2e_p50_ms: float | None = None
    traffic_e2e_p90_ms: float | None = None
    traffic_e2e_p99_ms: float | None = None
    traffic_cache_hit_pct: float | None = None
    """The provider's observed prompt-cache hit rate over the gateway's requests (cached ÷ prompt tokens, of
    those whose answer reported cached tokens); None when none did."""
    quality: dict[str, dict[str, float | int]] = field(default_factory=dict)
    """Answer-quality signals of the gateway's traffic in the window (``quality_counts``, on the ``openai``
    row): signal → ``checked``, ``hits``, ``pct`` and its 95 % Wilson interval ``low_pct`` / ``high_pct``."""
    insufficient: dict[str, str] = field(default_factory=dict)
    """Column → why it is None (``"n<20"``): too few samples for the number to mean anything."""

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["insufficient"] = dict(self.insufficient)
        out["quality"] = {k: dict(v) for k, v in self.quality.items()}
        return out


SORTS: dict[str, tuple[str, bool]] = {
    "p90": ("ttft_p90_ms", False),
    "p50": ("ttft_p50_ms", False),
    "p99": ("ttft_p99_ms", False),
    "answer_p90": ("ttft_answer_p90_ms", False),
    "e2e_p90": ("e2e_p90_ms", False),
    "e2e_p99": ("e2e_p99_ms", False),
    "tok_s": ("tok_s_avg", True),
    "min_tok_s": ("tok_s_min", True),
    "snapshot": ("snapshot_tok_s", True),
    "reliability": ("reliability_pct", True),
    "accuracy": ("accuracy_pct", True),
    "price": ("price_output", False),
    "samples": ("samples", True),
    "traffic_p90": ("traffic_ttft_p90_ms", False),
}
"""``--sort`` names → (column, descending). Missing values always sort last; ties by provider, model."""


class _Cells:
    """Collects a row's numbers and its insufficient-sample notes."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.insufficient: dict[str, str] = {}

    def put(self, name: str, value: float | None, n: int, minimum: int) -> None:
        if n < minimum or value is None:
            self.values[name] = None
            if n < minimum:
                self.insufficient[name] = "n=0" if minimum == 1 else f"n<{minimum}"
        else:
            self.values[name] = value

    def accuracy(self, right: int, graded: int) -> None:
        """The accuracy, its 95 % Wilson interval and its task count (withheld below the rate minimum)."""
        self.values["accuracy_n"] = graded
        self.put("accuracy_pct", 100.0 * right / graded if graded else None, graded, MINIMUMS["rate"])
        if self.values["accuracy_pct"] is not None:
            low, high = wilson(right, graded)
            self.values["accuracy_low_pct"], self.values["accuracy_high_pct"] = 100.0 * low, 100.0 * high

    def percentiles(self, prefix: str, values: list[float]) -> None:
        n = len(values)
        ordered = sorted(values)  # once, not once per percentile
        for q in (50, 90, 99):
            minimum = MINIMUMS[f"p{q}"]
            self.put(f"{prefix}_p{q}_ms", _ranked(ordered, q) if n >= minimum else None, n, minimum)

    def histogram(self, prefix: str, hist: LatencyHistogram) -> None:
        n = hist.count
        for q in (50, 90, 99):
            minimum = MINIMUMS[f"p{q}"]
            self.put(f"{prefix}_p{q}_ms", hist.percentile(q) if n >= minimum else None, n, minimum)


def _probe_cells(cells: _Cells, samples: list[Sample], since: float, bucket_s: float) -> None:
    ok = [s for s in samples if s.ok]
    rated = [s for s in ok if s.workload == THROUGHPUT_WORKLOAD and s.tok_s is not None]
    cells.values["samples"] = len(samples)
    cells.values["attempts"] = len(samples)
    cells.put("reliability_pct", 100.0 * len(ok) / len(samples) if samples else None, len(samples), MINIMUMS["rate"])
    graded = [s for s in samples if s.accuracy_ok is not None]
    cells.accuracy(sum(1 for s in graded if s.accuracy_ok), len(graded))

    rates = [s.tok_s for s in rated if s.tok_s is not None]
    cells.values["tok_s_n"] = len(rates)
    if rated:
        latest = max(rated, key=lambda s: s.ts)  # samples come oldest first; max keeps the first of equal ts
        cells.values["snapshot_tok_s"], cells.values["snapshot_ts"] = latest.tok_s, latest.ts
    else:
        cells.put("snapshot_tok_s", None, 0, 1)
        cells.values["snapshot_ts"] = None
    cells.put("tok_s_avg", sum(rates) / len(rates) if rates else None, len(rates), MINIMUMS["tok_s"])
    buckets: dict[int, list[float]] = defaultdict(list)
    for s in rated:
        assert s.tok_s is not None
        buckets[int((s.ts - since) // bucket_s)].append(s.tok_s)
    means = [sum(v) / len(v) for v in buckets.values()]
    nb = len(means)
    cells.values["tok_s_buckets"] = nb
    lo, hi = (min(means), max(means)) if means else (None, None)
    cells.put("tok_s_min", lo, nb, MINIMUMS["buckets"])
    cells.put("tok_s_max", hi, nb, MINIMUMS["buckets"])
    ratio = hi / lo if lo is not None and hi is not None and lo > 0 else None
    cells.put("peak_trough", ratio, nb, MINIMUMS["buckets"])

    ttft = [s.ttft_ms for s in ok if s.ttft_ms is not None]
    e2e = [s.e2e_ms for s in ok if s.workload == THROUGHPUT_WORKLOAD and s.e2e_ms is not None]
    cells.values["ttft_n"], cells.values["e2e_n"] = len(ttft), len(e2e)
    cells.percentiles("ttft", ttft)
    cells.percentiles("ttft_answer", [s.ttft_answer_ms for s in ok if s.ttft_answer_ms is not None])
    cells.percentiles("e2e", e2e)


def _histogram(text: str | None) -> LatencyHistogram | None:
    if not text:
        return None
    try:
        return LatencyHistogram.from_dict(json.loads(text))
    except ValueError:  # a damaged row must not take the leaderboard down; it only loses its latencies
        return None


def _traffic_cells(cells: _Cells, rows: list[TrafficMinute]) -> None:
    requests = sum(r.requests for r in rows)
    errors = sum(r.errors for r in rows)
    n_rates = sum(r.tok_s_n for r in rows)
    cells.values["traffic_requests"] = requests
    reliability = 100.0 * (requests - errors) / requests if requests else None
    cells.put("traffic_reliability_pct", reliability, requests, MINIMUMS["rate"])
    avg = sum(r.tok_s_sum for r in rows) / n_rates if n_rates else None
    cells.put("traffic_tok_s_avg", avg, n_rates, MINIMUMS["tok_s"])
    ttft, e2e = LatencyHistogram(), LatencyHistogram()
    for r in rows:
        if (h := _histogram(r.ttft_hist)) is not None:
            ttft.merge(h)
        if (h := _histogram(r.e2e_hist)) is not None:
            e2e.merge(h)
    cells.histogram("traffic_ttft", ttft)
    cells.histogram("traffic_e2e", e2e)


def _sort_key(column: str, descending: bool) -> Any:
    def key(row: LeaderRow) -> tuple[int, float, str, str]:
        value = getattr(row, column)
        if value is None:
            return (1, 0.0, row.provider, row.model)
        return (0, -float(value) if descending else float(value), row.provider, row.model)

    return key


def build(
    samples: Iterable[Sample],
    traffic: Iterable[TrafficMinute] = (),
    *,
    window_s: float,
    now: float,
    sort: str = "p90",
    info: Mapping[str, ProviderInfo] | None = None,
    pairs: Iterable[tuple[str, str]] = (),
    probes: Mapping[tuple[str, str, str], _Cells] | None = None,
    cache_hit: Mapping[str, float] | None = None,
) -> list[LeaderRow]:
    """Leaderboard rows from rows already read; rows outside ``[now - window_s, now]`` are ignored.

    ``pairs`` adds provider × model rows that have no data yet (so a configured pair shows up as
    "n<5" rather than missing); ``info`` fills price and max output length per provider. ``probes``:
    the probe columns already computed by the store (``compute`` does that in SQL) instead of ``samples``.
    ``cache_hit``: provider → observed prompt-cache hit rate in percent (:func:`cache_hit_pct`).
    """
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}; choose from {', '.join(SORTS)}")
    if window_s <= 0:
        raise ValueError(f"window must be > 0 seconds, got {window_s}")
    since = now - window_s
    by_pair: dict[tuple[str, str, str], list[Sample]] = defaultdict(list)
    for s in samples:
        if since <= s.ts <= now:
            by_pair[(s.provider, s.model, s.api)].append(s)
    traffic_by_pair: dict[tuple[str, str], list[TrafficMinute]] = defaultdict(list)
    for t in traffic:
        if since <= t.minute <= now:
            traffic_by_pair[(t.provider, t.model)].append(t)
    openai = {(p, m, "openai") for p, m in (*traffic_by_pair, *pairs)}
    keys = set(by_pair) | openai | set(probes or ())
    info = info or {}
    bucket_s = bucket_seconds(window_s)
    rows: list[LeaderRow] = []
    for provider, model, api in keys:
        if probes is not None:
            cells = probes.get((provider, model, api)) or _empty_probe_cells(since, bucket_s)
        else:
            cells = _Cells()
            _probe_cells(cells, by_pair.get((provider, model, api), []), since, bucket_s)
        if api == "openai":  # the gateway's traffic minutes are chat traffic
            _traffic_cells(cells, traffic_by_pair.get((provider, model), []))
        meta = info.get(provider, ProviderInfo())
        rows.append(
            LeaderRow(
                provider=provider,
                model=model,
                api=api,
                price_input=meta.price_input,
                price_output=meta.price_output,
                currency=meta.currency,
                max_output_tokens=meta.max_output_tokens,
                price_cached_input=meta.price_cached_input,
                traffic_cache_hit_pct=(cache_hit or {}).get(provider),
                insufficient=cells.insufficient,
                **cells.values,
            )
        )
    column, descending = SORTS[sort]
    rows.sort(key=_sort_key(column, descending))
    return rows


def _empty_probe_cells(since: float, bucket_s: float) -> _Cells:
    cells = _Cells()
    _probe_cells(cells, [], since, bucket_s)
    return cells


def _probe_cells_sql(
    conn: Queryable, provider: str, model: str, since: float, until: float, bucket_s: float, api: str = "openai"
) -> _Cells:
    """``_probe_cells`` computed by the store: aggregates in SQL, each percentile column fetched sorted.

    Same numbers as reading every sample (nearest-rank on the same values; means up to float rounding).
    """
    cells = _Cells()
    base = "FROM samples WHERE provider = ? AND model = ? AND api = ? AND ts >= ? AND ts <= ?"
    args = (provider, model, api, since, until)
    long_ok = f"{base} AND error_class IS NULL AND workload = '{THROUGHPUT_WORKLOAD}'"
    n, ok, graded, right = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN error_class IS NULL THEN 1 ELSE 0 END), 0), "
        "COALESCE(SUM(CASE WHEN accuracy_ok IS NOT NULL THEN 1 ELSE 0 END), 0), "
        f"COALESCE(SUM(CASE WHEN accuracy_ok = 1 THEN 1 ELSE 0 END), 0) {base}",
        args,
    ).fetchone()
    n, ok, graded, right = int(n), int(ok), int(graded), int(right)
    cells.values["samples"] = n
    cells.values["attempts"] = n
    cells.put("reliability_pct", 100.0 * ok / n if n else None, n, MINIMUMS["rate"])
    cells.accuracy(right, graded)

    rated = f"{long_ok} AND tok_s IS NOT NULL"
    n_rates, total = conn.execute(f"SELECT COUNT(*), SUM(tok_s) {rated}", args).fetchone()
    n_rates = int(n_rates)
    cells.values["tok_s_n"] = n_rates
    latest = conn.execute(f"SELECT tok_s, ts {rated} ORDER BY ts DESC, id ASC LIMIT 1", args).fetchone()
    if latest is not None:
        cells.values["snapshot_tok_s"], cells.values["snapshot_ts"] = float(latest[0]), float(latest[1])
    else:
        cells.put("snapshot_tok_s", None, 0, 1)
        cells.values["snapshot_ts"] = None
    cells.put("tok_s_avg", float(total) / n_rates if n_rates else None, n_rates, MINIMUMS["tok_s"])
    floor = "floor" if dialect_of(conn) == "postgres" else ""
    bucket = f"CAST({floor}((ts - ?) / ?) AS INTEGER)"
    means = [
        float(m)
        for (m,) in conn.execute(
            f"SELECT AVG(tok_s) {rated} GROUP BY {bucket}",
            (*args, since, bucket_s),
        ).fetchall()
    ]
    nb = len(means)
    cells.values["tok_s_buckets"] = nb
    lo, hi = (min(means), max(means)) if means else (None, None)
    cells.put("tok_s_min", lo, nb, MINIMUMS["buckets"])
    cells.put("tok_s_max", hi, nb, MINIMUMS["buckets"])
    ratio = hi / lo if lo is not None and hi is not None and lo > 0 else None
    cells.put("peak_trough", ratio, nb, MINIMUMS["buckets"])

    for prefix, where in (
        ("ttft", f"{base} AND error_class IS NULL AND ttft_ms IS NOT NULL"),
        ("e2e", f"{long_ok} AND e2e_ms IS NOT NULL"),
        ("ttft_answer", f"{base} AND error_class IS NULL AND ttft_answer_ms IS NOT NULL"),
    ):
        column = f"{prefix}_ms"
        counted = prefix != "ttft_answer"  # the row has ttft_n and e2e_n; the answer column shares ttft's count
        if dialect_of(conn) == "postgres":
            # percentile_disc(f): the first value whose cumulative share reaches f, i.e. nearest rank, in the server.
            shares = ", ".join(
                f"percentile_disc({q / 100.0 * (1.0 - 1e-12)!r}) WITHIN GROUP (ORDER BY {column})" for q in (50, 90, 99)
            )
            count, *values = conn.execute(f"SELECT COUNT({column}), {shares} {where}", args).fetchone()
            count = int(count)
            if counted:
                cells.values[f"{prefix}_n"] = count
            for q, value in zip((50, 90, 99), values, strict=True):
                minimum = MINIMUMS[f"p{q}"]
                cells.put(f"{prefix}_p{q}_ms", float(value) if count >= minimum else None, count, minimum)
            continue
        ordered = [float(v) for (v,) in conn.execute(f"SELECT {column} {where} ORDER BY {column}", args).fetchall()]
        if counted:
            cells.values[f"{prefix}_n"] = len(ordered)
        cells.percentiles(prefix, ordered)
    return cells


def compute(
    conn: Queryable,
    *,
    window_s: float,
    now: float,
    model: str | None = None,
    sort: str = "p90",
    info: Mapping[str, ProviderInfo] | None = None,
    pairs: Iterable[tuple[str, str]] = (),
) -> list[LeaderRow]:
    """Read the window's samples and traffic minutes from the store and build the leaderboard.

    ``model`` keeps only that upstream model id (``pairs`` are filtered the same way).
    """
    since = now - window_s
    traffic = read_window(conn, since=since, until=now, model=model)  # whole hours from the hourly roll-up
    clause, args = ("AND model = ? ", (since, now, model)) if model is not None else ("", (since, now))
    found = conn.execute(
        f"SELECT DISTINCT provider, model, api FROM samples WHERE ts >= ? AND ts <= ? {clause}",  # noqa: S608
        args,
    ).fetchall()
    bucket_s = bucket_seconds(window_s)
    probes = {(p, m, a): _probe_cells_sql(conn, p, m, since, now, bucket_s, a) for p, m, a in found}
    wanted = [p for p in pairs if model is None or p[1] == model]
    hits = cache_hit_pct(conn, since=since, until=now)
    rows = build(
        (), traffic, window_s=window_s, now=now, sort=sort, info=info, pairs=wanted, probes=probes, cache_hit=hits
    )
    quality = read_rates(conn, since=since, until=now, model=model)
    if not quality:
        return rows
    return [
        replace(r, quality={s: q.to_dict() for s, q in quality[(r.provider, r.model)].items()})
        if r.api == "openai" and (r.provider, r.model) in quality
        else r
        for r in rows
    ]


def cache_hit_pct(conn: Queryable, *, since: float, until: float) -> dict[str, float]:
    """Provider → 100 × cached ÷ prompt tokens of the gateway's requests whose answer reported cached tokens,
    from ``hour_start(since)``: the hourly roll-ups plus the rows above the roll-up watermark, in one statement
    (one snapshot on either store). Providers whose requests never reported cached tokens are left out."""
    from tailgate.ledger.usage import hour_start

    found = conn.execute(
        "SELECT provider, SUM(c), SUM(r) FROM ("
        "SELECT provider, cached_tokens AS c, reported_prompt_tokens AS r FROM usage_hourly "
        "WHERE hour >= ? AND hour <= ? AND provider <> '' "
        "UNION ALL SELECT provider, COALESCE(cached_tokens, 0), prompt_tokens FROM requests "
        "WHERE id > (SELECT upto FROM rollup_state WHERE name = 'requests') AND ts >= ? AND ts <= ? "
        "AND provider IS NOT NULL AND cached_tokens IS NOT NULL AND prompt_tokens IS NOT NULL"
        ") AS cells GROUP BY provider",
        (hour_start(since), until, hour_start(since), until),
    ).fetchall()
    return {str(p): round(100.0 * min(1.0, int(c or 0) / int(r)), 2) for p, c, r in found if r}


class Prior(TypedDict):
    """What the monitor measured recently for one provider × model (None: too few samples)."""

    ttft_p90_ms: float | None
    e2e_p90_ms: float | None
    error_rate: float | None
    n: int


def recent_priors(conn: Queryable, window_s: float, now: float) -> dict[tuple[str, str], Prior]:
    """Per (provider, upstream model): probe TTFT P90, ``long`` E2E P90 and error rate over the window.

    For a router that wants to start from measured numbers instead of from nothing (docs/monitor.md).
    ``n`` is the number of probes; a figure from fewer than ``MINIMUMS['p90']`` samples is None.
    """
    by_pair: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for s in read_samples(conn, since=now - window_s, until=now):
        if s.api == "openai":  # the router's priors are for chat routes; Anthropic probes are a separate endpoint
            by_pair[(s.provider, s.model)].append(s)
    minimum = MINIMUMS["p90"]
    out: dict[tuple[str, str], Prior] = {}
    for pair, group in sorted(by_pair.items()):
        ok = [s for s in group if s.ok]
        ttft = [s.ttft_ms for s in ok if s.ttft_ms is not None]
        e2e = [s.e2e_ms for s in ok if s.workload == THROUGHPUT_WORKLOAD and s.e2e_ms is not None]
        out[pair] = Prior(
            ttft_p90_ms=nearest_rank(ttft, 90) if len(ttft) >= minimum else None,
            e2e_p90_ms=nearest_rank(e2e, 90) if len(e2e) >= minimum else None,
            error_rate=(len(group) - len(ok)) / len(group) if len(group) >= MINIMUMS["rate"] else None,
            n=len(group),
        )
    return out
