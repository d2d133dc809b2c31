"""What ``tailgate leaderboard`` does: read the store, build the leaderboard, print a table or JSON.

The numbers come from :mod:`tailgate.ledger.leaderboard` (definitions in docs/monitor.md); this module
only loads the optional config (price, max output length, configured pairs) and renders.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from tailgate.config.loader import ConfigError
from tailgate.config.resolve import load_resolved
from tailgate.config.schema import GatewayConfig
from tailgate.ledger.leaderboard import MINIMUMS, SORTS, LeaderRow, ProviderInfo, bucket_seconds, compute
from tailgate.ledger.loadtests import LoadTest, latest_load_tests
from tailgate.ledger.store import db_errors, open_store, redact_url
from tailgate.monitor.command import store_path
from tailgate.monitor.peak import peak_cells
from tailgate.monitor.runner import targets_from_config
from tailgate.stats.shown import wilson
from tailgate.tables import Col, Grid

__all__ = ["COLUMN_KEYS", "BoardOptions", "leaderboard_json", "leaderboard_main", "leaderboard_table", "pick_columns"]

JSON_SCHEMA = "tailgate.leaderboard/v1"


@dataclass(frozen=True, slots=True)
class BoardOptions:
    """``tailgate leaderboard`` flags, parsed."""

    window_s: float = 7 * 86400.0
    sort: str = "p90"
    model: str | None = None
    as_json: bool = False
    db: Path | None = None
    config: Path | None = None
    now: float | None = None
    """The end of the window (Unix s); None: now. For tests and for looking back."""
    columns: tuple[str, ...] | None = None
    """The table's columns (``--columns`` / ``--wide``); None: the compact default."""


def _cell(row: LeaderRow, name: str, fmt: Callable[[Any], str]) -> str:
    value = getattr(row, name)
    if value is None:
        return row.insufficient.get(name, "-")
    return fmt(value)


def _provider(row: LeaderRow) -> str:
    """The provider cell: ``NAME`` for its chat endpoint, ``NAME (anthropic)`` for its Anthropic endpoint's row."""
    return row.provider if row.api == "openai" else f"{row.provider} ({row.api})"


def _s(ms: float) -> str:
    return f"{ms / 1000.0:.2f}"


def _trio(row: LeaderRow, prefix: str) -> str:
    names = [f"{prefix}_p{q}_ms" for q in (50, 90, 99)]
    if all(getattr(row, n) is None for n in names):
        return row.insufficient.get(names[0], "-")  # one note, not three
    return " / ".join(_cell(row, n, _s) for n in names)


def _price(row: LeaderRow) -> str:
    if not row.price_input and not row.price_output:  # unset (or free): nothing to compare
        return "-"
    return f"{row.price_input or 0:g} / {row.price_output or 0:g} {row.currency or ''}".rstrip()


def _accuracy(row: LeaderRow) -> str:
    """``86% [64–96] n=14``: the share right, its 95 % Wilson interval and the graded task count."""
    if row.accuracy_pct is None:
        return row.insufficient.get("accuracy_pct", "-")
    right = round(row.accuracy_pct * row.accuracy_n / 100.0)
    lo, hi = wilson(right, row.accuracy_n)
    return f"{row.accuracy_pct:.0f}% [{100 * lo:.0f}–{100 * hi:.0f}] n={row.accuracy_n}"


_SHORT = {
    "tool_args_invalid_json": "tool JSON",
    "tool_args_schema_mismatch": "tool schema",
    "tool_unknown_name": "tool name",
    "empty_answer": "empty",
    "content_filtered": "filtered",
    "json_invalid": "json_object",
    "reasoning_missing": "no reasoning",
    "canary_wrong": "canary",
}


def quality_cell(row: LeaderRow) -> str:
    """The worst answer-quality signal of the row's traffic: ``tool JSON 4.0% [2.5–6.4] n=400``; ``ok n=…``
    when no signal hit (n = the most answers any signal was checked on); ``n<5`` while no signal was checked
    on the rate minimum; ``-`` without counts."""
    if not row.quality:
        return "-"
    minimum = MINIMUMS["rate"]
    shown = {k: v for k, v in row.quality.items() if v["checked"] >= minimum}
    if not shown:
        return f"n<{minimum}"
    name, worst = max(shown.items(), key=lambda kv: (kv[1]["pct"], kv[1]["checked"]))
    if not worst["hits"]:
        return f"ok n={max(int(q['checked']) for q in shown.values())}"
    short = _SHORT.get(name, name)
    return f"{short} {worst['pct']:.1f}% [{worst['low_pct']:.1f}–{worst['high_pct']:.1f}] n={int(worst['checked'])}"


