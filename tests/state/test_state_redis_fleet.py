"""What only the Redis backend promises: one limit across replicas, views within 1 s, and Redis trouble
answered by the documented fallback (real redis-server processes; killed and restarted on their port)."""

from __future__ import annotations

import asyncio

import pytest

from conftest import StateFactory, eventually, redis_config
from tailgate.state import Adjustment, Claim, Slot
from tailgate.state.redis import RedisState
from tailgate.state.server import RedisServer

# Long enough that nothing but the pause makes a probe wait that long: the budget (50 ms) and, when this
# process's loop runs late, the link's own wait for Redis (SYNC_TIMEOUT_S, 1 s) both end well before it.
PAUSE_MS = 2500


async def test_three_replicas_share_one_limit_exactly(replicas: StateFactory) -> None:
    """Three replicas taking concurrently from one rpm-60 counter admit exactly 60 together."""
    fleet = [await replicas() for _ in range(3)]

    async def hammer(s: RedisState) -> int:
        results = await asyncio.gather(*(s.take("key:a:rpm", 1, 60, 60.0) for _ in range(50)))
        return sum(r.ok for r in results)

    admitted = await asyncio.gather(*(hammer(s) for s in fleet))  # type: ignore[arg-type]
    assert sum(admitted) == 60
    assert all(s.status().fallback_active is False for s in fleet)


async def test_a_change_on_one_replica_shows_on_the_others_within_a_second(replicas: StateFactory) -> None:
    """Generation, pause and flag set on A are seen by B within 1 s; B counts two replicas."""
    a, b = await replicas(), await replicas()
    await a.bump("keys")
    await a.pause("provider:p", 10.0, "429")
    await a.set_flag("drain:p", True)
    await eventually(lambda: b.generation("keys") == 1 and b.paused_for("provider:p") > 8.0)
    await eventually(lambda: b.flag("drain:p") is True and b.pause_reason("provider:p") == "429")
    await eventually(lambda: a.replicas() == 2 and b.replicas() == 2)


async def test_flags_survive_every_replica_restarting(replicas: StateFactory) -> None:
    """A drain set by a replica that is gone is still there for a replica started later."""
    a = await replicas()
    await a.set_flag("drain:p", True)
    await a.close()
    c = await replicas()
    await eventually(lambda: c.flag("drain:p") is True)


async def test_published_blobs_reach_the_other_replicas_only(replicas: StateFactory) -> None:
    """Each replica sees the others' blobs, not its own; a blob past its ttl is gone."""
    a, b = await replicas("a"), await replicas("b")
    await a.publish("health", b"from-a", ttl_s=0.5)
    await b.publish("health", b"from-b", ttl_s=5.0)
    await eventually(lambda: b.peers("health") == {"a": b"from-a"} and a.peers("health") == {"b": b"from-b"})
    await eventually(lambda: b.peers("health") == {}, within_s=2.0)


@pytest.mark.usefixtures("redis_binary")
async def test_redis_killed_then_back_fallback_then_convergence() -> None:
    """Redis killed: every call still answers, within its budget, from the local fallback at limit ÷ replicas;
    Redis back on its port: the replicas reconnect, re-send what changed meanwhile, and decide in Redis again."""
    server = RedisServer().start()
    try:
        # A call budget of 0.25 s, not 0.02: a dead Redis refuses at once, so no call may run out even this; a 20 ms
        # budget was run out by the event loop's own lateness beside three busy workers (1 timeout in a full run).
        cfg = redis_config(server.url, "down", timeout=0.25, sync_interval=0.05)
        a, b = RedisState(cfg, replica="a"), RedisState(cfg, replica="b")
        await a.start()
        await b.start()
        await eventually(lambda: a.replicas() == 2)
        assert (await a.take("k", 1, 10, 60.0)).ok
        server.kill()
        results = [await a.take("k", 1, 10, 60.0) for _ in range(8)]
        # Never a wait on a dead Redis: each call failed at once (refused) or went straight to the fallback
        # once the link was down; none ran out its budget (the link's own count, not a wall clock).
        assert a.timeouts == 0
        assert sum(r.ok for r in results) == 4  # the fallback's share, 10 ÷ 2 replicas, less the 1 taken via Redis
        assert a.fallbacks >= 8
        await eventually(lambda: a.status().fallback_active)  # the next sync fails: Redis is down
        await a.set_flag("drain:p", True)  # while down: applied here, queued for Redis
        assert a.flag("drain:p") is True
        await a.pause("provider:p", 60.0, "429 seen by a")  # a 429 during the outage: the fleet must learn of it
        assert a.paused_for("provider:p") > 59.0
        server.start()
        await eventually(lambda: a.status().connected and not a.status().fallback_active, within_s=10.0)
        await eventually(lambda: b.flag("drain:p") is True, within_s=10.0)
        await eventually(lambda: b.paused_for("provider:p") > 40.0, within_s=10.0)  # what is left of it
        assert b.pause_reason("provider:p") == "429 seen by a"
        await a.pause("provider:p", 0)  # lifted once Redis answers: nothing queued puts it back
        await eventually(lambda: b.paused_for("provider:p") == 0.0, within_s=10.0)
        await asyncio.sleep(0.2)  # a few syncs
        assert b.paused_for("provider:p") == 0.0
        ok = await a.take("k", 1, 10, 60.0)
        assert ok.ok
        assert ok.remaining == 9  # a fresh Redis (no persistence): counting in Redis again
        await a.close()
        await b.close()
    finally:
        server.close()


async def _settled(s: RedisState) -> None:
    """Wait (bounded) until the late Redis answers and the reconciliations they caused have all run."""
    for _ in range(500):
        if not s._late:
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"{len(s._late)} late Redis calls still running after 5 s")


async def test_slow_redis_never_holds_a_call_past_its_budget(redis_server: RedisServer) -> None:
    """While Redis holds every command (CLIENT PAUSE), takes are answered by the fallback before Redis answers
    anything (event order: a PING sent to the paused Redis is still waiting, no wall clock); the late Redis
    answers are reconciled so every take the fallback admitted counts once in Redis, and the fallback admits
    exactly up to the limit."""
    import redis.asyncio as aioredis

    s = RedisState(redis_config(redis_server.url, "slow", timeout=0.05), replica="s")
    await s.start()
    blocker = aioredis.Redis.from_url(redis_server.url)
    prober = aioredis.Redis.from_url(redis_server.url)
    try:
        await prober.ping()  # connected before the pause: its next PING waits exactly as long as the pause
        await blocker.client_pause(PAUSE_MS, all=True)
        probe = asyncio.ensure_future(prober.ping())
        await asyncio.sleep(0.05)
        adm = await s.take("k", 1, 10, 60.0)
        assert not probe.done()  # answered while Redis still held every command: the budget, not Redis, ended it
        assert adm.ok
        assert s.timeouts == 1
        await probe  # Redis resumes and grants the take late: it counts once, as the fallback said
        await _settled(s)
        assert await s.usage("k", 60.0) == 1
        await blocker.client_pause(PAUSE_MS, all=True)
        probe = asyncio.ensure_future(prober.ping())
        await asyncio.sleep(0.05)
        admitted = 1
        for _ in range(20):  # past their budget, the fallback decides every one of them
            admitted += (await s.take("k", 1, 10, 60.0)).ok
        assert not probe.done()  # all 20 were decided while Redis was paused
        await probe
        await _settled(s)
        assert await s.usage("k", 60.0) == admitted  # every admitted take counted once in Redis, none twice
        # The fallback admits exactly the room its counters hold (the first take's 1 of 10): no overshoot
        # at all while Redis answers nothing, so the fleet-wide count is the limit.
        assert admitted == 10
    finally:
        await blocker.aclose()
        await prober.aclose()
        await s.close()


@pytest.mark.usefixtures("redis_binary")
@pytest.mark.parametrize("fallback", ["closed"])
async def test_fail_closed_refuses_limits_while_redis_is_away(fallback: str) -> None:
    """``fallback: closed``: with Redis unreachable, limited calls are refused (Retry-After 1 s)."""
    with RedisServer() as server:
        url = server.url
    s = RedisState(redis_config(url, "closed", fallback=fallback, timeout=0.02), replica="c")
    await s.start()  # Redis is gone: start does not fail, it announces the fallback
    try:
        adm = await s.take("k", 1, 10, 60.0)
        assert not adm.ok
        assert adm.retry_after_s == 1.0
        assert not (await s.acquire("g", 5)).ok
    finally:
        await s.close()


