"""The monitor's scheduled peak-hour load tests in the store (table ``load_tests``, schema version 4).

One :class:`LoadTest` row per provider × model per scheduled test; ``detail`` keeps every level's numbers
as JSON. Written by the monitor (``--peak-at``), read by the leaderboard (its peak columns) and tests.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import astuple, dataclass, fields
from typing import Any

from tailgate.ledger.store import Queryable

__all__ = ["LoadTest", "insert_load_test", "latest_load_tests", "read_load_tests"]


@dataclass(frozen=True, slots=True)
class LoadTest:
    """One scheduled load test of one provider × model (field order = column order, without ``id``)."""

    ts: float
    provider: str
    model: str
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
    detail: str | None = None

    def levels(self) -> list[dict[str, Any]]:
        """The per-level numbers kept in ``detail``."""
        return list(json.loads(self.detail)) if self.detail else []


_COLUMNS = ", ".join(f.name for f in fields(LoadTest))
# Column names come from the dataclass, never from input: the f-strings build fixed statements.
_INSERT = f"INSERT INTO load_tests ({_COLUMNS}) VALUES ({', '.join('?' for _ in fields(LoadTest))})"  # noqa: S608
_SELECT = f"SELECT {_COLUMNS} FROM load_tests WHERE ts >= ? AND ts < ? ORDER BY ts, id"  # noqa: S608


def insert_load_test(conn: sqlite3.Connection, row: LoadTest) -> None:
    """Write one row in its own transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_INSERT, astuple(row))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def read_load_tests(conn: Queryable, *, since: float, until: float) -> list[LoadTest]:
    """Rows with ``since <= ts < until``, oldest first."""
    rows = conn.execute(_SELECT, (since, until)).fetchall()
    return [LoadTest(*r) for r in rows]


def latest_load_tests(conn: Queryable, *, since: float, until: float) -> dict[tuple[str, str], LoadTest]:
    """The newest row per (provider, model) in the window."""
    out: dict[tuple[str, str], LoadTest] = {}
    for row in read_load_tests(conn, since=since, until=until):
        out[(row.provider, row.model)] = row
    return out