def window_label(window_s: float) -> str:
    """``7d``, ``24h``, ``1h``, ``8.6m``: whole units where they fit, else one decimal (no spurious precision)."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if window_s >= size and window_s % size == 0:
            return f"{window_s / size:g}{unit}"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if window_s >= size:
            return f"{window_s / size:.1f}{unit}"
    return f"{window_s:.0f}s"


Peak = dict[tuple[str, str], LoadTest]


class PeakJson(Struct, kw_only=True):
    """A row's ``peak`` object in ``--json``: the newest scheduled load test of the window."""

    ts: float
    profile: str
    requests: int
    errors: int
    ttft_p90_ms: float | None
    ttft_p99_ms: float | None
    e2e_p90_ms: float | None
    e2e_p99_ms: float | None
    decay_p99_e2e: float | None
    capacity: float | None
    capacity_by: str | None
    levels: list[dict[str, float | int | None]]
    """The profile's levels as stored (``load_tests.detail``)."""


class LeaderboardJson(Struct, kw_only=True):
    """``tailgate leaderboard --json`` (schema ``tailgate.leaderboard/v1``, keys in docs/monitor.md)."""

    schema: str
    window_s: float
    now: float
    sort: str
    model: str | None
    bucket_s: float
    minimums: dict[str, int]
    rows: list[dict[str, object]]
    """Each row: the leaderboard row's fields (``tailgate.ledger.leaderboard.LeaderRow``), then ``peak``."""


def peak_json(test: LoadTest | None) -> PeakJson | None:
    """A row's ``peak`` object in ``--json``: the newest scheduled load test of the window."""
    if test is None:
        return None
    return PeakJson(
        ts=test.ts,
        profile=test.profile,
        requests=test.requests,
        errors=test.errors,
        ttft_p90_ms=test.ttft_p90_ms,
        ttft_p99_ms=test.ttft_p99_ms,
        e2e_p90_ms=test.e2e_p90_ms,
        e2e_p99_ms=test.e2e_p99_ms,
        decay_p99_e2e=test.decay_p99_e2e,
        capacity=test.capacity,
        capacity_by=test.capacity_by,
        levels=test.levels(),
    )


_PCT = "{:.1f}%".format
_RATE = "{:.1f}".format


def _min_max(row: LeaderRow) -> str:
    lo, hi = _cell(row, "tok_s_min", _RATE), _cell(row, "tok_s_max", _RATE)
    return lo if row.tok_s_min is None else f"{lo}–{hi}"


