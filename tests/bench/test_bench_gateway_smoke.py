"""Smoke test of benchmarks/gateway_overhead.py: a --quick run works and every number it needs exists.

Only correctness and the presence of numbers are asserted; the overhead targets are the full
benchmark's business (1-second runs on a shared CI machine are too noisy to judge them). The extra hops
that need nothing installed (``--workers 2``, Redis state) run in the same run, beside the three the first
part checks (one sim, one floor, one start-up, not two); LiteLLM's hop needs its own venv (a minute of pip)
and is left to the full benchmark.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench_support import run_quick

from _require import require_redis_server, require_wrk

HOPS = ("direct", "floor", "tailgate")


def _run(tmp_path: Path, *args: str) -> dict[str, Any]:
    require_wrk("gateway_overhead.py drives the load with it")
    out = tmp_path / "gateway_overhead.json"
    run_quick("gateway_overhead.py", "--json", str(out), *args, timeout=240)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.bench
@pytest.mark.timeout(270)
def test_gateway_overhead_quick_run_is_correct(tmp_path: Path) -> None:
    """Every mode and the RSS phase produce numbers for direct, floor and tailgate, with no error; in the same
    run ``--workers 2`` (both workers serving, CPU summed over both), Redis state and OpenTelemetry export on
    (``--otel``: spans reach the sink collector) run as hops of their own."""
    result = _run(tmp_path, "--hops", "workers2,redis", "--otel")
    assert result["correct"] is True
    failed = [c for c in result["checks"] if not c["ok"]]
    assert not failed, failed
    modes = result["modes"]
    assert set(modes) == {"nonstream-c1", "nonstream-c50", "stream-c1", "stream-c50"}
    for name, sc in modes.items():
        assert sc["errors"] == 0, name
        for hop in HOPS:
            h = sc["hops"][hop]
            assert h["rps"] > 0, (name, hop)
            assert h["requests"] > 0, (name, hop)
            assert h["p50_ms"] > 0, (name, hop)
            assert h["p99_ms"] >= h["p50_ms"], (name, hop)
            assert h["errors"] == 0, (name, hop)
        assert sc["rps_ratio"] > 0, name
        assert "rps_ratio" in sc["targets"], name
        if sc["connections"] == 1:
            assert {"added_p50", "added_p99"} <= set(sc["targets"]), name
    rss = result["rss"]
    assert rss["requests"] >= 5000
    assert rss["errors"] == 0
    assert rss["start_kib"]["VmRSS"] > 0  # /proc/PID/status fields, in KiB
    assert rss["end_kib"]["VmRSS"] > 0
    assert rss["growth"] is not None
    ledger = result["ledger"]
    assert ledger["dropped"] == 0
    assert ledger["ok_rows"] >= ledger["answered"] > 0

    _check_workers_and_redis(result)
    _check_otel(result)


def _check_otel(result: dict[str, Any]) -> None:
    """The otel hop at c=50: every request served, its spans at the sink, export on ÷ off CPU reported as a target."""
    for mode in ("nonstream-c50", "stream-c50"):
        sc = result["modes"][mode]
        assert sc["hops"]["otel"]["requests"] > 0, mode
        assert sc["hops"]["otel"]["errors"] == 0, mode
        assert sc["vs_tailgate"]["otel"]["cpu_per_request_ratio"] > 0, mode
        assert "otel_cpu" in sc["targets"], mode
    assert "otel" not in result["modes"]["nonstream-c1"]["hops"]
    sink = result["otel_sink"]
    assert sink["trace_exports"] > 0
    assert sink["trace_bytes"] > 0
    ledger = result["ledgers"]["otel"]
    assert ledger["ok_rows"] >= ledger["answered"] > 0


def _check_workers_and_redis(result: dict[str, Any]) -> None:
    """The extra hops: ``workers2`` in the c=50 modes (at one connection one worker serves it all), ``redis`` in
    every mode, each with requests, no error, its CPU and its own ledger."""
    if "redis" in result["skipped_hops"]:
        require_redis_server()  # skips here (the rest is checked above), fails under CI=true
    assert result["hops"] == [*HOPS, "workers2", "redis", "otel"]
    for mode, hops in (("nonstream-c50", {"workers2", "redis"}), ("stream-c50", {"workers2", "redis"})):
        sc = result["modes"][mode]
        assert set(sc["hops"]) == {*HOPS, *hops, "otel"}, mode
        for hop in hops:
            h = sc["hops"][hop]
            assert h["requests"] > 0, (mode, hop)
            assert h["errors"] == 0, (mode, hop)
            assert h["cpu_us_per_request"] > 0, (mode, hop)
            assert sc["vs_tailgate"][hop]["rps_ratio"] > 0, (mode, hop)
            assert hop in sc["added_p50_ms"], (mode, hop)
        assert sc["hops"]["workers2"]["processes"] >= 2, mode  # the parent and its spawned worker, CPU summed
        assert sc["hops"]["redis"]["helper_cpu"] is not None, mode  # the redis-server's CPU, counted apart
    for hop in ("workers2", "redis"):
        ledger = result["ledgers"][hop]
        assert ledger["dropped"] == 0, hop
        assert ledger["ok_rows"] >= ledger["answered"] > 0, hop
    state = result["redis_state"]
    assert state["redis_commands"] > 0  # the redis hop really used Redis
    assert state["script_calls_per_request"] > 0
    assert state["requests"] > 0
