"""Smoke test of benchmarks/rss_trace.py: a --quick trace runs, every answer is a 2xx, every column is printed.

The trace is a diagnostic (reported, not judged); the RSS target is gateway_overhead.py's business.
"""

from __future__ import annotations

from bench_support import run_quick

from _require import require_wrk


def test_quick_trace_prints_every_column() -> None:
    require_wrk("rss_trace.py drives the load with it")
    stdout = run_quick("rss_trace.py", timeout=120)
    assert "all correctness checks passed" in stdout
    rows = [line.split() for line in stdout.splitlines() if line[:4].strip().isdigit()]
    assert [r[0] for r in rows] == ["1", "2"]
    assert all(int(r[1].replace(",", "")) > 0 for r in rows)  # requests served
