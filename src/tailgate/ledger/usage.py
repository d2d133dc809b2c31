"""Spend: hourly roll-ups of the request rows, retention, and the usage report (``tailgate usage``).

``rollup(conn)`` adds every request row it has not seen yet (by id: ``rollup_state.upto``) into
``usage_hourly`` (hour × key × alias × provider × lane: requests, errors, input and output tokens, cost, cached
tokens and the prompt tokens of the rows that reported them) and
moves the watermark, in one transaction. Going by id rather than by time means a row that arrives late
(a spool replayed after an outage) is still counted, in the hour it happened. On PostgreSQL the job first
takes ``LOCK TABLE requests IN SHARE MODE`` for an instant — it waits for inserts in flight to commit —
so no row with an id below the watermark can become visible after it; ``FOR UPDATE`` on the watermark
serialises replicas running the job together.

``usage(conn, since)`` = roll-ups of the hours from ``since`` (rounded down to the hour) + raw rows above
the watermark, read in one snapshot: it matches a ``GROUP BY`` over the raw rows exactly, and stays fast
however many raw rows the table holds. ``retention(conn, …)`` deletes raw rows older than the raw
retention that are already rolled up, and roll-ups older than theirs.
"""

from __future__ import annotations

import calendar
import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from tailgate.ledger.store import Queryable, StoreConn, dialect_of

__all__ = [
    "DIMENSIONS",
    "UsageRow",
    "day_start",
    "hit_rate",
    "hour_start",
    "month_start",
    "next_day",
    "next_month",
    "retention",
    "rollup",
    "spend",
    "usage",
]

HOUR = 3600.0
Dimension = Literal["key", "alias", "provider", "day", "lane"]
DIMENSIONS: tuple[Dimension, ...] = ("key", "alias", "provider", "day", "lane")
_CHUNK = 500_000  # ids per roll-up transaction (a first roll-up of a big table goes in steps)


