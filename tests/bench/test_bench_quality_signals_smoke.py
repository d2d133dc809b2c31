"""`benchmarks/bench_quality_signals.py --quick` checks its fixtures and prints each cost against its baseline."""

from __future__ import annotations

import re

from bench_support import run_quick


def test_bench_quality_signals_smoke() -> None:
    out = run_quick("bench_quality_signals.py", timeout=60)
    rows = re.findall(r"^(text answer|tool answer|stream)\s+baseline\s+([\d.]+) µs\s+signals\s+([\d.]+) µs", out, re.M)
    assert {r[0] for r in rows} == {"text answer", "tool answer", "stream"}
    assert all(float(b) > 0 and float(s) > 0 for _, b, s in rows)
