"""`benchmarks/anthropic_overhead.py --quick`: both modes answer correctly through a real gateway and every figure
is reported."""

from __future__ import annotations

import json

from bench_support import run_quick


def test_anthropic_overhead_smoke() -> None:
    out = json.loads(run_quick("anthropic_overhead.py", timeout=120))
    assert set(out["modes"]) == {"pass", "trans"}
    for mode in out["modes"].values():
        assert mode["cpu_us_per_request"] > 0
        assert set(mode["e2e_ms"]) == {"unary16", "stream16", "stream256", "agent16"}
        assert all(ms > 0 for ms in mode["e2e_ms"].values())
    assert set(out["translation_minus_passthrough"]) >= {"cpu_us_per_request", "cpu_us_per_chunk"}
