"""What the benchmark smoke tests share (imported by basename, like tests/upstream/upstream_support.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from msgspec import Struct

from tailgate.bench.schema import to_json_obj

ROOT = Path(__file__).resolve().parents[2]


def run_quick(script: str, *args: str, timeout: float) -> str:
    """Run ``benchmarks/SCRIPT --quick ARGS`` from the repository root; its stdout, once it exited 0 (a script
    exits 1 when a correctness check failed: the assertion then shows everything it printed)."""
    # Not under coverage (CI measures the suite with `patch = subprocess`): a benchmark's gateways and load
    # generators traced line by line run several times slower, past the time the quick runs are given, and
    # what they exercise is the product's hot path, which the rest of the suite covers.
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def as_json(items: Sequence[Struct]) -> list[dict[str, Any]]:
    """Run objects (or any of the document's objects) as a results file holds them: the assertions read the
    documented keys, which are contracts."""
    return [cast("dict[str, Any]", to_json_obj(x)) for x in items]
