"""`benchmarks/bench_anthropic_translate.py --quick` checks its translated stream and prints every cost."""

from __future__ import annotations

import re

from bench_support import run_quick


def test_bench_anthropic_translate_smoke() -> None:
    out = run_quick("bench_anthropic_translate.py", timeout=60)
    rows = re.findall(r"^per (request|chunk|answer)\s+(passthrough|translation) .*?([\d.]+) µs$", out, re.M)
    assert {(kind, mode) for kind, mode, _ in rows} == {
        ("request", "passthrough"),
        ("request", "translation"),
        ("chunk", "passthrough"),
        ("chunk", "translation"),
        ("answer", "translation"),
    }
    assert all(float(us) > 0 for _, _, us in rows)
    assert re.search(r"^translation extra per chunk: -?[\d.]+ µs$", out, re.M)
