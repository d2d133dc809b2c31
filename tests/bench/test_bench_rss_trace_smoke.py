"""Smoke test of benchmarks/rss_trace.py: a --quick trace runs, every answer is a 2xx, every column is printed.

The trace is a diagnostic (reported, not judged); the RSS target is gateway_overhead.py's business.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_quick_trace_prints_every_column() -> None:
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (apt-get install wrk); rss_trace.py drives the load with it")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "rss_trace.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all correctness checks passed" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line[:4].strip().isdigit()]
    assert [r[0] for r in rows] == ["1", "2"]
    assert all(int(r[1].replace(",", "")) > 0 for r in rows)  # requests served
