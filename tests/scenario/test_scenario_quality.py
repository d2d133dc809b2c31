"""Answer quality in scenarios (issue 42): the shipped quantized-primary scenario scaled down to seconds, with its
verdict fields computed from what the client got, the gateway's ledger and the simulators' truth; and no false
move — 60 simulated minutes of two healthy providers 2 canary points apart keep the configured split.

Real simulators, a real in-process gateway (quality wired: the live signals and the monitor's canaries through
the store onto its board), the bench load generator and ``tailgate monitor``'s rounds beside it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from msgspec import UnsetType

from tailgate.scenario import build_document, load_scenario, run_scenario
from tailgate.scenario.analysis import phases_of
from tailgate.scenario.verdicts import verdicts

ROOT = Path(__file__).resolve().parents[2]
TOOL_SIGNALS = {"tool_args_invalid_json", "tool_args_schema_mismatch", "tool_unknown_name"}


@pytest.mark.slow  # two policies × 8.4 s (the shipped 420 s at ×0.02) plus start-up
@pytest.mark.timeout(120)
async def test_quantized_primary_scaled_down_computes_every_verdict_field_from_the_data() -> None:
    cfg = load_scenario(ROOT / "scenarios" / "quantized-primary.yaml").scaled(0.02)
    records = await run_scenario(cfg, cfg.policies, asyncio.Event())
    doc = build_document(cfg, records, source="quantized-primary.yaml", time_scale=0.02)
    assert [r.name for r in doc.runs] == ["adaptive", "latency-only"]
    fault_at = cfg.steps[0].at
    for record, run in zip(records, doc.runs, strict=True):
        # broken tool calls that reached the client: the client's own check of each tool-call answer
        tool = [s for s in record.samples if s.tool_ok is not None]
        assert len(tool) >= 20  # 30 % of 10 req/s for 8.4 s
        assert run.overall.tool_calls_checked == len(tool)
        assert run.overall.tool_calls_broken == sum(not s.tool_ok for s in tool)
        # what the simulators served degraded, from their truth rows; a broken call the client saw was served so
        served = run.overall.degraded_served
        assert not isinstance(served, UnsetType)
        truth = Counter((u.provider, u.degraded) for u in record.upstream if u.degraded is not None and u.t >= 0)
        assert {(p, k): n for p, kinds in served.items() for k, n in kinds.items()} == dict(truth)
        broken_served = sum(n for (p, k), n in truth.items() if k in TOOL_SIGNALS)
        assert sum(not s.tool_ok for s in tool) <= broken_served
        assert all(p == "primary" for p, k in truth if k in TOOL_SIGNALS)  # only the faulted provider breaks calls
        before = [u for u in record.upstream if u.t < fault_at and u.degraded in TOOL_SIGNALS]
        assert before == []  # nothing broken before the fault
        # the monitor's canaries, per provider: graded probes of its rounds
        canaries = run.overall.canaries
        assert not isinstance(canaries, UnsetType)
        graded = Counter(p.provider for p in record.probes if p.accuracy_ok is not None)
        assert {p: c.graded for p, c in canaries.items() if c.graded} == dict(graded)
        assert sum(graded.values()) >= 4  # a round at once, then every 1.2 s (60 s × 0.02)
        # the fault event: the primary's share before and after, from the ledger
        event = run.events[0]
        rows = sorted(record.ledger, key=lambda r: r.ts)
        pre = [r for r in rows if record.ledger_t(r) < fault_at]
        post = [r for r in rows if record.ledger_t(r) >= fault_at]
        assert event.share_before == round(sum(r.provider == "primary" for r in pre) / len(pre), 4)
        assert event.share_after == round(sum(r.provider == "primary" for r in post) / len(post), 4)
        moved = event.seconds("moved_s")
        assert moved is None or 0.0 <= moved <= cfg.load.duration - fault_at
    said = verdicts(doc)
    assert any(line.startswith("share of primary after its fault at 1.2 s: ") for line in said), said
    tools = next(line for line in said if line.startswith("broken tool calls that reached the client: "))
    for run in doc.runs:
        checked, broken = run.overall.tool_calls_checked, run.overall.tool_calls_broken
        assert not isinstance(checked, UnsetType)
        assert not isinstance(broken, UnsetType)
        assert f"{run.name} {broken:,} of {checked:,}" in tools
    assert any(line.startswith("monitor canaries on primary (all runs): ") for line in said), said
    assert [p.name for p in phases_of(cfg)] == ["healthy", "degraded"]


@pytest.mark.slow  # 60 simulated minutes at ×0.005: 18 s, plus start-up
@pytest.mark.timeout(120)
def test_no_false_move_over_60_simulated_minutes_of_canaries_2_points_apart(tmp_path: Path) -> None:
    """benchmarks/quality_no_false_move.py at a short setting: the primary (80 %) answers the canaries 93 % right,
    the secondary 95 %; the monitor's canaries at a 6 s interval (10× the default's) reach the gateway's board
    through the store. The served split stays 80/20: within ±2 points, or the binomial noise of this short run
    (4 standard deviations of a random split of its requests), whichever is larger — and no tenth of the run
    shows a hold (a held primary serves nothing while another route can)."""
    out = tmp_path / "nfm.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "quality_no_false_move.py"),
            "--minutes",
            "60",
            "--time-scale",
            "0.005",
            "--rate",
            "40",
            "--interval",
            "6",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
        cwd=ROOT / "benchmarks",
    )
    assert out.exists(), proc.stdout + proc.stderr
    run = json.loads(out.read_text(encoding="utf-8"))["runs"][0]
    assert run["errors"] == 0
    n = run["requests"]
    assert n >= 500
    noise = 4 * (0.8 * 0.2 / n) ** 0.5
    primary = run["share"]["primary"]
    assert abs(primary - 0.8) <= max(0.02, noise), run
    assert min(run["primary_share_by_tenth"]) >= 0.5, run  # a hold would take a tenth near 0
    # the canaries were there to judge, on both providers, and they were graded
    for provider in ("primary", "secondary"):
        assert run["canaries"][provider]["graded"] >= 60, run
    assert run["tool_calls_checked"] >= 50
    assert run["tool_calls_broken"] == 0