COLUMNS: tuple[tuple[Col, Callable[[LeaderRow], str], bool], ...] = (
    # (column, cell, in the compact default). ``keep``: the lower, the longer it stays on a narrow terminal.
    (Col("provider", "provider", 0, left=True), lambda r: _provider(r), True),
    (Col("model", "model", 0, left=True), lambda r: r.model, True),
    (Col("n", "n", 1), lambda r: str(r.samples), True),
    (Col("ttft_p50", "TTFT\nP50", 7), lambda r: _cell(r, "ttft_p50_ms", _s), False),
    (Col("ttft_p90", "TTFT\nP90", 1), lambda r: _cell(r, "ttft_p90_ms", _s), True),
    (Col("ttft_p99", "TTFT\nP99", 1), lambda r: _cell(r, "ttft_p99_ms", _s), True),
    (Col("ttft_n", "TTFT\nn", 6), lambda r: str(r.ttft_n), True),
    (Col("ttft_answer", "TTFT answer\nP50/P90/P99", 8), lambda r: _trio(r, "ttft_answer"), False),
    (Col("e2e_p50", "E2E\nP50", 7), lambda r: _cell(r, "e2e_p50_ms", _s), False),
    (Col("e2e_p90", "E2E\nP90", 4), lambda r: _cell(r, "e2e_p90_ms", _s), True),
    (Col("e2e_p99", "E2E\nP99", 2), lambda r: _cell(r, "e2e_p99_ms", _s), True),
    (Col("e2e_n", "E2E\nn", 6), lambda r: str(r.e2e_n), True),
    (Col("snapshot", "tok/s\nsnapshot", 8), lambda r: _cell(r, "snapshot_tok_s", _RATE), False),
    (Col("tok_s_avg", "tok/s\navg", 3), lambda r: _cell(r, "tok_s_avg", _RATE), True),
    (Col("tok_s_min", "tok/s\nmin", 4), lambda r: _cell(r, "tok_s_min", _RATE), True),
    (Col("tok_s_range", "tok/s\nmin–max", 8), _min_max, False),
    (Col("peak_trough", "peak/\ntrough", 8), lambda r: _cell(r, "peak_trough", "{:.1f}×".format), False),
    (Col("reliability", "reliability", 2), lambda r: _cell(r, "reliability_pct", _PCT), True),
    (Col("accuracy", "accuracy\n[95% CI]", 3), _accuracy, True),
    (Col("quality", "worst quality signal\n[95% CI]", 8), quality_cell, False),
    (Col("price", "price in/out\nper M", 8), _price, False),
    (
        Col("max_output", "max\noutput", 9),
        lambda r: "-" if r.max_output_tokens is None else f"{r.max_output_tokens:,}",
        False,
    ),
)
TRAFFIC: tuple[tuple[Col, Callable[[LeaderRow], str]], ...] = (
    (Col("traffic_req", "traffic\nreq", 5), lambda r: str(r.traffic_requests)),
    (Col("traffic_reliability", "traffic\nreliability", 6), lambda r: _cell(r, "traffic_reliability_pct", _PCT)),
    (Col("traffic_tok_s", "traffic\ntok/s", 7), lambda r: _cell(r, "traffic_tok_s_avg", _RATE)),
    (Col("traffic_ttft", "traffic TTFT\nP50/P90/P99", 5), lambda r: _trio(r, "traffic_ttft")),
    (Col("traffic_e2e", "traffic E2E\nP50/P90/P99", 6), lambda r: _trio(r, "traffic_e2e")),
)
TRAFFIC_WIDE: tuple[tuple[Col, Callable[[LeaderRow], str]], ...] = (
    # Shown with --wide or --columns only (not in the compact default), and only when the window has traffic.
    (Col("traffic_cache_hit", "traffic\ncache hit", 8), lambda r: _cell(r, "traffic_cache_hit_pct", _PCT)),
)
PEAK: tuple[Col, ...] = (
    Col("peak_p90", "peak TTFT\nP90", 5),
    Col("peak_p99", "peak TTFT\nP99", 5),
    Col("peak_n", "peak\nn", 6),
    Col("peak_decay", "peak\ndecay", 6),
    Col("peak_capacity", "peak\ncapacity", 7),
)
COLUMN_KEYS: tuple[str, ...] = (
    *(c.key for c, _, _ in COLUMNS),
    *(c.key for c, _ in TRAFFIC),
    *(c.key for c, _ in TRAFFIC_WIDE),
    *(c.key for c in PEAK),
)
"""Every ``--columns`` name, in table order."""


def pick_columns(spec: str | None, *, wide: bool) -> tuple[str, ...] | None:
    """``--columns a,b`` / ``--wide`` → the keys to show (None: the compact default); ValueError names the flag."""
    if spec is None:
        return COLUMN_KEYS if wide else None
    keys = tuple(k.strip() for k in spec.split(",") if k.strip())
    unknown = [k for k in keys if k not in COLUMN_KEYS]
    if unknown or not keys:
        raise ValueError(
            f"--columns: unknown column {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"choose from {', '.join(COLUMN_KEYS)}"
        )
    return keys


def _peak_cell(peak: Peak, key: str) -> Callable[[LeaderRow], str]:
    def cell(row: LeaderRow) -> str:
        return peak_cells(peak.get((row.provider, row.model)) if row.api == "openai" else None)[key]

    return cell


def leaderboard_table(
    rows: list[LeaderRow],
    *,
    window_s: float,
    sort: str,
    peak: Peak | None = None,
    columns: tuple[str, ...] | None = None,
) -> Grid:
    """The leaderboard as a table to fit to the terminal: the compact default, ``columns``, or all.

    Traffic columns appear only when the window has gateway traffic, peak columns only when it has a peak
    test. Provider and model are always shown.
    """
    traffic = any(row.traffic_requests for row in rows)
    bucket = window_label(bucket_seconds(window_s))
    chosen: list[tuple[Col, Callable[[LeaderRow], str]]] = []
    wanted = set(columns) if columns is not None else None
    for col, cell, default in COLUMNS:
        if col.keep == 0 or (col.key in wanted if wanted is not None else default):
            chosen.append((col, cell))
    if traffic:  # no traffic in the window: no traffic columns, whatever was asked
        chosen += [(col, cell) for col, cell in TRAFFIC if wanted is None or col.key in wanted]
        chosen += [(col, cell) for col, cell in TRAFFIC_WIDE if wanted is not None and col.key in wanted]
    if peak:
        chosen += [(col, _peak_cell(peak, col.key)) for col in PEAK if wanted is None or col.key in wanted]
    title = f"leaderboard, last {window_label(window_s)} (sorted by {sort}; latencies in s)"
    caption = (
        f"n = probe samples; TTFT over the successful ones (TTFT n), E2E over successful 'long' probes (E2E n); "
        f"tok/s from 'long' probes (min = lowest {bucket} bucket mean). 'n<K': fewer than K samples, "
        "so no number. "
        + (
            "traffic = the gateway's own requests (TTFT and tok/s from the streamed ones). "
            if traffic
            else "No gateway traffic in this window. "
        )
        + ("peak = the newest peak-hour load test, at its highest level (peak n requests). " if peak else "")
        + "--wide shows every column; --columns picks them."
    )
    return Grid(
        cols=tuple(c for c, _ in chosen),
        rows=tuple(tuple(cell(row) for _, cell in chosen) for row in rows),
        title=title,
        caption=caption,
    )


