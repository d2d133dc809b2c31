"""Answer-quality counts in the store (table ``quality_counts``, schema version 10).

One row per UTC hour × provider × model × signal: how many answers the signal was *checked* on and how many
*hit* (showed the problem). The signals are ``tailgate.quality.signals``' names for live answers, plus
``canary_wrong`` for graded canaries; this module takes them as plain strings. Writers add counts (an
upsert that sums, so any number of replicas may write the same hour); readers sum a window and put a 95 %
Wilson interval on each rate (``stats.shown.wilson``).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from tailgate.ledger.store import Queryable, StoreConn, has_table
from tailgate.stats.shown import wilson

__all__ = ["CANARY_WRONG", "QualityCount", "QualityRate", "QualityTally", "add_counts", "read_rates"]

CANARY_WRONG = "canary_wrong"
"""The signal of a canary (accuracy task) graded wrong."""
HOUR_S = 3600.0

_UPSERT = (
    "INSERT INTO quality_counts (hour, provider, model, signal, checked, hits) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (hour, provider, model, signal) DO UPDATE SET "
    "checked = quality_counts.checked + excluded.checked, hits = quality_counts.hits + excluded.hits"
)


@dataclass(frozen=True, slots=True)
class QualityCount:
    """Counts of one signal of one provider × model, to be added to its hour."""

    provider: str
    model: str
    signal: str
    checked: int
    hits: int


@dataclass(frozen=True, slots=True)
class QualityRate:
    """One signal of one provider × model over a window: ``hits`` of ``checked``, the share and its interval."""

    provider: str
    model: str
    signal: str
    checked: int
    hits: int

    @property
    def pct(self) -> float:
        return 100.0 * self.hits / self.checked if self.checked else 0.0

    @property
    def interval_pct(self) -> tuple[float, float]:
        """The 95 % Wilson interval of ``pct``, in percent."""
        low, high = wilson(self.hits, self.checked)
        return 100.0 * low, 100.0 * high

    def to_dict(self) -> dict[str, float | int]:
        low, high = self.interval_pct
        return {"checked": self.checked, "hits": self.hits, "pct": self.pct, "low_pct": low, "high_pct": high}


class QualityTally:
    """Counts gathered in memory between two writes (one per process; not thread-safe)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str], list[int]] = {}

    def add(self, provider: str, model: str, signal: str, hit: bool, n: int = 1) -> None:
        cell = self._counts.setdefault((provider, model, signal), [0, 0])
        cell[0] += n
        cell[1] += n if hit else 0

    def drain(self) -> list[QualityCount]:
        """Everything counted since the last drain (and forget it)."""
        out = [QualityCount(p, m, s, c, h) for (p, m, s), (c, h) in sorted(self._counts.items())]
        self._counts.clear()
        return out


def hour_of(ts: float) -> float:
    return math.floor(ts / HOUR_S) * HOUR_S


def add_counts(conn: StoreConn | sqlite3.Connection, ts: float, counts: Iterable[QualityCount]) -> int:
    """Add ``counts`` to the hour of ``ts`` in one transaction; returns how many rows were written."""
    hour = hour_of(ts)
    rows = [(hour, c.provider, c.model, c.signal, c.checked, c.hits) for c in counts if c.checked > 0]
    if not rows:
        return 0
    store = conn if isinstance(conn, StoreConn) else StoreConn(conn, "sqlite")
    with store.transaction() as tx:
        tx.executemany(_UPSERT, rows)
    return len(rows)


def read_rates(
    conn: Queryable, *, since: float, until: float, model: str | None = None
) -> dict[tuple[str, str], dict[str, QualityRate]]:
    """(provider, model) → signal → its counts over the hours that start in ``[hour_of(since), until]``."""
    if not has_table(conn, "quality_counts"):
        return {}
    clause, args = (
        ("AND model = ? ", (hour_of(since), until, model)) if model is not None else ("", (hour_of(since), until))
    )
    rows = conn.execute(
        "SELECT provider, model, signal, SUM(checked), SUM(hits) FROM quality_counts "  # noqa: S608 - fixed clause
        f"WHERE hour >= ? AND hour <= ? {clause}GROUP BY provider, model, signal ORDER BY provider, model, signal",
        args,
    ).fetchall()
    out: dict[tuple[str, str], dict[str, QualityRate]] = {}
    for provider, mdl, signal, checked, hits in rows:
        out.setdefault((provider, mdl), {})[signal] = QualityRate(provider, mdl, signal, int(checked), int(hits))
    return out
