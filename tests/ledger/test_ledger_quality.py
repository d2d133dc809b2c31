"""Answer-quality counts in the store (schema v10), on both backends: summed upserts, window reads with
Wilson intervals, and the leaderboard's quality column."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from tailgate.ledger.leaderboard import compute
from tailgate.ledger.quality import QualityCount, QualityTally, add_counts, hour_of, read_rates
from tailgate.ledger.samples import Sample
from tailgate.ledger.schema import MIGRATIONS, SCHEMA_VERSION
from tailgate.ledger.store import StoreConn, has_table
from tailgate.monitor.board import quality_cell
from tailgate.stats.shown import wilson

T0 = 1_700_000_000.0 - (1_700_000_000.0 % 3600)  # an hour start


def test_migration_10_adds_quality_counts(store: StoreConn) -> None:
    assert SCHEMA_VERSION >= 10
    assert MIGRATIONS[9].version == 10
    assert "quality_counts" in MIGRATIONS[9].description
    assert has_table(store, "quality_counts")


def test_counts_add_up_across_writers_and_hours(store: StoreConn) -> None:
    tally = QualityTally()
    for i in range(200):
        tally.add("p1", "m", "tool_args_invalid_json", hit=i % 10 == 0)
    tally.add("p1", "m", "empty_answer", hit=False, n=50)
    tally.add("p2", "m", "empty_answer", hit=True, n=3)
    first = tally.drain()
    assert tally.drain() == []
    assert add_counts(store, T0 + 10, first) == 3
    # A second replica writes the same hour: the counts are summed, not replaced.
    assert add_counts(store, T0 + 3599, [QualityCount("p1", "m", "tool_args_invalid_json", 100, 30)]) == 1
    # The next hour, and another model.
    add_counts(store, T0 + 3600, [QualityCount("p1", "m", "tool_args_invalid_json", 100, 0)])
    add_counts(store, T0 + 3600, [QualityCount("p1", "other", "tool_args_invalid_json", 7, 7)])
    assert add_counts(store, T0, [QualityCount("p1", "m", "json_invalid", 0, 0)]) == 0  # nothing checked

    (n,) = store.execute("SELECT COUNT(*) FROM quality_counts").fetchone()
    assert n == 5
    one_hour = read_rates(store, since=T0, until=T0 + 100)
    rate = one_hour[("p1", "m")]["tool_args_invalid_json"]
    assert (rate.checked, rate.hits) == (300, 50)
    both = read_rates(store, since=T0 + 5, until=T0 + 3600, model="m")  # since rounds down to its hour
    assert set(both) == {("p1", "m"), ("p2", "m")}
    rate = both[("p1", "m")]["tool_args_invalid_json"]
    assert (rate.checked, rate.hits) == (400, 50)
    low, high = wilson(50, 400)
    assert rate.interval_pct == pytest.approx((100 * low, 100 * high))
    assert rate.to_dict()["pct"] == pytest.approx(12.5)
    assert read_rates(store, since=T0 + 7200, until=T0 + 9000) == {}


def test_read_rates_on_a_store_before_v10() -> None:
    conn = sqlite3.connect(":memory:")
    assert read_rates(conn, since=0, until=1) == {}
    assert hour_of(T0 + 1234.5) == T0


def test_leaderboard_carries_quality_with_intervals(store: StoreConn) -> None:
    cols = [f.name for f in dataclasses.fields(Sample)]
    for provider in ("p1", "p2"):
        sample = Sample(T0 + 60, provider, "m", "long", 200, None, 100.5, 900.25, 50, 61.2, None)
        store.execute(
            f"INSERT INTO samples ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",  # noqa: S608
            list(dataclasses.astuple(sample)),
        )
    add_counts(
        store,
        T0 + 30,
        [
            QualityCount("p1", "m", "tool_args_invalid_json", 400, 40),
            QualityCount("p1", "m", "empty_answer", 900, 9),
            QualityCount("p2", "m", "empty_answer", 120, 0),
        ],
    )
    rows = {r.provider: r for r in compute(store, window_s=3600, now=T0 + 120)}
    q = rows["p1"].quality
    assert set(q) == {"tool_args_invalid_json", "empty_answer"}
    assert q["tool_args_invalid_json"]["pct"] == pytest.approx(10.0)
    assert q["tool_args_invalid_json"]["low_pct"] < 10.0 < q["tool_args_invalid_json"]["high_pct"]
    assert rows["p1"].to_dict()["quality"]["empty_answer"]["checked"] == 900
    assert quality_cell(rows["p1"]) == "tool JSON 10.0% [7.4–13.3] n=400"
    assert quality_cell(rows["p2"]) == "ok n=120"
    bare = compute(store, window_s=60, now=T0 + 3600 * 5)
    assert all(not r.quality for r in bare)


def test_quality_cell_withholds_below_the_rate_minimum() -> None:
    from tailgate.ledger.leaderboard import LeaderRow
    from tailgate.ledger.quality import QualityRate

    few = QualityRate("p", "m", "empty_answer", 3, 3).to_dict()
    many = QualityRate("p", "m", "tool_unknown_name", 50, 1).to_dict()
    assert quality_cell(LeaderRow("p", "m")) == "-"
    assert quality_cell(LeaderRow("p", "m", quality={"empty_answer": few})) == "n<5"
    # The 100 % of 3 answers is withheld; the 2 % of 50 is the worst shown.
    assert quality_cell(LeaderRow("p", "m", quality={"empty_answer": few, "tool_unknown_name": many})).startswith(
        "tool name 2.0% [0.4–"
    )


def test_retention_drops_quality_hours_with_the_usage_roll_ups(store: StoreConn) -> None:
    from tailgate.ledger.usage import retention

    add_counts(store, T0, [QualityCount("p", "m", "empty_answer", 10, 1)])
    add_counts(store, T0 + 10 * 86400, [QualityCount("p", "m", "empty_answer", 20, 2)])
    retention(store, now=T0 + 10 * 86400 + 60, raw_s=3600, rollup_s=5 * 86400)
    rows = store.execute("SELECT hour, checked FROM quality_counts").fetchall()
    assert [(float(h), int(c)) for h, c in rows] == [(T0 + 10 * 86400, 20)]