def leaderboard_json(
    rows: list[LeaderRow], *, window_s: float, now: float, sort: str, model: str | None, peak: Peak | None = None
) -> LeaderboardJson:
    """The JSON document of ``--json`` (schema ``tailgate.leaderboard/v1``, keys in docs/monitor.md)."""
    out_rows: list[dict[str, object]] = []
    for row in rows:
        test = (peak or {}).get((row.provider, row.model)) if row.api == "openai" else None
        out_rows.append({**row.to_dict(), "peak": peak_json(test)})
    return LeaderboardJson(
        schema=JSON_SCHEMA,
        window_s=window_s,
        now=now,
        sort=sort,
        model=model,
        bucket_s=bucket_seconds(window_s),
        minimums=dict(MINIMUMS),
        rows=out_rows,
    )


def _config_info(path: Path) -> tuple[GatewayConfig, dict[str, ProviderInfo], list[tuple[str, str]]]:
    config, providers = load_resolved(path)
    info = {
        name: ProviderInfo(p.price.input, p.price.output, p.price.currency, p.max_output_tokens, p.price.cached_input)
        for name, p in providers.items()
    }
    return config, info, [(t.provider, t.model) for t in targets_from_config(config)]


def leaderboard_main(options: BoardOptions, echo: Callable[[str], None], show: Callable[[Grid], None]) -> int:
    """Run ``tailgate leaderboard``; return the exit code (2: bad flag, config or store)."""
    import json

    if options.sort not in SORTS:
        echo(f"error: --sort {options.sort!r}: choose from {', '.join(SORTS)}")
        return 2
    info: dict[str, ProviderInfo] = {}
    pairs: list[tuple[str, str]] = []
    config: GatewayConfig | None = None
    if options.config is not None:
        try:
            config, info, pairs = _config_info(options.config)
        except ConfigError as exc:
            echo("error: invalid gateway config:\n" + "\n".join(f"  {p}" for p in exc.problems))
            return 2
    path: str | Path = store_path(options.db, config)
    if options.db is None and config is not None and config.ledger.url:
        path = config.ledger.url  # the fleet's PostgreSQL store (docs/ledger.md)
    elif isinstance(path, Path) and not path.exists():
        hint = (
            "the config's store does not exist yet: run `tailgate monitor --config` with it first"
            if options.config is not None
            else "run `tailgate monitor --config FILE` first; monitor writes to the config's ledger.path, "
            "so read it back with the same `--config FILE` (or give --db / TAILGATE_DB)"
        )
        echo(f"error: no tailgate database at {path} ({hint})")
        return 2
    where = redact_url(path) if isinstance(path, str) else os.path.abspath(path)
    print(f"store: {where}", file=sys.stderr)  # which store, whatever the working directory (docs/config.md)
    now = time.time() if options.now is None else options.now
    try:
        with contextlib.closing(open_store(path)) as conn:
            rows = compute(
                conn, window_s=options.window_s, now=now, model=options.model, sort=options.sort, info=info, pairs=pairs
            )
            peak = latest_load_tests(conn, since=now - options.window_s, until=now)
    except db_errors() as exc:
        echo(f"error: cannot read {where}: {exc}")
        return 2
    if options.as_json:
        doc = leaderboard_json(
            rows, window_s=options.window_s, now=now, sort=options.sort, model=options.model, peak=peak
        )
        echo(json.dumps(msgspec.to_builtins(doc), indent=2, ensure_ascii=False))
        return 0
    if not rows:
        echo(
            f"no samples in the last {window_label(options.window_s)} in {where}"
            + (f" for model {options.model}" if options.model else "")
        )
        return 0
    show(leaderboard_table(rows, window_s=options.window_s, sort=options.sort, peak=peak, columns=options.columns))
    return 0
