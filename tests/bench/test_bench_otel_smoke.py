"""Smoke tests of the OpenTelemetry benchmarks: ``gateway_overhead.py --otel`` (export on vs off, a sink collector)
and ``otel_collector_down.py`` (the collector killed, then hanging, under load).

Only correctness and the presence of numbers are asserted: the CPU ratio and the latency ratios are the full runs'
business (docs/benchmarks.md); 1- and 5-second phases on a shared CI machine are too noisy to judge them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_support import run_quick

from _require import require_wrk


@pytest.mark.bench
@pytest.mark.timeout(200)
def test_gateway_overhead_otel_hop_exports_to_the_sink(tmp_path: Path) -> None:
    """``--otel``: the otel hop serves every request, its spans reach the sink collector, and the export on ÷ off
    CPU per request is reported as a target."""
    require_wrk("gateway_overhead.py drives the load with it")
    out = tmp_path / "overhead.json"
    run_quick(
        "gateway_overhead.py", "--otel", "--hops", "none", "--only", "nonstream-c50", "--json", str(out), timeout=180
    )
    result = json.loads(out.read_text())
    assert result["correct"] is True
    assert result["hops"] == ["direct", "floor", "tailgate", "otel"]
    sc = result["modes"]["nonstream-c50"]
    assert sc["hops"]["otel"]["requests"] > 0
    assert sc["hops"]["otel"]["errors"] == 0
    assert sc["vs_tailgate"]["otel"]["cpu_per_request_ratio"] > 0
    assert "otel_cpu" in sc["targets"]
    sink = result["otel_sink"]
    assert sink["trace_exports"] > 0
    assert sink["trace_bytes"] > 0
    assert result["ledgers"]["otel"]["ok_rows"] >= result["ledgers"]["otel"]["answered"] > 0


@pytest.mark.bench
@pytest.mark.slow  # ~45 s: five 5-second phases, a collector restarted twice
@pytest.mark.timeout(240)
def test_collector_down_costs_no_request_and_counts_what_it_dropped(tmp_path: Path) -> None:
    """Up, refused, up, hanging, up: 0 failed requests in every phase, dropped spans counted in each down phase,
    spans reach the collector again after it, and the latency ratios are reported."""
    require_wrk("otel_collector_down.py drives the load with it")
    out = tmp_path / "down.json"
    run_quick("otel_collector_down.py", "--json", str(out), timeout=220)
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
