"""The monitor's scheduled peak-hour load test: when it runs, what it stores, where the leaderboard shows it."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from contextlib import closing
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from conftest import SimFactory
from tailgate.bench.profile import ProfileResult, run_profile
from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.ledger import open_db
from tailgate.ledger.loadtests import LoadTest, insert_load_test, read_load_tests
from tailgate.ledger.samples import Sample, insert_samples
from tailgate.monitor.board import BoardOptions, leaderboard_main
from tailgate.monitor.peak import PeakProfile, PeakSchedule, parse_days, peak_loop, requests_cap, run_peak
from tailgate.monitor.runner import targets_from_config

SHANGHAI = ZoneInfo("Asia/Shanghai")


def test_peak_schedule_is_local_time_on_weekdays() -> None:
    """11:00 on weekdays: Wednesday 09:00 → the same day; Friday 11:30 → Monday 11:00 (local time)."""
    s = PeakSchedule.parse("11:00", "mon-fri", SHANGHAI)
    wed = dt.datetime(2026, 12, 2, 9, 0, tzinfo=SHANGHAI)
    assert s.next_after(wed) == dt.datetime(2026, 12, 2, 11, 0, tzinfo=SHANGHAI)
    fri = dt.datetime(2026, 12, 4, 11, 30, tzinfo=SHANGHAI)
    assert s.next_after(fri) == dt.datetime(2026, 12, 7, 11, 0, tzinfo=SHANGHAI)
    utc_now = dt.datetime(2026, 12, 2, 2, 59, tzinfo=dt.UTC)  # 10:59 in Shanghai
    assert s.seconds_until(utc_now) == 60.0
    assert parse_days("daily") == frozenset(range(7))
    assert parse_days("sat,sun") == frozenset({5, 6})
    assert parse_days("fri-mon") == frozenset({4, 5, 6, 0})
    for bad_at in ("25:00", "11", "noon"):
        with pytest.raises(ValueError, match="--peak-at"):
            PeakSchedule.parse(bad_at)
    with pytest.raises(ValueError, match="--peak-days"):
        parse_days("weekdays")


def _config(providers: dict[str, dict[str, Any]], routes: list[tuple[str, str]]) -> GatewayConfig:
    data = {
        "providers": providers,
        "models": {"deepseek-v3.2": {"routes": [{"provider": p, "model": m} for p, m in routes]}},
    }
    return validate_data(data, GatewayConfig, "test-config")


@pytest.mark.timeout(60)
async def test_peak_test_stores_levels_decay_and_capacity(sim: SimFactory, tmp_path: Path) -> None:
    """A scheduled test runs the bench profile against each pair within its rpm budget and stores one row each;
    the leaderboard shows the row in its own columns (table and JSON)."""
    slow = await sim("naive", time_scale=0.5)  # one sequence at a time: capacity 1 for a tight TTFT
    fast = await sim("instant")
    cfg = _config(
        {"one": {"base_url": slow.url}, "paced": {"base_url": fast.url, "limits": {"rpm": 1200}}},
        [("one", "m1"), ("paced", "m2")],
    )
    providers, targets = resolve_providers(cfg), targets_from_config(cfg)
    profile = PeakProfile(levels=(1, 2), duration_s=1.5, warmup_s=0.5, max_tokens=16, find_max=("p90(ttft)<150ms",))
    assert requests_cap(providers["paced"], profile) == 40
    assert requests_cap(providers["one"], profile) is None
    db = tmp_path / "m.db"

    async def runner(*args: Any, **kw: Any) -> ProfileResult:
        kw["find_max_expr"] = kw["find_max_expr"] if args[1] == "m1" else ()
        return await run_profile(*args, **kw, ceiling=8)

    rows = await run_peak(providers, targets, profile, runner, db, wall=lambda: 1000.0)
    assert [(r.provider, r.model) for r in rows] == [("one", "m1"), ("paced", "m2")]
    one, paced = rows
    assert one.capacity == 1
    assert one.capacity_by == "concurrency"
    assert one.decay_p99_e2e is not None
    assert one.decay_p99_e2e > 1.5  # two users on one slot: the second waits a whole answer
    assert [lv["concurrency"] for lv in one.levels()] == [1, 2]
    assert all(lv["requests"] <= 40 for lv in paced.levels())  # within the provider's rpm budget
    assert paced.errors == 0
    assert paced.ttft_p99_ms is not None
    with closing(open_db(db)) as conn:
        assert read_load_tests(conn, since=0, until=2000) == rows
        insert_samples(conn, [Sample(1000.0, "one", "m1", "short", 200, None, 10.0, 20.0, 5, 100.0, None)])
    lines: list[str] = []
    tables: list[Any] = []
    assert leaderboard_main(BoardOptions(db=db, now=1500.0, window_s=3600), lines.append, tables.append) == 0
    text = tables[0].render(300)
    assert "capacity" in text
    assert "decay" in text
    lines.clear()
    assert leaderboard_main(BoardOptions(db=db, now=1500.0, window_s=3600, as_json=True), lines.append, print) == 0
    doc = json.loads(lines[0])
    [row] = doc["rows"]
    assert row["peak"]["capacity"] == 1
    assert row["peak"]["levels"][0]["concurrency"] == 1


async def test_peak_loop_waits_for_the_time_then_runs(tmp_path: Path) -> None:
    """The loop sleeps until the scheduled moment, runs the test, and stops cleanly when asked."""
    stop = asyncio.Event()
    ran: list[float] = []
    base = dt.datetime(2026, 12, 2, 10, 59, 59, 900_000, tzinfo=SHANGHAI)
    started = asyncio.get_running_loop().time()

    def now() -> dt.datetime:
        return base + dt.timedelta(seconds=asyncio.get_running_loop().time() - started)

    async def run() -> list[LoadTest]:
        ran.append(asyncio.get_running_loop().time() - started)
        stop.set()
        return [LoadTest(1.0, "p", "m", "c=1", 10, 0, 1.0, 2.0, 3.0, 4.0, 1.5, 8.0, "concurrency")]

    echoed: list[str] = []
    await asyncio.wait_for(
        peak_loop(stop, PeakSchedule.parse("11:00", "daily", SHANGHAI), run, echoed.append, now=now), 5
    )
    assert len(ran) == 1
    assert 0.09 <= ran[0] < 1.0
    assert any("peak-hour load test due 2026-12-02T11:00" in e for e in echoed)
    assert any("capacity 8 concurrency" in e for e in echoed)  # whole numbers, no raw floats


def test_load_tests_table_is_a_migration(tmp_path: Path) -> None:
    """The table comes with schema version 3 and round-trips its rows."""
    with closing(open_db(tmp_path / "x.db")) as conn:
        row = LoadTest(5.0, "p", "m", "c=1,10", 100, 1, 900.0, 1200.0, 3000.0, 4000.0, 1.3, None, None, "[]")
        insert_load_test(conn, row)
        assert read_load_tests(conn, since=0, until=10) == [row]
        assert row.levels() == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--peak-at", "25:00"], "--peak-at"),
        (["--peak-at", "11:00", "--peak-days", "weekdays"], "--peak-days"),
        (["--peak-at", "11:00", "--peak-levels", "1,x"], "--peak"),
        (["--peak-at", "11:00", "--peak-find-max", "p90(ttft)<<1s"], "p90(ttft)<<1s"),
        (["--peak-at", "11:00", "--peak-duration", "0s"], "--peak-duration"),
    ],
)
def test_bad_peak_options_exit_2_naming_the_option(tmp_path: Path, args: list[str], needle: str) -> None:
    """A bad --peak-* value stops the command with exit 2 and a message naming it."""
    from click.testing import CliRunner

    from tailgate.cli import main

    result = CliRunner().invoke(main, ["monitor", "--config", str(tmp_path / "none.yaml"), *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output


def test_the_peak_log_line_has_no_raw_values_and_withholds_small_samples() -> None:
    """The stored test's log line: seconds to 2 decimals, no 'None', P99 and decay withheld below n=20."""
    from tailgate.monitor.peak import peak_line

    levels = json.dumps([{"requests": 9, "errors": 0}, {"requests": 9, "errors": 0}])
    row = LoadTest(1.0, "p", "m", "c=1,4", 18, 0, 1234.5678, 2345.6789, 3.0, 4.0, 1.5, None, None, levels)
    line = peak_line(row)
    assert "None" not in line
    assert "P90 1.23 s" in line
    assert "P99 n<20 s" not in line
    assert "P99 n<20" in line
    assert "(n=9)" in line
    assert "capacity not searched" in line
    assert "decay (P99 E2E, highest ÷ lowest level) n<20" in line
