"""`benchmarks/bench_metrics.py --quick` runs both metric back ends and prints each one's cost and the ratio."""

from __future__ import annotations

import re

from bench_support import run_quick


def test_bench_metrics_smoke() -> None:
    out = run_quick("bench_metrics.py", timeout=60)
    costs = {m[0]: float(m[1]) for m in re.findall(r"^(prometheus_client|LocalSeries)\s+([\d.]+) µs", out, re.M)}
    assert set(costs) == {"prometheus_client", "LocalSeries"}
    assert all(us > 0 for us in costs.values())
    ratio = re.search(r"LocalSeries ÷ prometheus_client: ([\d.]+)", out)
    assert ratio is not None
    assert float(ratio.group(1)) > 0