async def test_settle_is_one_round_trip_and_survives_a_flushed_script_cache(redis_server: RedisServer) -> None:
    """A request's corrections and its slot's release go to Redis in one script call; after SCRIPT FLUSH (what
    a Redis restart does to the cache) the call loads the script again, nothing lost."""
    import redis.asyncio as aioredis

    s = RedisState(redis_config(redis_server.url, "settle"), replica="s")
    await s.start()
    admin = aioredis.Redis.from_url(redis_server.url)
    try:
        for flush in (False, True):
            name = f"k{int(flush)}"
            tpm = await s.take(f"{name}:tpm", 800, 1000, 60.0)
            assert tpm.ok
            assert (await s.take(f"{name}:budget", 800, 1000, None)).ok
            slot = await s.acquire(f"{name}:conc", 1)
            assert slot.ok
            if flush:
                await admin.script_flush()
            calls = s.calls
            fixes = [Adjustment(f"{name}:tpm", -500, 60.0, tpm.bucket), Adjustment(f"{name}:budget", 100, None)]
            await s.settle(fixes, (f"{name}:conc", slot.token))
            assert s.calls - calls == 1  # one script call, also when it had to be loaded again
            assert await s.usage(f"{name}:tpm", 60.0) == pytest.approx(300)
            assert await s.usage(f"{name}:budget", None) == pytest.approx(900)
            assert (await s.acquire(f"{name}:conc", 1)).ok  # the slot was released
    finally:
        await admin.aclose()
        await s.close()


async def test_reserve_is_one_round_trip_and_survives_a_flushed_script_cache(redis_server: RedisServer) -> None:
    """A request's whole admission (tpm, two budgets, a slot) is one script call, also after SCRIPT FLUSH."""
    import redis.asyncio as aioredis

    s = RedisState(redis_config(redis_server.url, "reserve"), replica="r")
    await s.start()
    admin = aioredis.Redis.from_url(redis_server.url)
    try:
        for flush in (False, True):
            if flush:
                await admin.script_flush()
            name = f"k{int(flush)}"
            claims = [
                Claim(f"{name}:tpm", 300, 1000, 60.0),
                Claim(f"{name}:tokens", 300, 10_000, None),
                Claim(f"{name}:cost", 0.25, 5.0, None),
            ]
            calls = s.calls
            res = await s.reserve(claims, Slot(f"{name}:conc", 2))
            assert res.ok
            assert res.lease is not None
            assert res.lease.ok
            assert s.calls - calls == 1
            assert not any(a.local for a in res.admissions)  # decided in Redis, not by the fallback
            assert await s.usage(f"{name}:cost", None) == pytest.approx(0.25)
            assert await admin.zcard(f"reserve:g:{name}:conc") == 1
    finally:
        await admin.aclose()
        await s.close()


async def test_a_reservation_past_its_budget_or_abandoned_counts_once(redis_server: RedisServer) -> None:
    """Redis paused: the fallback decides the reservation at its budget, and the late Redis grant is kept
    once (its slot released: the request holds the fallback's). A caller cancelled while Redis decides (its
    client hung up) leaves nothing behind once Redis answers: takes refunded, slot released."""
    import redis.asyncio as aioredis

    s = RedisState(redis_config(redis_server.url, "late", timeout=0.1), replica="l")
    await s.start()
    blocker = aioredis.Redis.from_url(redis_server.url)
    claims = [Claim("k:tpm", 100, 1000, 60.0), Claim("k:budget", 100, 1000, None)]

    async def settled() -> None:
        for _ in range(300):
            if not s._late:
                return
            await asyncio.sleep(0.01)

    try:
        await blocker.client_pause(400, all=True)
        await asyncio.sleep(0.05)
        res = await s.reserve(claims, Slot("k:conc", 5))
        assert res.ok
        assert all(a.local for a in res.admissions)
        assert res.lease is not None
        assert res.lease.token.startswith("local:")
        await asyncio.sleep(0.45)
        await settled()
        assert await s.usage("k:tpm", 60.0) == pytest.approx(100)  # the late grant counts once, as decided
        assert await s.usage("k:budget", None) == pytest.approx(100)
        assert await blocker.zcard("late:g:k:conc") == 0  # Redis's late slot given back

        s.timeout = 2.0  # now the caller, not the budget, gives up first
        await blocker.client_pause(300, all=True)
        await asyncio.sleep(0.05)
        task = asyncio.create_task(s.reserve(claims, Slot("k:conc", 5)))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.35)
        await settled()
        assert await s.usage("k:tpm", 60.0) == pytest.approx(100)  # nothing of the abandoned one is left
        assert await s.usage("k:budget", None) == pytest.approx(100)
        assert await blocker.zcard("late:g:k:conc") == 0
    finally:
        await blocker.aclose()
        await s.close()


