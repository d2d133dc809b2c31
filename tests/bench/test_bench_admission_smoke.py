"""Smoke test of benchmarks/bench_admission.py: both paths admit and settle every request exactly.

The script exits 1 when a counter or a slot is left wrong; the CPU target is the full run's business.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_admits_and_settles_exactly() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_admission.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all correctness checks passed" in proc.stdout
    assert "generic" in proc.stdout
    assert "local" in proc.stdout
