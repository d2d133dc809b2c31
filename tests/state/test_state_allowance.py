"""Allowances (state/allowance.py): a key's requests are admitted and settled from slices a replica holds, with
no Redis call on the common path, and the fleet's promises (docs/fleet.md, "Allowances") hold on a real
redis-server — three replicas, and one Redis 200 ms away behind the delay proxy."""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis

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


async def test_a_balance_carried_into_a_renewal_in_a_newer_bucket_goes_back_to_its_own(
    replicas: StateFactory,
) -> None:
    """A tpm slice taken in one of the window's buckets (1 s of 60 s) and renewed in a later one: the balance the
    renewal carries over was counted in the earlier bucket and goes back there, and a refund settled to that
    bucket joins it. Given back to the renewal's bucket, which counted only the renewal, the refund stopped at 0
    there and the rest stayed counted for the window (tests/state/test_state_lease.py has the same case)."""
    state = await replicas()
    allow = Allowances(state)  # no ticks: the slices go back at close only
    tpm = [Claim("key:t:tpm", 100.0, 1_000_000.0, 60.0)]
    first = await allow.reserve(tpm, None)  # 100 tokens and a slice of 4 requests' worth (400)
    assert first.ok
    # Redis's clock (the buckets') moves on to a later bucket; nothing of this test is judged by the wait.
    for _ in range(100):
        if (await state.take("key:t:probe", 1, 1e9, 60.0)).bucket != first.admissions[0].bucket:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("Redis's bucket did not move on in 5 s")
    spent = [allow.reserve_now(tpm, None) for _ in range(3)]  # 100 of 400 left: the renewal is asked for
    assert all(r is not None and r.ok for r in spent)
    await asyncio.gather(*allow._tasks)
    assert allow.renewals == 1
    after = allow.reserve_now(tpm, None)  # from the carried 100, counted in the first bucket
    assert after is not None
    # Used 40 of its 100: the refund of 60 goes to the first bucket (the carried part was spent whole).
    assert allow.settle_now([Adjustment("key:t:tpm", -60.0, 60.0, after.admissions[0].bucket)]) == []
    await allow.close()
    assert await state.usage("key:t:tpm", 60.0) == pytest.approx(440.0)  # 4 × 100 + 40
    assert after.admissions[0].bucket == first.admissions[0].bucket


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
    # What a refused request's x-ratelimit-* say, without a call: the remembered refusal's room and reset,
    # the same numbers Redis gave (nothing left, the window resets within its 60 s), and None for a window
    # of another limit (asked in Redis instead).
    known = allow.known("key:t:tpm", 3000.0)
    assert known is not None
    assert known.remaining == 0.0
    assert 0.0 < known.reset_s <= 60.0
    assert allow.known("key:t:tpm", 6000.0) is None
    assert allow.known("key:other:tpm", 3000.0) is None
    assert state.calls == before
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


async def test_a_dead_replicas_spare_slots_free_at_the_short_spare_ttl(
    replicas: StateFactory, redis_server: RedisServer
) -> None:
    """Spare slots are granted with ``spare_ttl_s`` (30 s; 1 s here) and renewed in the background while their
    replica lives: held well past that TTL they stay in Redis; once the replica dies (its ticks stop, nothing
    given back) they expire at most ``spare_ttl_s`` after its last renewal — not at the 600 s slot TTL. Judged
    on Redis's own clock (the members' expiry scores), so a slow machine cannot break it."""
    state = await replicas()
    allow = Allowances(state, tick_s=0.05, spare_ttl_s=1.0, spare_renew_s=0.2)
    allow.start()
    slot = Slot(f"key:{uuid.uuid4().hex}:concurrency", 40)  # its own set on the session's redis-server
    res = await allow.reserve([], slot)  # the request stays in flight throughout (a 10-minute stream)
    assert res.ok
    assert res.lease is not None
    held = sum(len(sp.free) + len(sp.busy) for sp in allow._spares.values())
    assert held > 1, held  # its own slot and spares

    client = aioredis.Redis.from_url(redis_server.url)
    try:
        key = next(iter([k async for k in client.scan_iter(match=f"*g:{slot.name}")]))

        async def live() -> tuple[float, dict[str, float]]:
            """Redis's clock now and the expiry of every member still in the cap's set."""
            sec, usec = await client.time()
            members: list[Any] = await client.zrange(key, 0, -1, withscores=True)
            return sec + usec / 1e6, {str(m[0], "utf-8"): float(m[1]) for m in members}

        now, expiries = await live()
        assert len(expiries) == held
        assert max(expiries.values()) <= now + 1.0 + 0.01  # the short TTL, not 600 s
        for _ in range(8):  # 2.4 s, more than twice the TTL: what it holds is renewed, never expired
            await asyncio.sleep(0.3)
            now, expiries = await live()
            mine = {m for sp in allow._spares.values() for m in (*sp.free, *sp.busy)}
            assert mine, expiries  # the slot in flight at least
            assert mine <= set(expiries), (mine, expiries)
            assert min(expiries[m] for m in mine) > now, (now, expiries)

        assert allow._task is not None
        allow._task.cancel()  # the replica dies: no renewal, no release
        await asyncio.gather(allow._task, *allow._tasks, return_exceptions=True)
        died, expiries = await live()
        assert expiries
        assert max(expiries.values()) <= died + 1.0 + 0.01  # free within spare_ttl_s of its death
        for _ in range(100):  # bounded wait for the expiry itself (Redis's clock)
            if (await live())[0] > max(expiries.values()):
                break
            await asyncio.sleep(0.05)
        other = await state.acquire(slot.name, 40)
        assert other.ok
        assert other.in_use == 1  # every slot of the dead replica is free again
    finally:
        await client.aclose()


