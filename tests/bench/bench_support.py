"""What the benchmark smoke tests share (imported by basename, like tests/upstream/upstream_support.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_quick(script: str, *args: str, timeout: float) -> str:
    """Run ``benchmarks/SCRIPT --quick ARGS`` from the repository root; its stdout, once it exited 0 (a script
    exits 1 when a correctness check failed: the assertion then shows everything it printed)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout
