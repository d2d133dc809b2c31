"""Smoke test of benchmarks/gateway_calls.py: a --quick run against this same tree counts calls per request in
both modes, with every request answered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_support import run_quick

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.bench
@pytest.mark.timeout(300)
def test_gateway_calls_quick_run_counts_both_trees(tmp_path: Path) -> None:
    """Both trees (here the same one) and both modes get a positive count of calls per request and a ratio."""
    out = tmp_path / "gateway_calls.json"
    run_quick("gateway_calls.py", "--baseline", str(SRC), "--json", str(out), timeout=280)
    result = json.loads(out.read_text())
    assert result["failed_requests"] == 0
    for mode in ("non-stream", "stream"):
        m = result["modes"][mode]
        assert m["before"]["calls_per_request"] > 0
        assert m["after"]["calls_per_request"] > 0
        assert m["after_over_before"] > 0
