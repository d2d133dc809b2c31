"""Smoke test of benchmarks/bench_sim.py: a --quick run works and its numbers are sane.

Only correctness and the presence of numbers are asserted; the performance targets are the full
benchmark's business (2-second runs on a shared CI machine are too noisy to judge them).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from bench_support import run_quick

from _require import require_wrk

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_sim.py"


def _load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_sim", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_sim", module)
    spec.loader.exec_module(module)
    return module


WRK_OUTPUT = """Running 2s test @ http://127.0.0.1:1/v1/chat/completions
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     5.51ms    1.00ms  12.00ms   80.00%
  200 requests in 2.00s, 1.00MB read
  Socket errors: connect 0, read 3, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:    100.00
Transfer/sec:      0.50MB
WRK_JSON {"requests": 200, "duration_us": 2000000, "bytes": 1048576, "connect": 0, "read": 3, \
"write": 0, "status": 7, "timeout": 1, "p50_us": 5510, "p90_us": 6000, "p99_us": 9020, \
"max_us": 12000, "mean_us": 5600.0}
"""


def test_parse_wrk_counts_every_error() -> None:
    res = _load_bench().parse_wrk(WRK_OUTPUT, "http://127.0.0.1:1", 64)
    assert res.rps == 100.0
    assert res.text_rps == 100.0
    assert res.errors == 7 + 3 + 1
    assert res.latency_ms["p99"] == 9.02


@pytest.mark.bench
@pytest.mark.timeout(180)
def test_bench_sim_quick_run_is_correct(tmp_path: Path) -> None:
    require_wrk("bench_sim.py drives the load with it")
    out = tmp_path / "bench_sim.json"
    run_quick("bench_sim.py", "--json", str(out), timeout=150)
    result = json.loads(out.read_text())
    assert result["correct"] is True
    scenarios = result["scenarios"]
    assert set(scenarios) == {"nonstream", "stream", "lateness"}
    for name, sc in scenarios.items():
        failed = [c for c in sc["checks"] if not c["ok"]]
        assert not failed, f"{name}: {failed}"
        assert sc["errors"] == 0, name
        # The lateness run's streams (100-400 tokens) may all end after its short quick window on a starved
        # machine: how many is a rate, the full benchmark's; each one that did end was checked above.
        assert (sc["sim"]["rps"] > 0) == (sc["sim"]["requests"] > 0), name
        if name != "lateness":
            assert sc["sim"]["requests"] > 0, name
            assert sc["baseline"]["rps"] > 0, name
            assert sc["ratio"] > 0, name
    late = scenarios["lateness"]
    assert late["steps"] > 0
    assert late["lateness_ms"]["count"] == late["steps"]
    names = [c["name"] for c in late["checks"]]
    assert "sim (lateness): one stream request is well-formed" in names
