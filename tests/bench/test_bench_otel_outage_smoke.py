"""Smoke test of ``otel_collector_outage.py`` (the collector killed, then hanging, under load); ``gateway_overhead.py
--otel`` is smoke-tested with the other hops (test_bench_gateway_smoke.py).

Only correctness and the presence of numbers are asserted: the latency ratios are the full run's business
(docs/benchmarks.md); 5-second phases on a shared CI machine are too noisy to judge them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_support import run_quick

from _require import require_wrk


@pytest.mark.bench
@pytest.mark.slow  # ~45 s: five 5-second phases, a collector restarted twice
@pytest.mark.timeout(240)
def test_collector_down_costs_no_request_and_counts_what_it_dropped(tmp_path: Path) -> None:
    """Up, refused, up, hanging, up: 0 failed requests in every phase, dropped spans counted in each down phase,
    spans reach the collector again after it, and the latency ratios are reported."""
    require_wrk("otel_collector_outage.py drives the load with it")
    out = tmp_path / "down.json"
    run_quick("otel_collector_outage.py", "--json", str(out), timeout=220)
    result = json.loads(out.read_text())
    assert result["correct"] is True, [c for c in result["checks"] if not c["ok"]]
    names = [p["phase"] for p in result["phases"]]
    assert names == ["up", "down (refuse)", "up after refuse", "down (blackhole)", "up after blackhole"]
    for phase in result["phases"]:
        assert phase["requests"] > 0, phase
        assert phase["errors"] == 0, phase
    for phase in result["phases"][1::2]:
        assert phase["spans_dropped"] > 0, phase
        assert phase["p50_ratio"] is not None
        assert phase["p90_ratio"] is not None
    for phase in result["phases"][0::2]:
        assert phase["spans_received"] > 0, phase
