"""Priority at the pacer (``SharedState.pace``, ``state/priority.py``), run against both backends.

The promise: a batch-lane take never leaves the bucket below the interactive reserve, while an interactive take
only needs the bucket at 0 or above — so an interactive request is never refused because of batch work.
"""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from conftest import StateFactory
from tailgate.state import SharedState
from tailgate.state.priority import Lane, LaneMeter, PaceBucket, keep_level, lane_of, lane_weights

SLOW = 1e-4
"""A refill rate slow enough that no test here sees a token come back (one per ~3 hours)."""


async def test_an_interactive_take_goes_while_the_bucket_is_not_negative(state: SharedState) -> None:
    """A bucket of 2 with a debt of 1: three requests go (the third leaves a debt of one request), the fourth
    waits for the refill of that debt (inf at this rate is not claimed: it can come back)."""
    oks = [(await state.pace("p:rpm", 1, SLOW, 2, debt=1)).ok for _ in range(4)]
    assert oks == [True, True, True, False]
    refused = await state.pace("p:rpm", 1, SLOW, 2, debt=1)
    assert refused.remaining == pytest.approx(-1, abs=1e-3)
    assert refused.retry_after_s == pytest.approx(1 / SLOW, rel=0.01)
    assert refused.limit == 2


async def test_a_batch_take_leaves_the_interactive_reserve_and_interactive_still_goes(state: SharedState) -> None:
    """The promise: batch with a reserve of 2 drains a bucket of 5 (debt 1) only to 2; every interactive request
    after it is admitted as if the level were its own: 2 → 1 → 0 → -1, then refused."""
    batch = [(await state.pace("p:rpm", 1, SLOW, 5, lane="batch", reserve=2, debt=1)).ok for _ in range(5)]
    assert batch == [True, True, True, False, False]
    refused = await state.pace("p:rpm", 1, SLOW, 5, lane="batch", reserve=2, debt=1)
    assert refused.remaining == pytest.approx(2, abs=1e-3)
    inter = [(await state.pace("p:rpm", 1, SLOW, 5, debt=1)).ok for _ in range(4)]
    assert inter == [True, True, True, False]  # the reserve was theirs
    never = await state.pace("p:rpm", 4, SLOW, 5, lane="batch", reserve=2)
    assert not never.ok
    assert never.retry_after_s == math.inf  # 4 + a reserve of 2 never fit a bucket of 5


async def test_without_a_debt_batch_leaves_one_interactive_request(state: SharedState) -> None:
    """A plain token bucket (no debt): batch stops at 1, where an interactive request still goes; with a debt of
    one, batch stops at 0, where an interactive request still goes too."""
    assert [(await state.pace("p", 1, SLOW, 3, lane="batch")).ok for _ in range(3)] == [True, True, False]
    assert (await state.pace("p", 1, SLOW, 3)).ok
    assert not (await state.pace("p", 1, SLOW, 3)).ok  # no debt: a plain bucket
    assert [(await state.pace("q", 1, SLOW, 2, lane="batch", debt=1)).ok for _ in range(3)] == [True, True, False]
    assert (await state.pace("q", 1, SLOW, 2, debt=1)).ok


async def test_the_bucket_refills_at_its_rate(state: SharedState) -> None:
    """20 per second, a bucket of 1, a debt of 1: two go, the third is told ~0.1 s and goes after it."""
    assert (await state.pace("p:fast", 1, 20, 1, debt=1)).ok
    assert (await state.pace("p:fast", 1, 20, 1, debt=1)).ok
    refused = await state.pace("p:fast", 1, 20, 1, debt=1)
    assert not refused.ok
    assert 0 < refused.retry_after_s <= 0.1 + 1e-6
    await asyncio.sleep(refused.retry_after_s + 0.02)
    assert (await state.pace("p:fast", 1, 20, 1, debt=1)).ok


