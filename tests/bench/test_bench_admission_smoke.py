"""Smoke test of benchmarks/bench_admission.py: both paths admit and settle every request exactly.

The script exits 1 when a counter or a slot is left wrong; the CPU target is the full run's business.
"""

from __future__ import annotations

from bench_support import run_quick


def test_quick_run_admits_and_settles_exactly() -> None:
    stdout = run_quick("bench_admission.py", timeout=120)
    assert "all correctness checks passed" in stdout
    assert "generic" in stdout
    assert "local" in stdout
