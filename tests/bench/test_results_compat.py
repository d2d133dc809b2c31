"""The JSON files bench, scenario and the monitor's peak test write stay byte-compatible.

tests/*/fixtures/ hold files a real run wrote (tests/bench/fixtures/make_fixtures.py, against ``tailgate mock``).
Each is read back with today's reader and written again: the bytes must not move (the writers, the key order,
the number formatting). The reports rendered from them are deterministic and compared whole. A fresh run's
objects (their timings differ run to run) must have the fixtures' keys in the fixtures' order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conftest import MockProcess
from tailgate.bench.document import dumps_document, load_document, write_csv
from tailgate.bench.profile import ProfileResult
from tailgate.bench.report import render_html
from tailgate.bench.results import RunRecorder
from tailgate.bench.schema import BenchDocument, Run, from_json_obj, to_json_obj
from tailgate.cli import main
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
    """A file written before the typed results reads as a BenchDocument and writes back byte for byte."""
    path = BENCH / f"{name}.json"
    doc = load_document(path)
    assert isinstance(doc, BenchDocument)
    assert all(isinstance(r, Run) for r in doc.runs)
    assert dumps_document(doc) == path.read_text(encoding="utf-8")


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
        again = RunRecorder.from_run(from_json_obj(run, Run)).to_dict()
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


def test_peak_profile_read_back_gives_the_same_stored_detail() -> None:
    """A profile result written before the types, read as a ProfileResult: the ``detail`` text the monitor stores
    (``load_tests.detail``) is byte for byte what it stored then, and the result's JSON is the file's."""
    text = (MONITOR / "peak_profile.json").read_text(encoding="utf-8")
    data = json.loads(text)
    result = from_json_obj(data, ProfileResult)
    assert result.detail() == json.dumps(data["levels"])
    assert json.dumps(to_json_obj(result), indent=2) + "\n" == text
    assert result.capacity == data["capacity"]
    assert [lv.concurrency for lv in result.levels] == [1, 2]


def keys(x: Any) -> Any:
    """The keys of every object in order, recursively; a list by its first item (lengths vary run to run)."""
    if isinstance(x, dict):
        return [(k, keys(v)) for k, v in x.items()]
    if isinstance(x, list):
        return [keys(x[0])] if x else []
    return None


@pytest.mark.timeout(60)
def test_a_fresh_run_writes_the_keys_of_the_files_written_before(
    mock_process: Callable[..., MockProcess], tmp_path: Path
) -> None:
    """The new writers, end to end (recorder → document → JSON): a real run against ``tailgate mock`` with the
    options the fixture was made with has the fixture's keys in the fixture's order (values are timings)."""
    mp = mock_process("--preset", "provider-a", "--port", "0", "--time-scale", "0.05", "--seed", "7")
    out = tmp_path / "r.json"
    args = ["--base-url", mp.url, "--model", "m", "--duration", "1s", "--warmup", "0.2s", "--max-tokens", "8"]
    args += ["--seed", "7", "--concurrency", "1,2", "--goodput", "ttft:1s,e2e:5s", "--threshold", "p90(e2e)<5s"]
    args += ["--threshold", "error_rate<1%", "--price", "input=2,cached_input=0.2", "--out", str(out)]
    result = CliRunner().invoke(main, ["bench", *args])
    assert result.exit_code == 0, result.output
    fresh = json.loads(out.read_text(encoding="utf-8"))
    before = json.loads((BENCH / "closed.json").read_text(encoding="utf-8"))
    assert keys(fresh) == keys(before)
    assert [keys(r) for r in fresh["runs"]] == [keys(r) for r in before["runs"]]
