"""Smoke test of benchmarks/gateway_calls.py: a --quick run against this same tree counts calls per request in
both modes, with every request answered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_support import run_quick

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.bench
@pytest.mark.timeout(300)
def test_gateway_calls_quick_run_counts_both_trees(tmp_path: Path) -> None:
    """A baseline that is this tree is measured once (ratio exactly 1); the idle run is subtracted, once per tree:
    a request costs hundreds of calls, a stream of 20 chunks more than a plain answer."""
    out = tmp_path / "gateway_calls.json"
    run_quick("gateway_calls.py", "--baseline", str(SRC), "--json", str(out), timeout=280)
    result = json.loads(out.read_text())
    assert result["failed_requests"] == 0
    assert result["trees"]["before"] == result["trees"]["after"]
    modes = result["modes"]
    for mode in ("non-stream", "stream"):
        m = modes[mode]
        assert m["before"] == m["after"], mode  # one tree, one measurement
        assert m["after_over_before"] == 1.0, mode
        assert m["after"]["startup_calls"] == modes["non-stream"]["after"]["startup_calls"]  # one idle run
    plain = modes["non-stream"]["after"]["calls_per_request"]
    stream = modes["stream"]["after"]["calls_per_request"]
    # Measured 665-717 and 1,161-1,294 (docs/benchmarks.md). Start-up alone is ~690,000 calls, ~2,300 per request
    # of a quick run: a run that forgot to subtract it, or divided by the wrong count, falls outside these bounds.
    assert 300 <= plain <= 2000, plain
    assert plain + 100 <= stream <= 4 * plain, (plain, stream)  # 20 relayed chunks cost calls of their own
