"""The state protocol's contract, run against both backends (``local`` and a real ``redis-server``)."""

from __future__ import annotations

import asyncio
import math

import pytest

from conftest import eventually
from tailgate.state import Adjustment, Admission, Claim, Lease, SharedState, Slot


async def test_take_admits_exactly_the_limit_then_refuses_with_a_retry_after(state: SharedState) -> None:
    """60 of 60 pass, the 61st is refused with a wait within the window and nothing left."""
    oks = [(await state.take("k:rpm", 1, 60, 60.0)).ok for _ in range(61)]
    assert oks == [True] * 60 + [False]
    refused = await state.take("k:rpm", 1, 60, 60.0)
    assert not refused.ok
    assert 0 < refused.retry_after_s <= 60.0
    assert refused.remaining == 0
    assert 0 < refused.reset_s <= 60.0
    assert await state.usage("k:rpm", 60.0) == 60


async def test_take_is_all_or_nothing_and_an_amount_above_the_limit_never_passes(state: SharedState) -> None:
    """A take that does not fit takes nothing; one larger than the limit says it never can (inf)."""
    assert (await state.take("k:tpm", 700, 1000, 60.0)).ok
    part = await state.take("k:tpm", 400, 1000, 60.0)
    assert not part.ok
    assert part.remaining == pytest.approx(300)
    assert (await state.take("k:tpm", 300, 1000, 60.0)).ok
    huge = await state.take("other", 1001, 1000, 60.0)
    assert not huge.ok
    assert huge.retry_after_s == math.inf
    assert await state.usage("other", 60.0) == 0


async def test_asking_with_amount_zero_takes_nothing(state: SharedState) -> None:
    """``take(name, 0, ...)`` reports what is left without spending it."""
    await state.take("k", 3, 10, 60.0)
    ask = await state.take("k", 0, 10, 60.0)
    assert ask.ok
    assert ask.remaining == pytest.approx(7)
    assert await state.usage("k", 60.0) == pytest.approx(3)


async def test_adjust_refunds_and_settles_over_the_limit(state: SharedState) -> None:
    """Reserve an estimate, settle on the actual: a refund frees room, an overrun may pass the limit."""
    assert (await state.take("k:tpm", 800, 1000, 60.0)).ok
    assert await state.adjust("k:tpm", -500, 60.0) == pytest.approx(300)
    assert (await state.take("k:tpm", 700, 1000, 60.0)).ok
    assert await state.adjust("k:tpm", 250, 60.0) == pytest.approx(1250)
    over = await state.take("k:tpm", 1, 1000, 60.0)
    assert not over.ok
    assert over.remaining == 0
    assert await state.adjust("k:tpm", -5000, 60.0) == 0  # never below zero


async def test_a_budget_without_a_window_is_a_total(state: SharedState) -> None:
    """``window_s=None``: spent is spent (retry never), until an ``adjust`` gives some back."""
    assert (await state.take("k:budget", 2.5, 3.0, None)).ok
    spent = await state.take("k:budget", 1.0, 3.0, None)
    assert not spent.ok
    assert spent.retry_after_s == math.inf
    assert spent.remaining == pytest.approx(0.5)
    await state.adjust("k:budget", -1.0, None)
    assert (await state.take("k:budget", 1.0, 3.0, None)).ok
    assert await state.usage("k:budget", None) == pytest.approx(2.5)


async def test_the_window_slides(state: SharedState) -> None:
    """What was taken rolls off after the window (a 0.6 s window here: 10 ms buckets)."""
    for _ in range(5):
        assert (await state.take("fast", 1, 5, 0.6)).ok
    refused = await state.take("fast", 1, 5, 0.6)
    assert not refused.ok
    assert refused.retry_after_s <= 0.6
    await asyncio.sleep(refused.retry_after_s + 0.05)
    assert (await state.take("fast", 1, 5, 0.6)).ok


