"""Smoke test of benchmarks/upstream_client.py: a --quick run works and measures every client kind.

Correctness only (every call a complete 200, ``call()`` results ok with 20 tokens: the script exits 1
otherwise); the CPU ratio target is the full benchmark's business.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_support import run_quick


def test_quick_run_measures_every_client(tmp_path: Path) -> None:
    out = tmp_path / "upstream_client.json"
    stdout = run_quick("upstream_client.py", "--json", str(out), timeout=120)
    assert "all correctness checks passed" in stdout
    results = json.loads(out.read_text())
    assert set(results) == {"nonstream", "stream"}
    for mode in results.values():
        assert set(mode["cpu_us"]) == {"aiohttp", "pool", "call"}
        assert all(v > 0 for v in mode["cpu_us"].values())
        assert all(v > 0 for v in mode["calls_per_s"].values())
        assert mode["pool_over_aiohttp"] > 0
