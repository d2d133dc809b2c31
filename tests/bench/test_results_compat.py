"""The JSON files bench, scenario and the monitor's peak test write stay byte-compatible.

tests/*/fixtures/ hold files a real run wrote (tests/bench/fixtures/make_fixtures.py, against ``tailgate mock``).
Each is read back with today's reader and written again: the bytes must not move (the writers, the key order,
the number formatting). The reports rendered from them are deterministic and compared whole. A fresh run's
objects (their timings differ run to run) must have the fixtures' keys in the fixtures' order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tailgate.bench.document import dumps_document, load_document, write_csv
from tailgate.bench.report import render_html
from tailgate.bench.results import RunRecorder
from tailgate.scenario.document import check_document as check_scenario
from tailgate.scenario.document import write_json as write_scenario
from tailgate.scenario.report import render_html as scenario_html
from tailgate.scenario.report import render_markdown as scenario_markdown

TESTS = Path(__file__).resolve().parents[1]
BENCH = TESTS / "bench" / "fixtures"
SCENARIO = TESTS / "scenario" / "fixtures"
MONITOR = TESTS / "monitor" / "fixtures"
BENCH_FILES = ["closed", "open", "find_max", "find_limit"]


def shape(x: Any) -> Any:
    """The keys of every object, in order, recursively (list items one by one); values left out."""
    if isinstance(x, dict):
        return [(k, shape(v)) for k, v in x.items()]
    if isinstance(x, list):
        return [shape(v) for v in x]
    return None


@pytest.mark.parametrize("name", BENCH_FILES)
def test_bench_results_read_back_and_written_again_are_the_same_bytes(name: str) -> None:
    path = BENCH / f"{name}.json"
    assert dumps_document(load_document(path)) == path.read_text(encoding="utf-8")


def test_bench_csv_written_again_from_the_json_is_the_same_bytes(tmp_path: Path) -> None:
    write_csv(load_document(BENCH / "closed.json"), tmp_path / "r.csv")
    assert (tmp_path / "r.csv").read_bytes() == (BENCH / "closed.csv").read_bytes()


@pytest.mark.parametrize("name", ["closed", "open", "find_max"])
def test_bench_html_rendered_from_the_json_is_the_same(name: str) -> None:
    assert render_html(load_document(BENCH / f"{name}.json")) == (BENCH / f"{name}.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", BENCH_FILES)
def test_a_run_object_rebuilt_by_the_recorder_has_the_same_keys_and_counts(name: str) -> None:
    """RunRecorder.from_dict → to_dict keeps every key in its place and every count; the steady-state rate of
    the limiter is computed from send times a file does not keep, so its values are the one thing left out."""
    for run in json.loads((BENCH / f"{name}.json").read_text(encoding="utf-8"))["runs"]:
        again = RunRecorder.from_dict(run).to_dict()
        if "input_cost" in run:  # added by the command from --price, after the recorder
            again["input_cost"] = run["input_cost"]
        assert shape(again) == shape(run)
        for key in ("requests", "successes", "errors", "metrics", "timeline", "histograms", "tokens", "cache"):
            assert again[key] == run[key], key


def test_scenario_results_read_back_and_written_again_are_the_same_bytes(tmp_path: Path) -> None:
    path = SCENARIO / "tiny.json"
    doc = check_scenario(json.loads(path.read_text(encoding="utf-8")))
    write_scenario(doc, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_scenario_reports_rendered_from_the_json_are_the_same() -> None:
    doc = check_scenario(json.loads((SCENARIO / "tiny.json").read_text(encoding="utf-8")))
    assert scenario_html(doc) == (SCENARIO / "tiny.html").read_text(encoding="utf-8")
    assert scenario_markdown(doc) == (SCENARIO / "tiny.md").read_text(encoding="utf-8")


def test_peak_profile_levels_are_the_stored_detail() -> None:
    """The monitor stores a profile's ``levels`` as the load test's ``detail`` JSON; a row reads them back."""
    from tailgate.ledger.loadtests import LoadTest

    result = json.loads((MONITOR / "peak_profile.json").read_text(encoding="utf-8"))
    detail = json.dumps(result["levels"])
    row = LoadTest(0.0, "p", "m", "x", 1, 0, None, None, None, None, None, None, None, detail)
    assert row.levels() == result["levels"]