async def test_concurrency_slots_are_held_released_and_expire(state: SharedState) -> None:
    """Two slots: the third waits for a release; a slot never released frees itself after its ttl."""
    a = await state.acquire("k:conc", 2)
    b = await state.acquire("k:conc", 2)
    assert a.ok
    assert b.ok
    assert a.token != b.token
    third = await state.acquire("k:conc", 2)
    assert not third.ok
    assert third.in_use == 2
    await state.release("k:conc", a.token)
    assert (await state.acquire("k:conc", 2)).ok
    await state.release("k:conc", "no-such-token")  # ignored
    short = await state.acquire("k:short", 1, ttl_s=0.2)
    assert short.ok
    assert not (await state.acquire("k:short", 1, ttl_s=0.2)).ok
    await asyncio.sleep(0.3)
    assert (await state.acquire("k:short", 1, ttl_s=0.2)).ok


async def test_generations_count_up_and_show_within_a_second(state: SharedState) -> None:
    """``bump`` returns the new generation; ``generation`` shows it within one sync."""
    assert state.generation("keys") == 0
    assert await state.bump("keys") == 1
    assert await state.bump("keys") == 2
    await eventually(lambda: state.generation("keys") == 2)
    assert state.generation("other") == 0


async def test_pauses_keep_the_longest_and_clear(state: SharedState) -> None:
    """A pause shows at once with its reason; a shorter one does not cut it; ``<= 0`` clears it."""
    await state.pause("provider:a", 5.0, "429 Retry-After 5")
    assert 4.0 < state.paused_for("provider:a") <= 5.0
    assert state.pause_reason("provider:a") == "429 Retry-After 5"
    await state.pause("provider:a", 1.0)
    await asyncio.sleep(0.2)
    assert state.paused_for("provider:a") > 3.0
    await state.pause("provider:a", 0)
    await eventually(lambda: state.paused_for("provider:a") == 0.0)
    assert state.paused_for("never") == 0.0


async def test_flags_set_and_clear(state: SharedState) -> None:
    """Drain-style flags: set, read back, removed."""
    assert state.flag("drain:a") is None
    await state.set_flag("drain:a", True)
    await eventually(lambda: state.flag("drain:a") is True)
    await state.set_flag("drain:a", False)
    await eventually(lambda: state.flag("drain:a") is False)
    await state.set_flag("drain:a", None)
    await eventually(lambda: state.flag("drain:a") is None)


async def test_bad_arguments_are_refused_by_name(state: SharedState) -> None:
    """Negative or non-finite amounts and bad windows raise ValueError naming the argument."""
    with pytest.raises(ValueError, match="amount"):
        await state.take("k", -1, 10, 60.0)
    with pytest.raises(ValueError, match="window_s"):
        await state.take("k", 1, 10, 0.0)
    with pytest.raises(ValueError, match="delta"):
        await state.adjust("k", math.nan, 60.0)


async def test_status_and_replicas(state: SharedState) -> None:
    """A lone replica counts itself; its status names the backend and the replica."""
    await eventually(lambda: state.replicas() == 1 and state.status().connected)
    st = state.status()
    assert st.replica == "solo"
    assert st.backend == state.backend
    assert not st.fallback_active


async def test_a_refund_goes_back_to_the_bucket_of_its_take(state: SharedState) -> None:
    """Refund with the take's bucket: counted there (never below 0), and dropped once that bucket has left
    the window, so a late refund never lets extra through (a 0.6 s window: 10 ms buckets)."""
    first = await state.take("k", 4, 10, 0.6)
    assert first.ok
    assert first.bucket is not None
    assert await state.adjust("k", -1, 0.6, first.bucket) == pytest.approx(3)
    assert await state.adjust("k", -10, 0.6, first.bucket) == 0  # that bucket never goes below 0
    late = await state.take("k", 10, 10, 0.6)
    assert late.ok
    await asyncio.sleep(0.65)  # ``late`` has left the window
    assert (await state.take("k", 10, 10, 0.6)).ok
    assert await state.adjust("k", -10, 0.6, late.bucket) == pytest.approx(10)  # dropped: nothing to refund
    assert not (await state.take("k", 1, 10, 0.6)).ok
    assert (await state.take("k", 0, 10, 0.6)).bucket is None  # asking counts nowhere


