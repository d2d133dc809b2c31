"""Smoke test of benchmarks/bench_redis_framing.py: both framings admit and settle every request through Redis.

The script exits 1 when a decision fell back to the local state or the key's counter in Redis is wrong; the CPU
target is the full run's business.
"""

from __future__ import annotations

from bench_support import run_quick

from _require import require_redis_server


def test_quick_run_admits_and_settles_through_redis() -> None:
    require_redis_server()
    stdout = run_quick("bench_redis_framing.py", timeout=120)
    assert "all correctness checks passed" in stdout
    assert "hiredis" in stdout
    assert "redis-py" in stdout