def hour_start(ts: float) -> float:
    return float(int(ts // HOUR) * HOUR)


def day_start(ts: float) -> float:
    return float(int(ts // 86400) * 86400)


def next_day(ts: float) -> float:
    return day_start(ts) + 86400.0


def month_start(ts: float) -> float:
    t = time.gmtime(ts)
    return float(calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0)))


def next_month(ts: float) -> float:
    t = time.gmtime(ts)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


def _hour_expr(conn: Queryable) -> str:
    if dialect_of(conn) == "postgres":
        return "floor(ts / 3600) * 3600"
    return "CAST(ts / 3600 AS INTEGER) * 3600"


def _aggregate(conn: Queryable) -> str:
    return (
        f"SELECT {_hour_expr(conn)}, COALESCE(key_id, ''), alias, COALESCE(provider, ''), lane, COUNT(*), "  # noqa: S608
        "SUM(CASE WHEN outcome <> 'ok' THEN 1 ELSE 0 END), SUM(COALESCE(prompt_tokens, 0)), "
        f"SUM(COALESCE(output_tokens, 0)), SUM(COALESCE(cost, 0)), {_CACHED} FROM requests"
    )


_CACHED = (
    "SUM(COALESCE(cached_tokens, 0)), "
    "SUM(CASE WHEN cached_tokens IS NOT NULL THEN COALESCE(prompt_tokens, 0) ELSE 0 END)"
)
"""Cached prompt tokens, and the prompt tokens of the rows whose provider said how many were cached (the hit
rate's denominator: a provider that says nothing is "not reported", never a 0 % hit rate)."""


_UPSERT = (
    "INSERT INTO usage_hourly (hour, key_id, alias, provider, lane, requests, errors, input_tokens, output_tokens, "
    "cost, cached_tokens, reported_prompt_tokens) "
    "{select} WHERE id > ? AND id <= ? GROUP BY 1, 2, 3, 4, 5 "
    "ON CONFLICT (hour, key_id, alias, provider, lane) DO UPDATE SET "
    "requests = usage_hourly.requests + excluded.requests, errors = usage_hourly.errors + excluded.errors, "
    "input_tokens = usage_hourly.input_tokens + excluded.input_tokens, "
    "output_tokens = usage_hourly.output_tokens + excluded.output_tokens, "
    "cost = usage_hourly.cost + excluded.cost, "
    "cached_tokens = usage_hourly.cached_tokens + excluded.cached_tokens, "
    "reported_prompt_tokens = usage_hourly.reported_prompt_tokens + excluded.reported_prompt_tokens"
)


def _watermark(conn: Queryable, *, lock: bool = False) -> int:
    suffix = " FOR UPDATE" if lock and dialect_of(conn) == "postgres" else ""
    row = conn.execute(f"SELECT upto FROM rollup_state WHERE name = 'requests'{suffix}").fetchone()  # noqa: S608
    return int(row[0]) if row else 0


def rollup(conn: StoreConn) -> int:
    """Roll every not-yet-counted request row into ``usage_hourly``; return how many rows were added."""
    total = 0
    while True:
        if conn.dialect == "postgres":
            with conn.transaction():
                conn.execute("LOCK TABLE requests IN SHARE MODE")  # waits for inserts in flight, then lets go
                top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM requests").fetchone()[0])
        with conn.transaction():
            old = _watermark(conn, lock=True)
            if conn.dialect == "sqlite":
                top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM requests").fetchone()[0])
            if top <= old:
                return total
            upto = min(top, old + _CHUNK)
            (n,) = conn.execute("SELECT COUNT(*) FROM requests WHERE id > ? AND id <= ?", (old, upto)).fetchone()
            conn.execute(_UPSERT.format(select=_aggregate(conn)), (old, upto))
            conn.execute("UPDATE rollup_state SET upto = ? WHERE name = 'requests'", (upto,))
            total += int(n)
        if upto == top:
            return total


def retention(conn: StoreConn, *, now: float, raw_s: float, rollup_s: float) -> tuple[int, int]:
    """Delete raw rows older than ``raw_s`` that are rolled up, and roll-ups older than ``rollup_s`` (the hourly
    ``quality_counts`` too, which live as long as the usage roll-ups; the count returned is usage's).

    The row at the watermark itself is kept: SQLite would hand its id out again after deleting the
    highest one, and a reused id below the watermark would never be rolled up.
    """
    with conn.transaction():
        upto = _watermark(conn)
        raw = conn.execute("DELETE FROM requests WHERE id < ? AND ts < ?", (upto, now - raw_s)).rowcount
        hourly = conn.execute("DELETE FROM usage_hourly WHERE hour < ?", (hour_start(now - rollup_s),)).rowcount
        conn.execute("DELETE FROM quality_counts WHERE hour < ?", (hour_start(now - rollup_s),))
    return int(raw), int(hourly)


@contextlib.contextmanager
def _snapshot(conn: StoreConn) -> Iterator[None]:
    """Reads that see one consistent state of the store (roll-ups and watermark together)."""
    if conn.dialect == "postgres":
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    else:
        conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One hour × key × alias × provider × lane cell (key / provider ``""`` when there was none)."""

    hour: float
    key: str
    alias: str
    provider: str
    requests: int
    errors: int
    input_tokens: int
    output_tokens: int
    cost: float
    cached_tokens: int = 0
    """Of ``input_tokens``, those the provider served from its prompt cache."""
    reported_prompt_tokens: int = 0
    """The ``input_tokens`` of the requests whose provider said how many were cached."""
    lane: str = "interactive"
    """``interactive``, ``batch-live``, ``batch-lane`` or ``provider-batch`` (``LedgerRow.lane``)."""


def cells(conn: StoreConn, *, since: float, key: str | None = None) -> list[UsageRow]:
    """Every cell from ``hour_start(since)`` on: roll-ups plus raw rows above the watermark, one snapshot."""
    start = hour_start(since)
    key_clause = " AND key_id = ?" if key is not None else ""
    args: tuple[Any, ...] = (start, key) if key is not None else (start,)
    out: list[UsageRow] = []
    with _snapshot(conn):
        upto = _watermark(conn)
        rolled = conn.execute(
            "SELECT hour, key_id, alias, provider, lane, requests, errors, input_tokens, output_tokens, "  # noqa: S608
            "cost, cached_tokens, reported_prompt_tokens "
            f"FROM usage_hourly WHERE hour >= ?{key_clause}",
            args,
        ).fetchall()
        raw = conn.execute(
            f"{_aggregate(conn)} WHERE id > ? AND ts >= ?{key_clause} GROUP BY 1, 2, 3, 4, 5",
            (upto, *args),
        ).fetchall()
    for r in (*rolled, *raw):
        out.append(
            UsageRow(
                float(r[0]),
                r[1],
                r[2],
                r[3],
                int(r[5]),
                int(r[6]),
                int(r[7]),
                int(r[8]),
                float(r[9]),
                int(r[10]),
                int(r[11]),
                lane=r[4],
            )
        )
    return out


_ROLLED_GROUP = {"key": "key_id", "alias": "alias", "provider": "provider", "day": "hour", "lane": "lane"}


def _raw_group(conn: Queryable, by: Dimension) -> str:
    return {
        "key": "COALESCE(key_id, '')",
        "alias": "alias",
        "provider": "COALESCE(provider, '')",
        "day": _hour_expr(conn),
        "lane": "lane",
    }[by]


def _grouped(conn: StoreConn, *, since: float, by: Dimension, key: str | None) -> list[tuple[Any, ...]]:
    """(group, requests, errors, refused, input, output, cost, cached, reported prompt) from roll-ups + raw rows above
    the watermark, summed in the store (a week of roll-ups is ~10^5 rows: they are not read into Python). ``day``
    groups by hour. ``refused``: not ``ok`` and never sent to a provider (the gateway said no: key, limits, bad
    request, shed, pacing, no route); ``errors``: not ``ok`` after an attempt went upstream (roll-ups keep the
    provider, ``''`` for a request that never had one, so the split needs no new column)."""
    start = hour_start(since)
    key_clause = " AND key_id = ?" if key is not None else ""
    args: tuple[Any, ...] = (start, key) if key is not None else (start,)
    rolled_group, raw_group = _ROLLED_GROUP[by], _raw_group(conn, by)
    with _snapshot(conn):
        upto = _watermark(conn)
        rolled = conn.execute(
            f"SELECT {rolled_group}, SUM(requests), SUM(CASE WHEN provider <> '' THEN errors ELSE 0 END), "  # noqa: S608
            "SUM(CASE WHEN provider = '' THEN errors ELSE 0 END), SUM(input_tokens), SUM(output_tokens), SUM(cost), "
            "SUM(cached_tokens), SUM(reported_prompt_tokens) "
            f"FROM usage_hourly WHERE hour >= ?{key_clause} GROUP BY {rolled_group}",
            args,
        ).fetchall()
        raw = conn.execute(
            f"SELECT {raw_group}, COUNT(*), "  # noqa: S608
            "SUM(CASE WHEN outcome <> 'ok' AND provider IS NOT NULL THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN outcome <> 'ok' AND provider IS NULL THEN 1 ELSE 0 END), "
            f"SUM(COALESCE(prompt_tokens, 0)), SUM(COALESCE(output_tokens, 0)), SUM(COALESCE(cost, 0)), {_CACHED} "
            f"FROM requests WHERE id > ? AND ts >= ?{key_clause} GROUP BY {raw_group}",
            (upto, *args),
        ).fetchall()
    return [*rolled, *raw]


def _name(group: Any, by: Dimension) -> str:
    if by == "day":
        return time.strftime("%Y-%m-%d", time.gmtime(float(group)))
    return str(group) or "-"


def usage(conn: StoreConn, *, since: float, by: Dimension = "key", key: str | None = None) -> list[dict[str, Any]]:
    """Requests, errors, refusals, tokens and cost per ``by`` group since ``hour_start(since)``, one dict per
    group: ``{"key": "team-a", "requests": …, "errors": …, "refused": …, "input_tokens": …, "output_tokens": …,
    "cost": …, "cached_tokens": …, "reported_prompt_tokens": …, "cache_hit_rate": …}``. ``errors`` failed after
    going upstream; ``refused`` were refused by the gateway (never sent); ``requests`` counts both.
    ``cached_tokens``: of the input tokens, those the provider served from its prompt cache;
    ``cache_hit_rate`` = ``cached_tokens`` ÷ ``reported_prompt_tokens`` (the input tokens of the requests whose
    provider said how many were cached), None when no request of the group reported it."""
    if by not in DIMENSIONS:
        raise ValueError(f"--by must be one of {', '.join(DIMENSIONS)}, got {by!r}")
    groups: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0.0, 0, 0])
    for group, requests, errors, refused, tokens_in, tokens_out, cost, cached, reported in _grouped(
        conn, since=since, by=by, key=key
    ):
        g = groups[_name(group, by)]
        g[0] += int(requests or 0)
        g[1] += int(errors or 0)
        g[2] += int(refused or 0)
        g[3] += int(tokens_in or 0)
        g[4] += int(tokens_out or 0)
        g[5] += float(cost or 0.0)
        g[6] += int(cached or 0)
        g[7] += int(reported or 0)
    return [
        {
            by: name,
            "requests": int(g[0]),
            "errors": int(g[1]),
            "refused": int(g[2]),
            "input_tokens": int(g[3]),
            "output_tokens": int(g[4]),
            "cost": round(g[5], 9),
            "cached_tokens": int(g[6]),
            "reported_prompt_tokens": int(g[7]),
            "cache_hit_rate": hit_rate(int(g[6]), int(g[7])),
        }
        for name, g in sorted(groups.items())
    ]


def hit_rate(cached: int, reported_prompt: int) -> float | None:
    """Cached ÷ prompt tokens over the requests that reported cached tokens (4 decimals); None: none did."""
    if reported_prompt <= 0:
        return None
    return round(min(1.0, max(0, cached) / reported_prompt), 4)


def spend(conn: StoreConn, key: str, *, since: float) -> tuple[int, float]:
    """Tokens (input + output) and cost of ``key`` since ``since`` (hour-aligned: a day or month start)."""
    tokens, cost = 0, 0.0
    for _, _, _, _, tokens_in, tokens_out, spent, _, _ in _grouped(conn, since=since, by="key", key=key):
        tokens += int(tokens_in or 0) + int(tokens_out or 0)
        cost += float(spent or 0.0)
    return tokens, cost
