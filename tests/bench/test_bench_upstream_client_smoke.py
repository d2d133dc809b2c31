"""Smoke test of benchmarks/upstream_client.py: a --quick run works and measures every client kind.

Correctness only (every call a complete 200, ``call()`` results ok with 20 tokens: the script exits 1
otherwise); the CPU ratio target is the full benchmark's business.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_measures_every_client(tmp_path: Path) -> None:
    out = tmp_path / "upstream_client.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "upstream_client.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all correctness checks passed" in proc.stdout
    results = json.loads(out.read_text())
    assert set(results) == {"nonstream", "stream"}
    for mode in results.values():
        assert set(mode["cpu_us"]) == {"aiohttp", "pool", "call"}
        assert all(v > 0 for v in mode["cpu_us"].values())
        assert all(v > 0 for v in mode["calls_per_s"].values())
        assert mode["pool_over_aiohttp"] > 0
