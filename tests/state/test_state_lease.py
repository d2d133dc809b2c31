"""Leased slices: most takes are answered locally, and the fleet still never admits more than the limit."""

from __future__ import annotations

import asyncio

from conftest import StateFactory
from tailgate.state import LocalState
from tailgate.state.lease import LeasedLimiter


async def test_three_replicas_with_slices_admit_the_limit_and_no_more(replicas: StateFactory) -> None:
    """3 replicas × 2,000 takes against a limit of 3,000: 3,000 − at most 1 % pass, never more; most takes
    were spent from local slices (no round trip)."""
    limiters = [LeasedLimiter(await replicas(), tick_s=0.05) for _ in range(3)]
    for lim in limiters:
        lim.start()

    async def drive(lim: LeasedLimiter, n: int) -> int:
        ok = 0
        for _ in range(n):
            ok += (await lim.take("key:hot:rpm", 1, 3000, 60.0)).ok
        return ok

    admitted = sum(await asyncio.gather(*(drive(lim, 800) for lim in limiters)))
    assert admitted == 2400  # below the limit every take passes
    local = sum(lim.local_takes for lim in limiters)
    remote = sum(lim.remote_takes for lim in limiters)
    assert local > 5 * remote, (local, remote)  # slices of 10 (1 % ÷ 3 replicas): ~1 round trip per 11 takes
    admitted += sum(await asyncio.gather(*(drive(lim, 1200) for lim in limiters)))
    for lim in limiters:
        await lim.close()
    assert 0.99 * 3000 <= admitted <= 3000
    usage = await limiters[0].state.usage("key:hot:rpm", 60.0)
    assert usage == admitted  # every unspent slice was given back


async def test_a_small_limit_is_decided_per_request(replicas: StateFactory) -> None:
    """rpm 60 is too small to slice: every take is a take of its own, exact across replicas."""
    limiters = [LeasedLimiter(await replicas()) for _ in range(3)]
    results = await asyncio.gather(*(lim.take("key:small:rpm", 1, 60, 60.0) for lim in limiters for _ in range(40)))
    assert sum(r.ok for r in results) == 60
    assert all(lim.local_takes == 0 for lim in limiters)


async def test_the_local_backend_is_not_sliced() -> None:
    """In one process a take is already a dict update: no slices, exact."""
    lim = LeasedLimiter(LocalState())
    assert [(await lim.take("k", 1, 5000, 60.0)).ok for _ in range(3)] == [True] * 3
    assert lim.local_takes == 0
    assert await lim.state.usage("k", 60.0) == 3


async def test_concurrent_takes_on_one_replica_leak_no_slice(replicas: StateFactory) -> None:
    """400 takes at once on one replica: they share one slice fetch at a time, and after close every unit
    Redis counted was either spent or given back (none lost to slices fetched side by side)."""
    lim = LeasedLimiter(await replicas(), tick_s=0.05)
    lim.start()
    for _ in range(3):
        results = await asyncio.gather(*(lim.take("key:burst:rpm", 1, 30_000, 60.0) for _ in range(400)))
        assert all(r.ok for r in results)
    await lim.close()
    assert await lim.state.usage("key:burst:rpm", 60.0) == 1200
    assert lim.remote_takes < 100
