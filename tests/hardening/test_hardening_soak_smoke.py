"""The soak benchmark's smoke version: the script runs end to end and its leak and error checks hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_soak_smoke(tmp_path: Path) -> None:
    """40 s of mixed load through every fault phase (4 s each): no undocumented client error, fds and tasks flat."""
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "soak.py"),
            "--duration",
            "40",
            "--warmup",
            "12",
            "--phase",
            "4",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    result = json.loads(out.read_text())
    checks = result["checks"]
    assert checks["no_undocumented_client_errors"], result["client_errors"]
    assert checks["fds_flat"], result["fds"]
    assert checks["tasks_flat"], result["tasks"]
    assert result["requests_ok"] > 100, proc.stderr[-2000:]
