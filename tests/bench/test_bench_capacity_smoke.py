"""Smoke test of benchmarks/loadgen_capacity.py: a --quick run works and its numbers are sane.

Only correctness and the presence of numbers are asserted; the targets (>= 2,000 req/s from one
process, schedule lag P99 <= 1 ms at 1,000 req/s) are the full benchmark's business.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_support import run_quick

from _require import require_wrk


@pytest.mark.bench
@pytest.mark.timeout(120)
def test_loadgen_capacity_quick_run_is_correct(tmp_path: Path) -> None:
    require_wrk("loadgen_capacity.py compares against it")
    out = tmp_path / "loadgen_capacity.json"
    run_quick("loadgen_capacity.py", "--json", str(out), timeout=110)
    result = json.loads(out.read_text())
    assert result["correct"] is True
    assert result["enforced"] is False
    scenarios = result["scenarios"]
    assert set(scenarios) == {"nonstream", "stream", "open"}
    for name, sc in scenarios.items():
        failed = [c for c in sc["checks"] if not c["ok"]]
        assert not failed, f"{name}: {failed}"
        assert sc["errors"] == 0, name
    for name in ("nonstream", "stream"):
        sc = scenarios[name]
        assert sc["wrk"]["rps"] > 0, name
        assert sc["wrk"]["errors"] == 0, name
        assert set(sc["generator"]) == {"1", "2"}, name
        for workers, gen in sc["generator"].items():
            assert gen["rps"] > 0, (name, workers)
            assert gen["errors"] == 0, (name, workers)
            assert gen["run"]["requests"] == gen["run"]["successes"] > 0, (name, workers)
            assert sc["ratio"][workers] > 0, (name, workers)
    assert scenarios["nonstream"]["value"] == scenarios["nonstream"]["generator"]["1"]["rps"]
    open_loop = scenarios["open"]
    lag = open_loop["schedule_lag_ms"]
    assert lag["count"] > 0
    assert lag["p99"] is not None
    assert 0 <= lag["p50"] <= lag["p90"] <= lag["p95"] <= lag["p99"] <= lag["max"], lag  # late sends, ordered
    assert lag["mean"] <= lag["max"], lag
    assert open_loop["empty_schedule_lag_ms"]["count"] > 0
    assert open_loop["empty_schedule_timer_lag_ms"]["count"] > 0
    assert open_loop["achieved_rps"] > 0
    runs = open_loop["runs"]  # --quick: one open-loop run; the value judged is its P99
    assert [r["run"] for r in runs] == [1] == [open_loop["median_run"]]
    assert open_loop["value"] == runs[0]["schedule_lag_ms"]["p99"] == open_loop["p99_by_run"][0]
    two = open_loop["two_workers"]  # the same rate split over --workers 2
    assert two["schedule_lag_ms"]["count"] > 0
    assert two["achieved_rps"] > 0