async def test_settlements_ending_in_one_turn_share_one_round_trip(redis_server: RedisServer) -> None:
    """Twenty requests that end together are settled by one script call, each correction and slot exactly."""
    s = RedisState(redis_config(redis_server.url, "batch"), replica="b")
    await s.start()
    try:
        held = [
            await s.reserve([Claim("k:tpm", 50, 10_000, 60.0), Claim("k:budget", 50, 10_000, None)], Slot("k:c", 20))
            for _ in range(20)
        ]
        assert all(r.ok for r in held)
        assert not (await s.acquire("k:c", 20)).ok
        calls = s.calls
        await asyncio.gather(
            *(
                s.settle(
                    [Adjustment("k:tpm", -20, 60.0, r.admissions[0].bucket), Adjustment("k:budget", 5, None)],
                    ("k:c", r.lease.token if r.lease else ""),
                )
                for r in held
            )
        )
        assert s.calls - calls == 1
        assert await s.usage("k:tpm", 60.0) == pytest.approx(20 * 30)
        assert await s.usage("k:budget", None) == pytest.approx(20 * 55)
        slots = [await s.acquire("k:c", 20) for _ in range(21)]
        assert [x.ok for x in slots] == [True] * 20 + [False]  # every slot was given back
    finally:
        await s.close()


async def test_reservations_arriving_in_one_turn_share_one_round_trip_each_all_or_nothing(
    redis_server: RedisServer,
) -> None:
    """Eight requests arrive together against a budget with room for five and two slots left of three: one
    script call decides them all, in order, each on its own (a refused one keeps nothing)."""
    s = RedisState(redis_config(redis_server.url, "many"), replica="m")
    await s.start()
    try:
        first = await s.acquire("k:c", 7)
        assert first.ok
        calls = s.calls
        results = await asyncio.gather(
            *(
                s.reserve([Claim("k:tpm", 10, 10_000, 60.0), Claim("k:budget", 100, 500, None)], Slot("k:c", 7))
                for _ in range(8)
            )
        )
        assert s.calls - calls == 1
        assert [r.ok for r in results] == [True] * 5 + [False] * 3  # the budget holds five
        assert all(r.lease is None for r in results[5:])  # refused by the budget: no slot asked
        assert await s.usage("k:budget", None) == pytest.approx(500)
        assert await s.usage("k:tpm", 60.0) == pytest.approx(50)  # the refused ones' tpm given back
        more = await asyncio.gather(
            *(
                s.reserve([Claim("k:tpm", 10, 10_000, 60.0), Claim("k:other", 1, 500, None)], Slot("k:c", 7))
                for _ in range(2)
            )
        )
        assert [r.ok for r in more] == [True, False]  # 1 + 5 + 1 of 7 slots; the last is refused by its slot
        assert more[1].lease is not None
        assert more[1].lease.in_use == 7
        assert await s.usage("k:other", None) == pytest.approx(1)
    finally:
        await s.close()


def test_commands_are_framed_exactly_as_redis_py_frames_them() -> None:
    """The hiredis framing (``state/clients.py``) sends the same bytes as redis-py's own asyncio
    framing for every argument type tailgate sends, multi-word commands included; and the pool really uses it."""
    import redis.asyncio as aioredis
    from redis.asyncio.connection import Connection

    from tailgate.state.clients import hiredis_packing

    pool = hiredis_packing(aioredis.ConnectionPool.from_url("redis://127.0.0.1:1/0"))
    ours = pool.connection_class()
    plain = Connection()
    cases = [
        ("EVALSHA", "0123abcd", 2, "ns:key:a:tpm", b"ns:g:x", 1.5, 1e-7, 10**20, -3, 0.1, float("inf"), 1 / 3),
        ("SCRIPT LOAD", "local t = redis.call('TIME') return t"),
        (b"CLIENT SETNAME", "tailgate-replica"),
        ("HSET", "ns:flags", "drain:p", 1),
        ("PING",),
    ]
    for args in cases:
        assert b"".join(ours.pack_command(*args)) == b"".join(plain.pack_command(*args)), args
    assert type(ours).__name__.startswith("HiredisPacked")


async def test_scripts_run_with_hiredis_framing(redis_server: RedisServer) -> None:
    """A script call and a multi-word command (SCRIPT LOAD, on start) through the hiredis-framed pool."""
    state = RedisState(redis_config(redis_server.url, "hiredis-framing"))
    await state.start()
    try:
        assert state.status().fallback_active is False
        first = await state.take("key:h:rpm", 2.5, 5, 60.0)
        second = await state.take("key:h:rpm", 2.5, 5, 60.0)
        third = await state.take("key:h:rpm", 2.5, 5, 60.0)
        assert (first.ok, second.ok, third.ok) == (True, True, False)
        assert state.calls >= 3
    finally:
        await state.close()
