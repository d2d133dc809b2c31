"""Allowances (state/allowance.py): a key's requests are admitted and settled from slices a replica holds, with
no Redis call on the common path, and the fleet's promises (docs/fleet.md, "Allowances") hold on a real
redis-server — three replicas, and one Redis 200 ms away behind the delay proxy."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from conftest import StateFactory, redis_config
from delay_proxy import DelayProxy
from tailgate.state import Adjustment, Claim, Slot
from tailgate.state.allowance import Allowances
from tailgate.state.redis import RedisState
from tailgate.state.server import RedisServer

BUDGET = "key:t:budget:tokens:daily:0"


def _claims(tokens: float, tpm: float = 60_000.0, budget: float = 1e9) -> list[Claim]:
    return [Claim("key:t:tpm", tokens, tpm, 60.0), Claim(BUDGET, tokens, budget, None)]


async def _one(allow: Allowances, claims: list[Claim], slot: Slot | None = None, used: float | None = None) -> bool:
    """One request: reserve, then settle to ``used`` tokens (the reservation's own amount when None)."""
    res = allow.reserve_now(claims, slot)
    if res is None:
        res = await allow.reserve(claims, slot)
    if not res.ok:
        return False
    if used is not None:
        rest = allow.settle_now(
            [
                Adjustment(c.name, used - c.amount, c.window_s, a.bucket)
                for c, a in zip(claims, res.admissions, strict=True)
            ]
        )
        if rest:  # counters decided per request: settled at once, as the gateway does
            await allow.state.settle(rest)
    if res.lease is not None and slot is not None and not allow.release_now(slot.name, res.lease.token):
        await allow.state.release(slot.name, res.lease.token)
    return True


async def test_the_common_request_makes_no_redis_call(replicas: StateFactory) -> None:
    """After the first request, 1,000 requests of a key with a tpm, a budget and a concurrency cap (reserve +
    settle + slot) cost fewer than 0.05 Redis calls each (counted by the client's link), and Redis ends up
    counting exactly what they used once the allowances are given back."""
    state = await replicas()
    assert isinstance(state, RedisState)
    allow = Allowances(state, tick_s=0.05)
    allow.start()
    slot = Slot("key:t:concurrency", 100)
    claims = _claims(100.0, tpm=10_000_000.0)
    assert await _one(allow, claims, slot, used=60.0)
    before = state.calls
    for i in range(1000):
        assert await _one(allow, claims, slot, used=60.0)
        if i % 100 == 0:
            await asyncio.sleep(0)  # let the background renewals run, as a server's loop would
    per_request = (state.calls - before) / 1000
    assert per_request < 0.05, per_request
    assert allow.local >= 950, (allow.local, allow.remote)
    await allow.close()
    assert await state.usage(BUDGET, None) == pytest.approx(1001 * 60.0)
    assert await state.usage("key:t:tpm", 60.0) == pytest.approx(1001 * 60.0)


async def _fleet(replicas: StateFactory, n: int = 3) -> list[Allowances]:
    """``n`` replicas' allowances, once every replica sees the others (slices are sized per replica)."""
    allows = [Allowances(await replicas(), tick_s=0.05) for _ in range(n)]
    for _ in range(200):
        if all(a.state.replicas() == n for a in allows):
            break
        await asyncio.sleep(0.05)
    assert all(a.state.replicas() == n for a in allows)
    for a in allows:
        a.start()
    return allows


async def test_three_replicas_keep_a_window_within_2_percent(replicas: StateFactory) -> None:
    """tpm 150,000 in 100-token requests over three replicas (slices of 5 requests' worth), 2× offered within
    one window: 1,500 requests' worth ± 2 %, and never more than the limit + 1 % (replicas × slice)."""
    allows = await _fleet(replicas)

    async def drive(a: Allowances) -> int:
        return sum([await _one(a, _claims(100.0, tpm=150_000.0)) for _ in range(1000)])

    admitted = sum(await asyncio.gather(*(drive(a) for a in allows)))
    for a in allows:
        await a.close()
    assert 0.98 * 1500 <= admitted <= 1.01 * 1500, admitted
    assert sum(a.local for a in allows) >= 0.8 * admitted  # the refused half each asked Redis
    usage = await allows[0].state.usage("key:t:tpm", 60.0)
    assert usage == pytest.approx(admitted * 100.0)  # every unspent slice went back (float sums of slices)


async def test_a_budget_is_never_overspent_by_reservations(replicas: StateFactory) -> None:
    """A daily budget of 50,000 tokens, 100-token requests over three replicas until every one is refused:
    exactly 500 admitted (the slices shrink near the end and the last units go one request at a time), and
    Redis counts what was used, not what was reserved."""
    allows = await _fleet(replicas)

    async def drive(a: Allowances) -> int:
        return sum([await _one(a, [Claim(BUDGET, 100.0, 50_000.0, None)]) for _ in range(300)])

    admitted = sum(await asyncio.gather(*(drive(a) for a in allows)))
    for a in allows:
        await a.close()
    assert admitted == 500, admitted
    assert await allows[0].state.usage(BUDGET, None) == pytest.approx(50_000.0)


async def test_a_tiny_limit_is_decided_per_request_exactly(replicas: StateFactory) -> None:
    """tpm 3,000 with 1,000-token requests: a slice of 4 requests' worth would exceed 1 % of the limit, so every
    request waits for its own atomic reservation: 3 admitted across three replicas, never 4."""
    allows = await _fleet(replicas)
    results = await asyncio.gather(
        *(_one(a, [Claim("key:t:tpm", 1000.0, 3000.0, 60.0)]) for a in allows for _ in range(3))
    )
    assert sum(results) == 3
    assert all(a.local == 0 for a in allows)
    for a in allows:
        await a.close()


async def test_a_window_at_its_limit_refuses_without_a_round_trip_per_request(replicas: StateFactory) -> None:
    """A tpm spent to its limit: the first refusal asks Redis; the next 100 of the same size are refused from
    the remembered answer (no Redis call) until the window could have room — and a refund of the counter
    (a request that used less) forgets it at once."""
    state = await replicas()
    assert isinstance(state, RedisState)
    allow = Allowances(state)
    claims = [Claim("key:t:tpm", 1000.0, 3000.0, 60.0)]
    assert [await _one(allow, claims) for _ in range(3)] == [True] * 3
    assert not await _one(allow, claims)
    before = state.calls
    for _ in range(100):
        res = await allow.reserve(claims, None)
        assert not res.ok
        assert res.admissions[-1].retry_after_s > 0
    assert state.calls == before
    assert allow.refusals_remembered == 100
    assert allow.settle_now([Adjustment("key:t:tpm", -500.0, 60.0, None)])  # per request: the caller sends it
    await state.adjust("key:t:tpm", -500.0, 60.0)
    before = state.calls
    assert not (await allow.reserve(claims, None)).ok  # asked again: 500 of room is not 1,000
    assert state.calls == before + 1
    assert (await allow.reserve([Claim("key:t:tpm", 400.0, 3000.0, 60.0)], None)).ok  # a smaller one fits
    await allow.close()


async def test_a_concurrency_cap_is_exact_with_spare_slots(replicas: StateFactory) -> None:
    """max_concurrency 30 over three replicas holding spare slots: never more than 30 in flight fleet-wide,
    30 reached, and after close no slot is left held in Redis."""
    allows = await _fleet(replicas)
    slot = Slot("key:t:concurrency", 30)
    in_flight = peak = 0

    async def request(a: Allowances) -> None:
        nonlocal in_flight, peak
        res = a.reserve_now([], slot) or await a.reserve([], slot)
        if not res.ok:
            return
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        assert res.lease is not None
        if not a.release_now(slot.name, res.lease.token):
            await a.state.release(slot.name, res.lease.token)

    for _ in range(5):
        await asyncio.gather(*(request(a) for a in allows for _ in range(20)))
    assert peak <= 30
    assert peak >= 20, peak
    for a in allows:
        await a.close()
    lease = await allows[0].state.acquire(slot.name, 30)
    assert lease.ok
    assert lease.in_use == 1  # every spare slot went back


async def test_requests_flow_at_local_speed_with_redis_200ms_away(redis_server: RedisServer) -> None:
    """Redis behind the delay proxy, turned from 0 to 200 ms each way (a 400 ms round trip, every call far over
    ``state.timeout`` of 50 ms): requests keep being admitted from the allowances and the fallback, and no
    request waits for Redis's answer — every wait on Redis (instrumented per request, ``Allowances.waits``)
    is shorter than the round trip, which a request that waited for an answer would have spent at least."""
    async with DelayProxy("127.0.0.1", redis_server.port) as proxy:
        state = RedisState(redis_config(proxy.url, f"t{uuid.uuid4().hex[:12]}", timeout=0.05), replica="far")
        await state.start()
        allow = Allowances(state, tick_s=0.05)
        allow.start()
        slot = Slot("key:t:concurrency", 100)
        claims = _claims(100.0, tpm=1_000_000.0)  # slices of at most 100 requests: renewed several times below
        for _ in range(50):
            assert await _one(allow, claims, slot, used=60.0)
        proxy.delay_s = 0.2
        round_trip = 2 * proxy.delay_s
        waits_before = len(allow.waits)
        admitted = 0
        for i in range(600):
            admitted += await _one(allow, claims, slot, used=60.0)
            if i % 20 == 0:
                await asyncio.sleep(0.005)  # time passes: renewals and ticks run (and time out) meanwhile
        waits = allow.waits[waits_before:]
        assert admitted == 600
        assert all(w < round_trip for w in waits), max(waits)
        assert len(waits) < 60, len(waits)  # the common request did not go to Redis at all
        assert state.timeouts > 0  # Redis was indeed slower than the budget: the fallback decided
        proxy.delay_s = 0.0
        await allow.close()
        await state.close()
