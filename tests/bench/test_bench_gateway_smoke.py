"""Smoke test of benchmarks/gateway_overhead.py: a --quick run works and every number it needs exists.

Only correctness and the presence of numbers are asserted; the overhead targets are the full
benchmark's business (1-second runs on a shared CI machine are too noisy to judge them).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gateway_overhead.py"
HOPS = ("direct", "floor", "tailgate")


@pytest.mark.bench
@pytest.mark.timeout(120)
def test_gateway_overhead_quick_run_is_correct(tmp_path: Path) -> None:
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt-get install wrk); gateway_overhead.py drives the load with it")
    out = tmp_path / "gateway_overhead.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
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
