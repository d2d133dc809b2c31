"""A reservation refused while Redis is down keeps nothing (state/fallback.py ``reserve``/``untake``, and
``redis.py``'s fallback and abandon paths): the takes decided before the refusal are given back and no local
slot stays held, so the claims after it are admitted to exactly each limit. Real redis-server processes,
killed so that the replica decides alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from conftest import eventually, redis_config
from tailgate.state import Claim, Slot
from tailgate.state.redis import RedisState
from tailgate.state.server import RedisServer

RPM = Claim("k:rpm", 2, 10, 60.0)
"""Decided from the room Redis's last answer left (one take was granted in Redis before it went down)."""
BUDGET = Claim("k:budget", 3, 10, None)
"""Decided in the local counter (no window: the room of a Redis answer does not apply)."""
SLOT = Slot("k:conc", 2)


@pytest.fixture
async def alone(redis_binary: str) -> AsyncIterator[RedisState]:
    """A lone replica whose Redis granted one rpm take (9 of 10 left, remembered) and was then killed: every
    call after it is decided by the local fallback (the link is down, so Redis is not even tried)."""
    server = RedisServer(redis_binary).start()
    s = RedisState(redis_config(server.url, "down", timeout=0.05, sync_interval=0.05), replica="a")
    try:
        await s.start()
        first = await s.take(RPM.name, 1, RPM.limit, RPM.window_s)
        assert first.ok
        assert not first.local
        server.kill()
        await eventually(lambda: s.status().fallback_active, within_s=10.0)  # the next sync failed
        yield s
    finally:
        await s.close()
        server.close()


async def _admitted(s: RedisState, claim: Claim, tries: int) -> int:
    """How many takes of 1 from ``claim``'s counter (at its limit) the replica admits out of ``tries``."""
    results = [await s.take(claim.name, 1, claim.limit, claim.window_s) for _ in range(tries)]
    assert all(r.local for r in results)
    return sum(r.ok for r in results)


async def _slots(s: RedisState, tries: int) -> int:
    """How many slots of ``SLOT`` the replica grants out of ``tries`` (kept held)."""
    leases = [await s.acquire(SLOT.name, SLOT.limit) for _ in range(tries)]
    assert all(lease.token.startswith("local:") for lease in leases if lease.ok)
    return sum(lease.ok for lease in leases)


async def _nothing_held(s: RedisState) -> None:
    """Each counter admits exactly its capacity and the slot exactly its limit: nothing of a refusal stayed."""
    assert await _admitted(s, RPM, 10) == 9  # the room Redis left (10 - its 1), all of it
    assert await _admitted(s, BUDGET, 11) == 10
    assert await _slots(s, SLOT.limit + 1) == SLOT.limit


async def test_a_claim_refused_while_redis_is_down_gives_back_the_takes_before_it(alone: RedisState) -> None:
    """Redis down: a reservation whose third claim is refused gives back the two takes the fallback had
    admitted before it (the rpm's share of Redis's room, the budget's local count), three times over."""
    too_big = Claim("k:tpm", 500, 400, 60.0)
    for _ in range(3):
        res = await alone.reserve([RPM, BUDGET, too_big], SLOT)
        assert not res.ok
        assert [a.ok for a in res.admissions] == [True, True, False]
        assert all(a.local for a in res.admissions)
        assert res.lease is None  # a claim refused first: the slot was never asked
    await _nothing_held(alone)
    assert (await alone.take(too_big.name, 400, too_big.limit, too_big.window_s)).ok  # the refused one kept nothing
    assert not (await alone.take(too_big.name, 1, too_big.limit, too_big.window_s)).ok


async def test_a_slot_refused_while_redis_is_down_gives_back_every_take(alone: RedisState) -> None:
    """Redis down and the slot full: a reservation whose claims all passed but whose slot is refused gives
    back every take, three times over; the slots it found held are the only ones held."""
    held = [await alone.acquire(SLOT.name, SLOT.limit) for _ in range(SLOT.limit)]
    assert all(lease.ok for lease in held)
    for _ in range(3):
        res = await alone.reserve([RPM, BUDGET], SLOT)
        assert not res.ok
        assert [a.ok for a in res.admissions] == [True, True]
        assert res.lease is not None
        assert not res.lease.ok
    for lease in held:
        await alone.release(SLOT.name, lease.token)
    await _nothing_held(alone)


async def test_a_reservation_abandoned_while_redis_is_down_keeps_nothing(alone: RedisState) -> None:
    """Redis down and the caller gone (its client hung up) before the fallback decided: the reservation the
    fallback then admits is given back whole, takes and local slot (``RedisState._abandon``)."""
    task = asyncio.create_task(alone.reserve([RPM, BUDGET], SLOT))
    await asyncio.sleep(0)  # the reservation joined this turn's batch, which the fallback decides next turn
    assert task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: not alone._late, within_s=5.0)  # the batch was decided, and given back
    await _nothing_held(alone)
