"""Smoke test of benchmarks/bench_redis_framing.py: both framings admit and settle every request through Redis.

The script exits 1 when a decision fell back to the local state or the key's counter in Redis is wrong; the CPU
target is the full run's business.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tailgate.state.server import find_redis_server

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_admits_and_settles_through_redis() -> None:
    if find_redis_server() is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server; .ci/run installs it)")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_redis_framing.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all correctness checks passed" in proc.stdout
    assert "hiredis" in proc.stdout
    assert "redis-py" in proc.stdout
