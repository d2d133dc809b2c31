"""Hourly roll-ups of the gateway's per-minute traffic aggregates, so long leaderboard windows stay fast.

A week of ``traffic_minutes`` is ~10^5 rows per provider × model pair and worker, each with two JSON
histograms (~40 µs each to parse and merge): a 7-day leaderboard spent seconds there. ``rollup_traffic``
merges every minute row not yet counted (by id, like the request roll-up: a late row from a replayed
spool still lands in its hour) into ``traffic_hours`` — one row per hour × provider × model, all workers
merged — and moves the ``traffic`` watermark, in one transaction. ``read_window`` gives the leaderboard
the rows of a window: whole hours from ``traffic_hours``, the window's first partial hour and every row
above the watermark from ``traffic_minutes``, in one snapshot — the same numbers as reading the minutes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields

from tailgate.ledger.samples import TrafficMinute
from tailgate.ledger.store import Queryable, StoreConn, dialect_of, has_table
from tailgate.stats import LatencyHistogram

__all__ = ["read_window", "rollup_traffic"]

HOUR = 3600.0
_COLUMNS = tuple(f.name for f in fields(TrafficMinute))
_HOUR_COLUMNS = ("hour", *_COLUMNS[1:])
_CHUNK = 5_000
_SELECT_HOUR = f"SELECT {', '.join(_HOUR_COLUMNS)} FROM traffic_hours WHERE hour = ? AND provider = ? AND model = ?"  # noqa: S608


def _id(conn: Queryable) -> str:
    return "id" if dialect_of(conn) == "postgres" else "rowid"


def _hist(text: object) -> LatencyHistogram | None:
    if not text:
        return None
    try:
        return LatencyHistogram.from_dict(json.loads(str(text)))
    except ValueError:  # a damaged row loses its latencies, not the roll-up
        return None


class _Hour:
    """One hour × provider × model being merged; histograms stay objects until written."""

    __slots__ = ("e2e", "sums", "ttft")

    def __init__(self) -> None:
        self.sums = [0, 0, 0, 0.0, 0]  # requests, errors, output_tokens, tok_s_sum, tok_s_n
        self.ttft: LatencyHistogram | None = None
        self.e2e: LatencyHistogram | None = None

    def add(self, row: tuple[object, ...]) -> None:
        """``row``: the columns of a minute (or an hour) row from ``minute``/``hour`` on."""
        for i in range(5):
            self.sums[i] += row[3 + i]  # type: ignore[operator]
        for attr, text in (("ttft", row[8]), ("e2e", row[9])):
            h = _hist(text)
            if h is None:
                continue
            acc = getattr(self, attr)
            if acc is None:
                setattr(self, attr, h)
            elif acc.unit == h.unit:
                acc.merge(h)

    def row(self, key: tuple[float, str, str]) -> tuple[object, ...]:
        def text(h: LatencyHistogram | None) -> str | None:
            return json.dumps(h.to_dict(), separators=(",", ":")) if h is not None and h.count else None

        return (*key, *self.sums, text(self.ttft), text(self.e2e))


def rollup_traffic(conn: StoreConn, *, max_rows: int | None = None) -> int:
    """Merge not-yet-counted ``traffic_minutes`` rows into ``traffic_hours``; return rows merged.

    In transactions of ``_CHUNK`` rows (the store's write lock is held briefly); ``max_rows`` stops after
    about that many, so a big first roll-up is spread over several maintenance ticks."""
    total = 0
    idc = _id(conn)
    while max_rows is None or total < max_rows:
        if conn.dialect == "postgres":
            with conn.transaction():
                conn.execute("LOCK TABLE traffic_minutes IN SHARE MODE")  # inserts in flight commit first
                top = int(conn.execute("SELECT COALESCE(MAX(id), 0) FROM traffic_minutes").fetchone()[0])
        with conn.transaction():
            lock = " FOR UPDATE" if conn.dialect == "postgres" else ""
            old = int(conn.execute(f"SELECT upto FROM rollup_state WHERE name = 'traffic'{lock}").fetchone()[0])  # noqa: S608
            if conn.dialect == "sqlite":
                top = int(conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM traffic_minutes").fetchone()[0])
            if top <= old:
                return total
            upto = min(top, old + _CHUNK)
            rows = conn.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM traffic_minutes WHERE {idc} > ? AND {idc} <= ?",  # noqa: S608
                (old, upto),
            ).fetchall()
            hours: dict[tuple[float, str, str], _Hour] = {}
            for r in rows:
                key = (math.floor(r[0] / HOUR) * HOUR, r[1], r[2])
                acc = hours.get(key)
                if acc is None:
                    acc = hours[key] = _Hour()
                acc.add(r)
            marks = ", ".join("?" * len(_HOUR_COLUMNS))
            for key, acc in hours.items():
                found = conn.execute(_SELECT_HOUR, key).fetchone()
                if found is not None:
                    acc.add(tuple(found))
                    conn.execute("DELETE FROM traffic_hours WHERE hour = ? AND provider = ? AND model = ?", key)
                conn.execute(f"INSERT INTO traffic_hours ({', '.join(_HOUR_COLUMNS)}) VALUES ({marks})", acc.row(key))  # noqa: S608
            conn.execute("UPDATE rollup_state SET upto = ? WHERE name = 'traffic'", (upto,))
            total += len(rows)
        if upto == top:
            return total
    return total


@contextmanager
def _snapshot(conn: Queryable) -> Iterator[None]:
    if dialect_of(conn) == "postgres":
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    else:
        conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def read_window(conn: Queryable, *, since: float, until: float, model: str | None = None) -> list[TrafficMinute]:
    """Traffic rows for ``since <= time <= until``: hourly roll-ups where whole hours are rolled up,
    minute rows elsewhere (each hourly row comes back as a TrafficMinute whose ``minute`` is the hour)."""
    first_full = math.ceil(since / HOUR) * HOUR  # whole hours in [first_full, last_start) come from the roll-up
    last_start = math.floor(until / HOUR) * HOUR
    idc = _id(conn)
    model_clause = " AND model = ?" if model is not None else ""
    extra: tuple[object, ...] = (model,) if model is not None else ()
    if not has_table(conn, "traffic_hours"):
        from tailgate.ledger.samples import read_traffic

        return read_traffic(conn, since=since, until=until, model=model)
    with _snapshot(conn):
        upto = int(conn.execute("SELECT upto FROM rollup_state WHERE name = 'traffic'").fetchone()[0])
        hours = conn.execute(
            f"SELECT {', '.join(_HOUR_COLUMNS)} FROM traffic_hours WHERE hour >= ? AND hour < ?{model_clause}",  # noqa: S608
            (first_full, last_start, *extra),
        ).fetchall()
        minutes = conn.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM traffic_minutes WHERE minute >= ? AND minute <= ?{model_clause} "  # noqa: S608
            f"AND (minute < ? OR minute >= ? OR {idc} > ?) ORDER BY minute, {idc}",
            (since, until, *extra, first_full, last_start, upto),
        ).fetchall()
    return [TrafficMinute(*r) for r in (*hours, *minutes)]
