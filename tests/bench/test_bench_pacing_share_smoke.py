"""Smoke test of benchmarks/pacing_share.py: three real replicas on a real redis-server pace a simulator that
enforces its rpm; 5× the pacing target offered, interactive alone and interactive (0.7×) beside batch (mixed).

Correctness: 0 upstream 429s (the script exits 1 otherwise). The share is judged against a loose floor only (the
full run's ≥ 0.95 is docs/benchmarks.md's business): it is a rate, so the test judges time.
"""

from __future__ import annotations

import re

import pytest
from bench_support import run_quick

from _require import require_redis_server


@pytest.mark.timing
@pytest.mark.timeout(150)  # two fleets of three replicas start inside it: ~40 s on an idle machine
def test_quick_run_uses_the_pacing_target_without_an_upstream_429() -> None:
    require_redis_server()
    stdout = run_quick("pacing_share.py", timeout=140)
    assert "no upstream 429s" in stdout
    shares = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+)\s+5x .* share (\d\.\d+)", stdout, re.M)}
    assert set(shares) == {"interactive", "mixed"}, stdout
    assert all(s >= 0.8 for s in shares.values()), stdout
    moved = re.search(r"interactive moved to b (\d+) of (\d+)", stdout)
    assert moved is not None, stdout
    assert int(moved.group(1)) <= 0.1 * int(moved.group(2)), stdout  # the promise is 0; a loose bound here
