"""Options that do not apply to a mode are refused naming both; bad durations name the flag and the forms."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tailgate.bench.report import _when
from tailgate.cli import main

URL = ["bench", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--no-preflight"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--find-limit", "--concurrency", "4"], "--concurrency does not apply to --find-limit"),
        (["--find-limit", "--rate", "10"], "--rate does not apply to --find-limit"),
        (["--find-limit", "--requests", "100"], "--requests does not apply to --find-limit"),
        (["--find-limit", "--workers", "2"], "--workers does not apply to --find-limit"),
        (["--find-max", "p90(ttft)<1s", "--stages", "10s:5"], "--stages does not apply to --find-max"),
        (["--find-start", "5"], "--find-start applies to --find-max or --find-limit only"),
        (["--limit-cap", "100"], "--limit-cap applies to --find-limit only"),
        (["--find-repeats", "5"], "--find-repeats applies to --find-max only"),
        (["--arrival", "poisson", "--concurrency", "2"], "--arrival poisson applies to an open loop"),
        (["--time-scale", "0.5"], "--time-scale applies to --replay only"),
        (
            ["--duration", "1week"],
            "--duration '1week': not a duration; use a number of seconds, or units ms, s, m, h, d",
        ),
        (["--warmup", "x"], "--warmup 'x': not a duration"),
        (["--stages", "1week:5"], "--stages: '1week' in '1week:5' is not a duration (a number of seconds, or units"),
        (["--rate", "5", "--goodput", "ttft:1week"], "--goodput: '1week' in 'ttft:1week' is not a time (a bare"),
    ],
)
def test_inapplicable_or_bad_options_exit_2_naming_them(args: list[str], message: str) -> None:
    """Nothing is silently ignored: each is a usage error (exit 2) whose message names the flags involved."""
    result = CliRunner().invoke(main, [*URL, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["leaderboard", "--window", "1week"], "--window '1week': not a duration; use a number of seconds"),
        (["usage", "--since", "1w"], "--since '1w': not a duration"),
        (["leaderboard", "--columns", "p99,bogus"], "--columns: unknown column 'p99', 'bogus'; choose from provider"),
        (["leaderboard", "--wide", "--columns", "n"], "--wide shows every column; --columns picks some"),
    ],
)
def test_window_and_column_errors_name_the_flag_and_the_forms(command: list[str], message: str) -> None:
    """--window / --since say which forms they take (h and d included); --columns lists the names."""
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2, result.output
    assert message in result.output
    if "not a duration" in message:
        assert "2h" in result.output
        assert "7d" in result.output


def test_the_html_report_shows_a_readable_start_time() -> None:
    """The report's header shows the start as a UTC date and time, not a raw Unix epoch."""
    assert _when(1796418336.4498844) == "2026-12-04 21:05:36 UTC"
    assert _when(1e300) == "1e+300"  # out of range: the number as it is


def test_accuracy_is_shown_with_its_wilson_interval_and_task_count() -> None:
    """12 of 14 right reads 86 % with its 95 % Wilson interval; fewer than 5 tasks give no percentage."""
    from tailgate.bench.schema import Accuracy
    from tailgate.bench.summary import accuracy_cell

    assert accuracy_cell(Accuracy(right=12, total=14, pct=85.714)) == "86% [60–96] n=14"
    assert accuracy_cell(Accuracy(right=3, total=4, pct=75.0)) == "n<5"
    assert accuracy_cell(None) == "-"
