"""The capacity finder against real simulated providers: its answer is what the engine model implies.

The engine model (tailgate.sim.engine) gives each preset ``slots`` sequences decoded together; a closed loop
of ``c`` users with no think time never queues while ``c <= slots`` and, past saturation, queues every
request. Saturation comes at ``c_sat = slots · (T_pre + T_eng) / T_eng`` (Little's law: users spend T_pre
before the engine queue and T_eng in a slot), and a saturated closed loop's mean E2E is exactly
``c · T_eng / slots``. The tests compute those numbers from the preset's parameters and compare the
finder's answer with them, within one search step.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from bench_support import as_json

from conftest import ThreadedSim
from tailgate.bench.finder import FindSpec
from tailgate.bench.loadgen import Bounds
from tailgate.bench.runner import TargetSpec
from tailgate.bench.searches import run_find_max
from tailgate.bench.thresholds import parse_threshold
from tailgate.bench.workload import LengthDist, Workload
from tailgate.sim.presets import EngineParams, preset


def t_eng(p: EngineParams, prompt_tokens: float, max_tokens: int, scale: float) -> float:
    """Seconds one request holds a slot when all slots are busy: prefill, then one token per decode step
    (half a step on average to join the running schedule; lognormal jitter's mean factor)."""
    step_s = (p.step_ms + p.step_per_seq_ms * (p.slots - 1)) / 1000.0 * math.exp(p.jitter**2 / 2)
    return scale * (prompt_tokens / p.prefill_tps + (max_tokens + 0.5) * step_s)


def t_pre(p: EngineParams, scale: float) -> float:
    """Mean of the lognormal time before the engine queue."""
    return scale * p.pre_median_s * math.exp(p.pre_sigma**2 / 2)


async def _find(
    url: str, spec: FindSpec, workload: Workload, bounds: Bounds
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    runs, caps = await run_find_max([TargetSpec("sim", url, "m")], workload, bounds, spec, asyncio.Event())
    return as_json(runs), as_json(caps)[0]


def _step_lateness_ms(sim: ThreadedSim) -> float:
    """P90 of how late the simulator's decode steps ended over the whole search (0 when it kept time).

    The implied answer assumes the engine keeps its step times; on a saturated machine each step of a full
    batch can run late and T_eng grows. A step lasts at most its planned length plus its lateness (the engine
    restarts its schedule from "now" when it falls behind), so this bounds the slowdown the run really had,
    measured by the simulator itself in the same run."""
    late = sim.call(_lateness(sim))
    return float(late["p90"] or 0.0)


async def _lateness(sim: ThreadedSim) -> dict[str, Any]:
    return dict(sim.provider.engine.lateness_ms.summary())


def _prompt_tokens(runs: list[dict[str, Any]]) -> float:
    ok = sum(int(r["successes"]) for r in runs)
    return sum(int(r["tokens"]["input"] or 0) for r in runs) / max(1, ok)


@pytest.mark.timeout(90)
async def test_finder_answer_is_the_slot_count_of_a_small_engine(threaded_sim: Callable[..., ThreadedSim]) -> None:
    """A 4-slot engine without pre-queue delay: up to 4 users never queue, a 5th always waits ≈ T_eng/4.

    The margins are wide on both sides, so a busy machine cannot flip the answer: unqueued, a request's TTFT
    is a prefill and at most one 12.5 ms step (≈ 20 ms), 80 ms under the threshold; queued, it waits T_eng/4
    (≈ 150 ms), and a slow machine only makes that wait longer (every step sleeps at least its length)."""
    scale = 0.5
    threshold_ms = 100.0
    max_tokens = 48
    sim = threaded_sim("naive", engine={"slots": 4, "jitter": 0.0}, time_scale=scale)
    p = replace(preset("naive"), slots=4, jitter=0.0)
    workload = Workload(input_tokens=LengthDist(24), max_tokens=max_tokens, stream=True)
    spec = FindSpec((parse_threshold(f"p90(ttft)<{threshold_ms:g}ms"),), "concurrency", start=1, ceiling=16, repeats=3)
    runs, cap = await _find(sim.url, spec, workload, Bounds(duration=1.5, warmup=0.6))
    wait_ms = 1000 * t_eng(p, _prompt_tokens(runs), max_tokens, scale) / 4
    assert wait_ms > 1.5 * threshold_ms  # the model: a queued request waits far past the threshold
    assert cap["answer"] == p.slots, cap["summary"]
    assert cap["failed_at"] == p.slots + 1
    assert cap["uncertainty"] == 1
    assert [pt["level"] for pt in cap["curve"]][:3] == [1, 2, 4]
    over = next(pt for pt in cap["curve"] if pt["level"] == p.slots + 1)
    assert over["ttft_ms_p90"] > threshold_ms
    assert not over["passed"]
    assert cap["decay_at_answer"]["base_level"] == 1
    assert len(runs) == len(cap["runs"]) >= 5


@pytest.mark.slow
@pytest.mark.timing  # P99 TTFT against a threshold with ~150 ms of room: one at a time, untraced
@pytest.mark.timeout(300)
async def test_finder_says_the_aggregator_collapses_past_16(threaded_sim: Callable[..., ThreadedSim]) -> None:
    """aggregator: 16 tenant-wide slots. P99 TTFT holds while no request queues (c ≤ 16) and breaks once
    the engine saturates (c_sat ≈ 17): the answer lies in [slots, c_sat] within one search step."""
    # At half speed the unqueued P99 TTFT (pre-queue P99 ≈ 310 ms plus a prefill and a step) sits ≈ 150 ms under
    # the 500 ms threshold, room for a busy machine's client-side lateness; two users past saturation already
    # wait ≈ 2 · T_eng / slots ≈ 280 ms more, so the upper side of the bracket holds too.
    scale = 0.5
    threshold_ms = 500
    p = preset("aggregator")
    sim = threaded_sim("aggregator", time_scale=scale)
    workload = Workload(input_tokens=LengthDist(128), max_tokens=128, stream=True)
    # The search starts at the slot count: the levels below it (4, 8) only pass, which the small engine above and
    # the finder's own tests already show; each cost a level (8.5 s) and checked nothing asserted here.
    spec = FindSpec((parse_threshold(f"p99(ttft)<{threshold_ms}ms"),), "concurrency", start=p.slots, ceiling=64)
    runs, cap = await _find(sim.url, spec, workload, Bounds(duration=6.0, warmup=2.5))
    # No lateness guard here: the bracket rests on the slot count, which a slow machine does not change.
    te = t_eng(p, _prompt_tokens(runs), 128, scale)
    c_sat = p.slots * (t_pre(p, scale) + te) / te
    step = cap["uncertainty"]
    assert step == 1
    assert p.slots - step <= cap["answer"] <= c_sat + step, (cap["summary"], c_sat)
    worst = max(pt["ttft_ms_p99"] for pt in cap["curve"])
    assert worst > 3 * threshold_ms  # past the slots it collapses, it does not degrade gently


@pytest.mark.slow
@pytest.mark.timing  # mean E2E against Little's law on a quarter-speed simulator: one at a time, untraced
@pytest.mark.timeout(400)
async def test_finder_answer_for_provider_a_matches_littles_law(threaded_sim: Callable[..., ThreadedSim]) -> None:
    """provider-a: 256 slots. A saturated closed loop's mean E2E is c · T_eng / slots, so the largest c with
    mean E2E < L is L · slots / T_eng; the finder's answer is within one search step of it."""
    # At a quarter speed every time of the engine, the threshold and each level's length shrink together: the
    # same users fit (the implied answer does not depend on the scale), the average rests on as many requests,
    # and a simulator that falls behind on a busy machine is measured and allowed for below.
    scale = 0.25
    p = preset("provider-a")
    sim = threaded_sim("provider-a", time_scale=scale)
    workload = Workload(input_tokens=LengthDist(64), max_tokens=256, stream=False)
    limit_s = 1.1
    # Starts at the slot count (256, well below the implied ~400): 64 and 128 only passed, two levels that
    # checked nothing asserted here (growth from a small start is the small engine's and the finder's tests').
    spec = FindSpec((parse_threshold(f"avg(e2e)<{limit_s}s"),), "concurrency", start=p.slots, ceiling=1024)
    runs, cap = await _find(sim.url, spec, workload, Bounds(duration=2.5, warmup=1.5))
    te = t_eng(p, _prompt_tokens(runs), 256, scale)
    implied = limit_s * p.slots / te
    assert t_pre(p, scale) + te < limit_s  # below saturation the threshold holds: the boundary is the queue
    # A simulator that ran late (a busy machine) held each slot longer, so fewer users fit: the implied
    # answer then lies between the planned one and the one for steps as long as planned + their lateness.
    step_ms = (p.step_ms + p.step_per_seq_ms * (p.slots - 1)) * math.exp(p.jitter**2 / 2) * scale
    late_ms = _step_lateness_ms(sim)
    implied_late = limit_s * p.slots / (te * (step_ms + late_ms) / step_ms)
    step = cap["uncertainty"]
    assert step is not None
    assert step <= 0.1 * cap["answer"] + 1
    why = (cap["summary"], implied, implied_late, late_ms)
    assert implied_late - step <= cap["answer"] <= implied + step, why
