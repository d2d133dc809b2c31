"""A third-party load tester (ModelScope's ``evalscope perf``), unmodified, against the simulator and through
the gateway: zero errors, and its median TTFT and E2E at concurrency 1 within 5 % of ``/sim/truth``.

Heavy (evalscope pulls in pandas, transformers …; about 20 s): ``slow``, and skipped unless evalscope is
installed (on PATH or at ``$TAILGATE_EVALSCOPE``). The numbers are recorded in docs/simulator.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "third_party_loadtester.py"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_evalscope_perf_agrees_with_the_ground_truth(tmp_path: Path) -> None:
    evalscope = os.environ.get("TAILGATE_EVALSCOPE") or shutil.which("evalscope")
    if not evalscope or not Path(evalscope).exists():
        pytest.skip("evalscope is not installed (pip install 'evalscope[perf]' in its own venv; $TAILGATE_EVALSCOPE)")
    out = tmp_path / "third_party.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--evalscope", evalscope, "--requests", "20", "--json", str(out)],
        cwd=SCRIPT.parent,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [r["target"] for r in rows] == ["mock", "gateway"]
    for row in rows:
        assert all(row["checks"].values()), row
        assert row["evalscope"]["failed"] == 0