async def test_pace_refuses_bad_arguments_by_name(state: SharedState) -> None:
    with pytest.raises(ValueError, match="rate"):
        await state.pace("p", 1, 0, 1)
    with pytest.raises(ValueError, match="burst"):
        await state.pace("p", 1, 1, math.inf)
    with pytest.raises(ValueError, match="amount"):
        await state.pace("p", -1, 1, 1)


async def test_replicas_share_one_bucket_and_the_priority_holds_across_them(replicas: StateFactory) -> None:
    """Two Redis replicas: batch on one drains the shared bucket to its reserve; interactive on the other
    finds the reserve there (the priority is fleet-wide, not per replica)."""
    a, b = await replicas(), await replicas()
    batch = [(await a.pace("p", 1, SLOW, 4, lane="batch", reserve=1, debt=1)).ok for _ in range(4)]
    assert batch == [True] * 3 + [False]
    assert [(await b.pace("p", 1, SLOW, 4, debt=1)).ok for _ in range(3)] == [True, True, False]
    assert not (await a.pace("p", 1, SLOW, 4, lane="batch", reserve=0, debt=1)).ok


def test_any_sequence_keeps_the_promise() -> None:
    """The arithmetic both backends run (PaceBucket): over random takes of both lanes and debts, an interactive
    take is refused only when the level is below what it needs, and a batch take never leaves less than its
    reserve plus what an interactive take needs."""
    rng = random.Random(41)
    bucket, now = PaceBucket(3.0, 0.0), 0.0
    for _ in range(5000):
        now += rng.expovariate(4.0)
        lane: Lane = rng.choice(("interactive", "batch"))
        reserve = rng.choice((0.0, 0.5, 1.5))
        debt = rng.choice((0.0, 1.0))
        before = min(3.0, bucket.level + (now - bucket.updated) * 2.0)
        ok, retry, after = bucket.take(now, 1.0, 2.0, 3.0, keep_level(lane, 1.0, reserve, debt))
        if lane == "interactive":
            assert ok == (before >= 1.0 - debt), (before, after)
            if ok:
                assert after >= -debt
        else:
            assert ok == (before - 1.0 >= reserve + 1.0 - debt)
            if ok:
                assert after - (1.0 - debt) >= reserve  # an interactive take still goes, the reserve kept
        assert ok or retry > 0


def test_the_lane_of_a_request() -> None:
    assert lane_of("batch", None) == "batch"
    assert lane_of(None, {"service_tier": "flex"}) == "batch"
    assert lane_of("interactive", {"service_tier": "auto"}) == "interactive"
    assert lane_of(None, None) == "interactive"


def test_the_meter_measures_the_interactive_demand_over_its_window() -> None:
    t = [0.0]
    meter = LaneMeter(2.0, clock=lambda: t[0])
    for _ in range(6):
        meter.add()
        t[0] += 0.25
    assert meter.rate() == pytest.approx(3.0)
    assert meter.reserve(1.0) == pytest.approx(3.0)
    t[0] += 2.0
    assert meter.rate() == 0.0


def test_the_fleet_split_gives_batch_only_what_interactive_demand_leaves() -> None:
    """Target 9/s: replica A has 10/s of batch work, B 3/s of interactive. A split by total demand would give B
    9 × 3/13 ≈ 2.1/s (its interactive traffic spilling); the lane split gives B its 3/s × the margin (1.25) and A
    the spare 5.25/s. Interactive demand above the target: batch gets nothing. No batch demand: the totals."""
    a, b = lane_weights(9.0, [(0.0, 10.0), (3.0, 0.0)])
    assert 9.0 * b / (a + b) == pytest.approx(3.75)
    assert 9.0 * a / (a + b) == pytest.approx(5.25)
    assert lane_weights(9.0, [(0.0, 10.0), (12.0, 0.0)]) == [0.0, 15.0]
    assert lane_weights(9.0, [(2.0, 0.0), (5.0, 0.0)]) == [2.0, 5.0]
    assert lane_weights(None, [(2.0, 1.0), (5.0, 0.0)]) == [3.0, 5.0]
