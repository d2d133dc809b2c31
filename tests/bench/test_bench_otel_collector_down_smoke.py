"""`benchmarks/otel_collector_down.py --quick`: four phases (telemetry off, collector up, hanging, refused), no
failed request in any, dropped spans counted in both down phases, the table and the ratios printed."""

from __future__ import annotations

import re

import pytest
from bench_support import run_quick


@pytest.mark.bench
@pytest.mark.timeout(90)  # four 1 s load phases, each on a fresh gateway; a down collector's stop is bounded at 1.5 s
def test_bench_otel_collector_down_smoke() -> None:
    out = run_quick("otel_collector_down.py", "--clients", "8", timeout=80)
    rows = {
        m[0]: m[1:]
        for m in re.findall(
            r"^(off|up|hang|refused)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(\d+)$", out, re.M
        )
    }
    assert set(rows) == {"off", "up", "hang", "refused"}
    assert all(int(requests) > 0 and failed == "0" for requests, failed, _, _ in rows.values())
    assert int(rows["hang"][2]) > 0
    assert int(rows["refused"][2]) > 0
    assert int(rows["up"][3]) > 0  # a live collector got spans
    assert rows["off"][2:] == ("0", "0")
    assert len(re.findall(r"÷ off: p50 [\d.]+, p99 [\d.]+, CPU per request [\d.]+ \([+-]\d+ µs\)", out)) == 3
