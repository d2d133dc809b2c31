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

from rich.table import Table

from tailgate.config.loader import ConfigError
from tailgate.config.resolve import load_resolved
from tailgate.config.schema import GatewayConfig
from tailgate.ledger.leaderboard import MINIMUMS, SORTS, LeaderRow, ProviderInfo, bucket_seconds, compute
from tailgate.ledger.loadtests import LoadTest, latest_load_tests
from tailgate.ledger.store import db_errors, open_store, redact_url
from tailgate.monitor.command import store_path
from tailgate.monitor.runner import targets_from_config

__all__ = ["BoardOptions", "leaderboard_json", "leaderboard_main", "leaderboard_table"]

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


def _cell(row: LeaderRow, name: str, fmt: Callable[[Any], str]) -> str:
    value = getattr(row, name)
    if value is None:
        return row.insufficient.get(name, "-")
    return fmt(value)


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


def window_label(window_s: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if window_s >= size and window_s % size == 0:
            return f"{window_s / size:g}{unit}"
    return f"{window_s:g}s"


Peak = dict[tuple[str, str], LoadTest]


def _peak_cells(test: LoadTest | None) -> list[str]:
    """The peak-hour load test columns: P90 / P99 TTFT (s) at the highest level, decay, capacity."""
    if test is None:
        return ["-", "-", "-"]
    p90 = "-" if test.ttft_p90_ms is None else _s(test.ttft_p90_ms)
    p99 = "-" if test.ttft_p99_ms is None else _s(test.ttft_p99_ms)
    decay = "-" if test.decay_p99_e2e is None else f"{test.decay_p99_e2e:.2f}×"
    cap = "-" if test.capacity is None else f"{test.capacity:g}"
    return [f"{p90} / {p99}", decay, cap]


def peak_json(test: LoadTest | None) -> dict[str, Any] | None:
    """A row's ``peak`` object in ``--json``: the newest scheduled load test of the window."""
    if test is None:
        return None
    return {
        "ts": test.ts,
        "profile": test.profile,
        "requests": test.requests,
        "errors": test.errors,
        "ttft_p90_ms": test.ttft_p90_ms,
        "ttft_p99_ms": test.ttft_p99_ms,
        "e2e_p90_ms": test.e2e_p90_ms,
        "e2e_p99_ms": test.e2e_p99_ms,
        "decay_p99_e2e": test.decay_p99_e2e,
        "capacity": test.capacity,
        "capacity_by": test.capacity_by,
        "levels": test.levels(),
    }


def leaderboard_table(rows: list[LeaderRow], *, window_s: float, sort: str, peak: Peak | None = None) -> Table:
    """The leaderboard as a rich table: probe columns, then the gateway's traffic columns (if any traffic)."""
    pct = "{:.1f}%".format
    rate = "{:.1f}".format
    traffic = any(row.traffic_requests for row in rows)
    bucket = window_label(bucket_seconds(window_s))
    table = Table(
        title=f"leaderboard, last {window_label(window_s)} (sorted by {sort}; latencies in s: P50 / P90 / P99)",
        caption=(
            f"n = probe samples; tok/s from 'long' probes (min–max over {bucket} buckets); E2E of 'long' probes. "
            "'n<K': fewer than K samples, so no number. "
            + ("traffic = the gateway's own requests." if traffic else "No gateway traffic in this window.")
        ),
    )
    columns = [
        "provider",
        "model",
        "n",
        "snapshot tok/s",
        "avg tok/s",
        "min–max tok/s",
        "peak/trough",
        "TTFT",
        "TTFT answer",
        "E2E",
        "reliability",
        "accuracy",
        "price in/out per M",
        "max output",
    ]
    if traffic:
        columns += ["traffic req", "traffic reliability", "traffic tok/s", "traffic TTFT", "traffic E2E"]
    if peak:
        columns += ["peak TTFT P90 / P99", "peak decay", "peak capacity"]
    for header in columns:
        table.add_column(header, justify="left" if header in ("provider", "model") else "right", no_wrap=True)
    for row in rows:
        lo, hi = _cell(row, "tok_s_min", rate), _cell(row, "tok_s_max", rate)
        cells = [
            row.provider,
            row.model,
            str(row.samples),
            _cell(row, "snapshot_tok_s", rate),
            _cell(row, "tok_s_avg", rate),
            lo if row.tok_s_min is None else f"{lo}–{hi}",
            _cell(row, "peak_trough", "{:.1f}×".format),
            _trio(row, "ttft"),
            _trio(row, "ttft_answer"),
            _trio(row, "e2e"),
            _cell(row, "reliability_pct", pct),
            _cell(row, "accuracy_pct", pct),
            _price(row),
            "-" if row.max_output_tokens is None else f"{row.max_output_tokens:,}",
        ]
        if traffic:
            cells += [
                str(row.traffic_requests),
                _cell(row, "traffic_reliability_pct", pct),
                _cell(row, "traffic_tok_s_avg", rate),
                _trio(row, "traffic_ttft"),
                _trio(row, "traffic_e2e"),
            ]
        if peak:
            cells += _peak_cells(peak.get((row.provider, row.model)))
        table.add_row(*cells)
    return table


def leaderboard_json(
    rows: list[LeaderRow], *, window_s: float, now: float, sort: str, model: str | None, peak: Peak | None = None
) -> dict[str, Any]:
    """The JSON document of ``--json`` (schema ``tailgate.leaderboard/v1``, keys in docs/monitor.md)."""
    return {
        "schema": JSON_SCHEMA,
        "window_s": window_s,
        "now": now,
        "sort": sort,
        "model": model,
        "bucket_s": bucket_seconds(window_s),
        "minimums": dict(MINIMUMS),
        "rows": [{**row.to_dict(), "peak": peak_json((peak or {}).get((row.provider, row.model)))} for row in rows],
    }


def _config_info(path: Path) -> tuple[GatewayConfig, dict[str, ProviderInfo], list[tuple[str, str]]]:
    config, providers = load_resolved(path)
    info = {
        name: ProviderInfo(p.price.input, p.price.output, p.price.currency, p.max_output_tokens)
        for name, p in providers.items()
    }
    return config, info, [(t.provider, t.model) for t in targets_from_config(config)]


def leaderboard_main(options: BoardOptions, echo: Callable[[str], None], show: Callable[[Table], None]) -> int:
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
        echo(f"error: no tailgate database at {path} (run `tailgate monitor` first, or give --db / TAILGATE_DB)")
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
        echo(json.dumps(doc, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        echo(
            f"no samples in the last {window_label(options.window_s)} in {where}"
            + (f" for model {options.model}" if options.model else "")
        )
        return 0
    show(leaderboard_table(rows, window_s=options.window_s, sort=options.sort, peak=peak))
    return 0