async def test_a_replica_holds_its_requests_in_flight_plus_at_most_its_spare_slots(
    replicas: StateFactory, redis_server: RedisServer
) -> None:
    """Issue 31c: a key with a tpm and ``max_concurrency`` 60 on three replicas, 8 requests in flight on each
    (24 in all) as 4 end and 4 start, slices that run out every 4 requests. Before, a request that
    found its slice spent asked Redis for a slot and spares with the next slice, beside the spare slots free
    here: each replica's free slots grew by 2 every 4 requests and the cap refused with 24 in flight. Now,
    checked after every step once the background work is done: never a refusal; each replica's free slots
    within its bound (10 % of 60 ÷ 3 = 2); the cap's set holds exactly what the replicas hold, in flight or
    free — nothing counted twice, nothing no replica knows of — and empty once all is given back."""
    allows = [
        Allowances(a.state, fraction=0.0006, min_requests=4)  # slices of 200 tokens: 4 requests of 50
        for a in await _fleet(replicas)
    ]
    slot = Slot(f"key:{uuid.uuid4().hex}:concurrency", 60)  # its own set on the session's redis-server
    claims = [Claim(f"key:{slot.name}:tpm", 50.0, 1_000_000.0, 60.0)]
    bound = math.floor(60 * 0.1 / 3)
    client = aioredis.Redis.from_url(redis_server.url)
    held: list[list[str]] = [[] for _ in allows]

    async def start(i: int) -> None:
        a = allows[i]
        res = a.reserve_now(claims, slot) or await a.reserve(claims, slot)
        assert res.ok, res
        assert res.lease is not None
        held[i].append(res.lease.token)

    async def settled() -> dict[str, int]:
        """Once the background work is done: what each replica holds (free + in use), and the set's size."""
        for a in allows:
            while a._tasks:
                await asyncio.gather(*a._tasks, return_exceptions=True)
        keys = [k async for k in client.scan_iter(match=f"*g:{slot.name}")]
        free = [len(sp.free) for a in allows for sp in a._spares.values()]
        assert all(n <= bound for n in free), free
        mine = sum(len(sp.free) + len(sp.busy) for a in allows for sp in a._spares.values())
        plain = sum(1 for tokens in held for t in tokens if not t.startswith("lease|"))
        return {"held": mine + plain, "set": await client.zcard(keys[0]) if keys else 0}

    try:
        for i in range(len(allows)):
            for _ in range(8):
                await start(i)
        for _ in range(20):
            for i, a in enumerate(allows):
                for _ in range(4):  # 4 end, 4 start, no turn of the loop between: the renewal cannot keep up
                    token = held[i].pop(0)
                    if not a.release_now(slot.name, token):
                        await a.state.release(slot.name, token)
                for _ in range(4):
                    await start(i)
            now = await settled()
            assert now["set"] == now["held"], now
            assert now["set"] <= 24 + 3 * bound, now
        for i, a in enumerate(allows):
            for token in held[i]:
                if not a.release_now(slot.name, token):
                    await a.state.release(slot.name, token)
            held[i].clear()
            await a.close()
        assert (await settled())["set"] == 0
    finally:
        await client.aclose()
