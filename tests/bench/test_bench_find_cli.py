"""`tailgate bench --find-max / --find-limit / --goodput / --workload` from the command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import MockProcess
from tailgate.cli import main


def _bench(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["bench", "--no-preflight", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--find-max", "p90(ttft)<<1s"], "p90(ttft)<<1s"),
        (["--find-max", "p90(ttft)<1s", "--goodput", "ttft=1s"], "--goodput"),
        (["--find-max", "p90(ttft)<1s", "--find-start", "8", "--find-ceiling", "4"], "--find-start"),
        (["--find-max", "p90(ttft)<1s", "--workers", "2"], "--workers"),
        (["--goodput", "speed:1s"], "--goodput"),
        (["--find-max", "p90(ttft)<1s", "--rate", "5"], "--rate does not apply to --find-max --by concurrency"),
        (["--find-max", "p90(ttft)<1s", "--concurrency", "8"], "--concurrency does not apply to --find-max"),
        (["--find-max", "p90(e2e)<1s", "--by", "rate", "--concurrency", "8"], "--find-max --by rate"),
        (["--by", "rate", "--rate", "5"], "--by applies to --find-max only"),
    ],
)
def test_bad_search_options_are_usage_errors(args: list[str], needle: str) -> None:
    """A bad expression or range exits 2 with a message naming it, before anything is sent."""
    code, output = _bench("--base-url", "http://127.0.0.1:9/v1", "--model", "m", *args)
    assert code == 2, output
    assert needle in output


@pytest.mark.timeout(60)
def test_find_max_from_the_command_line(mock_process: Callable[..., MockProcess], tmp_path: Path) -> None:
    """A small search against a real `tailgate mock` process: answer, curve, goodput, HTML section."""
    mp = mock_process("--preset", "naive", "--port", "0", "--time-scale", "0.5")
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    code, output = _bench(
        "--base-url", mp.url, "--model", "m", "--find-max", "p90(ttft)<150ms", "--find-ceiling", "4",
        "--duration", "1.5s", "--warmup", "0.5s", "--max-tokens", "16", "--input-tokens", "24",
        "--goodput", "ttft:150ms", "--workload", "writing", "--out", str(out), "--html", str(html),
    )  # fmt: skip
    assert code == 0, output
    doc = json.loads(out.read_text())
    [cap] = doc["capacity"]
    assert cap["answer"] == 1  # one sequence at a time: a second user waits a whole answer
    assert cap["failed_at"] == 2
    assert "holds up to 1 concurrent request and fails at 2" in output
    assert all("goodput" in r for r in doc["runs"])
    assert doc["workload"]["name"] == "writing"
    assert "<h2>Capacity</h2>" in html.read_text()