async def test_settle_applies_every_correction_and_frees_the_slot(state: SharedState) -> None:
    """A request's end in one call: a refund to its take's bucket, an overrun, a budget's refund, the slot back."""
    tpm = await state.take("k:tpm", 800, 1000, 60.0)
    assert tpm.ok
    assert (await state.take("k:budget", 800, 1000, None)).ok
    assert (await state.take("k:cost", 2.0, 5.0, None)).ok
    slot = await state.acquire("k:conc", 1)
    assert slot.ok
    assert not (await state.acquire("k:conc", 1)).ok
    await state.settle(
        [
            Adjustment("k:tpm", -500, 60.0, tpm.bucket),
            Adjustment("k:budget", -700, None),
            Adjustment("k:cost", 0.5, None),
        ],
        ("k:conc", slot.token),
    )
    assert await state.usage("k:tpm", 60.0) == pytest.approx(300)
    assert await state.usage("k:budget", None) == pytest.approx(100)
    assert await state.usage("k:cost", None) == pytest.approx(2.5)
    again = await state.acquire("k:conc", 1)
    assert again.ok
    await state.settle([], ("k:conc", again.token))  # a slot alone
    assert (await state.acquire("k:conc", 1)).ok
    with pytest.raises(ValueError, match="delta must be finite"):
        await state.settle([Adjustment("k:tpm", math.nan, 60.0), Adjustment("k:budget", 1, None)])
    assert await state.usage("k:budget", None) == pytest.approx(100)  # refused before anything was applied


async def test_reserve_takes_every_claim_and_the_slot_or_nothing(state: SharedState) -> None:
    """A request's admission at once: a tpm, a budget and a slot all held, or none of them when one refuses
    (the refused part is named, with its own numbers); the buckets returned refund exactly what was taken."""
    claims = [Claim("r:tpm", 600, 1000, 60.0), Claim("r:budget", 600, 1000, None)]
    first = await state.reserve(claims, Slot("r:conc", 1))
    assert first.ok
    assert first.refused is None
    assert [a.ok for a in first.admissions] == [True, True]
    assert first.admissions[0].bucket is not None
    assert first.lease is not None
    assert first.lease.ok
    assert first.lease.in_use == 1
    assert await state.usage("r:tpm", 60.0) == pytest.approx(600)
    assert await state.usage("r:budget", None) == pytest.approx(600)

    # The slot is taken: both takes would fit, and neither is kept.
    busy = await state.reserve([Claim("r:tpm", 100, 1000, 60.0), Claim("r:budget", 100, 1000, None)], Slot("r:conc", 1))
    assert not busy.ok
    assert isinstance(busy.refused, Lease)
    assert busy.refused.in_use == 1
    assert await state.usage("r:tpm", 60.0) == pytest.approx(600)
    assert await state.usage("r:budget", None) == pytest.approx(600)

    await state.settle([Adjustment("r:tpm", -600, 60.0, first.admissions[0].bucket)], ("r:conc", first.lease.token))
    assert await state.usage("r:tpm", 60.0) == 0

    # The budget refuses (600 + 500 > 1000): the tpm take before it is given back, the slot never taken.
    spent = await state.reserve(
        [Claim("r:tpm", 500, 1000, 60.0), Claim("r:budget", 500, 1000, None)], Slot("r:conc", 1)
    )
    assert not spent.ok
    assert spent.lease is None
    refused = spent.refused
    assert isinstance(refused, Admission)
    assert len(spent.admissions) == 2
    assert refused.retry_after_s == math.inf
    assert refused.remaining == pytest.approx(400)
    assert await state.usage("r:tpm", 60.0) == 0
    assert await state.usage("r:budget", None) == pytest.approx(600)
    assert (await state.acquire("r:conc", 1)).ok  # the slot was never held

    # The first claim refuses: the rest are not even asked.
    over = await state.reserve([Claim("r:tpm", 1001, 1000, 60.0), Claim("r:budget", 1, 1000, None)])
    assert not over.ok
    assert len(over.admissions) == 1
    assert over.admissions[0].retry_after_s == math.inf
    assert await state.usage("r:budget", None) == pytest.approx(600)
    with pytest.raises(ValueError, match="amount must be"):
        await state.reserve([Claim("r:tpm", 1, 1000, 60.0), Claim("r:budget", -1, 1000, None)])
    assert await state.usage("r:tpm", 60.0) == 0  # refused before anything was taken
