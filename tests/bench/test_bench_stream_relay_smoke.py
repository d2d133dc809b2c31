"""Smoke test of benchmarks/stream_relay.py: a --quick run works and every number it needs exists.

Only correctness (every stream complete, no error, a ledger row for each) and numbers that are present and
consistent are asserted; the CPU and ITL targets, and any rate inside the 0.8 s window, are the full
benchmark's business (1-second windows of 20 streams on a shared machine are too noisy to judge them).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import pytest
from bench_support import run_quick

from _require import require_redis_server

HOPS = ("direct", "floor", "tailgate", "tailgate-w2")
TOKENS = 300
"""Token chunks in each stream (benchmarks/stream_relay.py's ``TOKENS``)."""
CORES = (os.cpu_count() or 1) + 0.05
"""No process group uses more cores than the machine has (+ one clock tick of /proc rounding)."""


@pytest.mark.bench
@pytest.mark.timeout(230)
def test_stream_relay_quick_run_is_correct(tmp_path: Path) -> None:
    """Every hop relays complete 300-token streams with zero errors, and every reported number exists."""
    require_redis_server()  # the gateways keep their fleet state in it
    out = tmp_path / "stream_relay.json"
    run_quick("stream_relay.py", "--json", str(out), timeout=200)
    result = json.loads(out.read_text())
    assert result["correct"] is True
    failed = [c for c in result["checks"] if not c["ok"]]
    assert not failed, failed
    (level,) = result["compare"].values()
    assert set(level["hops"]) == set(HOPS)
    for name, hop in level["hops"].items():
        # Correct: every stream complete, no error. The rates inside the 0.8 s window are the full benchmark's:
        # a starved machine may deliver no chunk inside it, so here they only have to be consistent.
        assert hop["errors"] == 0, name
        assert hop["incomplete"] == 0, name
        assert hop["completed"] > 0, name
        # the window's token chunks, summed over the rounds; never more than the streams it completed carried
        assert hop["chunks"] == sum(r["chunks"] for r in hop["rounds"]) <= TOKENS * hop["completed"], name
        assert (hop["chunks_per_s"] > 0) == (hop["chunks"] > 0), name
        if hop["chunks"] > 0:
            assert hop["cpu_us_per_chunk"] > 0, name
        else:
            assert hop["cpu_us_per_chunk"] is None, name
        assert 0 <= hop["itl_p50_ms"] <= hop["itl_p99_ms"], name  # 0: chunks read together (coalesced)
        assert 0 <= hop["coalesced"] <= 1, name
        # the client's CPU in cores: the rounds' median, each a process group's CPU over the window
        assert hop["client_cores"] == round(statistics.median(r["cores"]["client"] for r in hop["rounds"]), 3)
        assert all(0 <= r["cores"]["client"] <= CORES for r in hop["rounds"]), name
        for run in hop["rounds"]:
            assert run["incomplete"] == 0, name
            assert run["completed"] == run["started"] > 0, name
            assert 0 <= run["completed_in_window"] <= run["completed"], name
            assert run["errors"] == 0, (name, run["error_kinds"])
        if name != "direct":
            assert "added_itl_p99_ms" in hop, name
    measured = level["hops"]["tailgate"]["chunks"] > 0 and level["hops"]["floor"]["chunks"] > 0
    assert ("cpu_ratio" in level["targets"]) == measured
    if measured:
        assert level["cpu_ratio"] > 0
    assert set(level["workers"]["cpu_us_per_chunk"]) == {"w1", "w2"}
    capacity = result["capacity"]
    assert [s["streams"] for s in capacity["steps"]][:1] == [20]
    assert all(s["errors"] == 0 for s in capacity["steps"])
    # the projection is the tailgate hop's numbers scaled to 7,200 streams in flight
    proj, gw = result["projection"], level["hops"]["tailgate"]
    assert proj["measured_at_streams"] == 20
    assert proj["cpu_us_per_chunk"] == (gw["cpu_us_per_chunk"] or 0.0)
    per_stream_rounding = 0.005 * proj["in_flight"] + 0.5  # chunks_per_s_per_stream has 2 decimals
    assert proj["chunks_per_s"] == pytest.approx(
        proj["in_flight"] * proj["chunks_per_s_per_stream"], abs=per_stream_rounding
    )
    assert (proj["chunks_per_s"] > 0) == (gw["chunks"] > 0)
    cores = proj["chunks_per_s"] * proj["cpu_us_per_chunk"] / 1e6 / proj["utilisation"]
    assert proj["cores"] == pytest.approx(cores, abs=0.051)  # 1 decimal
    for name in ("tailgate", "tailgate-w2"):
        ledger = result["ledger"][name]
        assert ledger["dropped"] == 0, name
        assert ledger["ok_rows"] >= ledger["completed"] > 0, name
