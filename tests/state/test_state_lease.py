"""Leased slices: most takes are answered locally, and the fleet still never admits more than the limit."""

from __future__ import annotations

import asyncio
import time

import pytest

from conftest import StateFactory
from tailgate.state import LocalState
from tailgate.state.lease import LeasedLimiter


async def test_three_replicas_with_slices_admit_the_limit_and_no_more(replicas: StateFactory) -> None:
    """3 replicas × 2,000 takes against a limit of 3,000: 3,000 − at most 1 % pass, never more; nine takes in
    ten were spent from local slices (one round trip per slice of 10 or more, renewals included)."""
    # The clock stands still and no tick runs: how often a replica gives an idle slice back (ticks) and how it sizes
    # the next one (its measured spend rate) are the machine's timing, not the promise. With a frozen clock every
    # renewal is a full slice (1 % of the limit ÷ the replicas seen), so the round trips follow from the design.
    now = 1000.0
    limiters = [LeasedLimiter(await replicas(), clock=lambda: now) for _ in range(3)]

    async def drive(lim: LeasedLimiter, n: int) -> int:
        ok = 0
        for _ in range(n):
            ok += (await lim.take("key:hot:rpm", 1, 3000, 60.0)).ok
        return ok

    admitted = sum(await asyncio.gather(*(drive(lim, 800) for lim in limiters)))
    assert admitted == 2400  # below the limit every take passes
    local = sum(lim.local_takes for lim in limiters)
    remote = sum(lim.remote_takes for lim in limiters)
    # Each replica's first take fetches its first slice; every later take is spent locally: a renewal is asked for
    # when half a slice is spent and, if it is still in flight when the slice runs dry, waited for (never a second
    # round trip). Renewals are full slices (≥ 10 units: 1 % ÷ at most 3 replicas), so at most 81 per replica.
    assert local == 3 * (800 - 1), (local, remote)
    assert remote <= 3 * (1 + 81), (local, remote)
    admitted += sum(await asyncio.gather(*(drive(lim, 1200) for lim in limiters)))
    for lim in limiters:
        await lim.close()
    assert 0.99 * 3000 <= admitted <= 3000
    usage = await limiters[0].state.usage("key:hot:rpm", 60.0)
    assert usage == admitted  # every unspent slice was given back


@pytest.mark.timing  # each take is Redis's decision only within the call budget; past it the fallback decides
async def test_a_small_limit_is_decided_per_request(replicas: StateFactory) -> None:
    """rpm 60 is too small to slice: every take is a take of its own, exact across replicas."""
    limiters = [LeasedLimiter(await replicas()) for _ in range(3)]
    results = await asyncio.gather(*(lim.take("key:small:rpm", 1, 60, 60.0) for lim in limiters for _ in range(40)))
    assert sum(r.ok for r in results) == 60
    assert all(lim.local_takes == 0 for lim in limiters)


async def test_rpm_60_admits_60_per_window_over_two_windows_across_three_replicas(replicas: StateFactory) -> None:
    """A gateway key's rpm (``admit_key``: take 1 of 60 in a 60 s window) at a tenth of its time: 2x the limit
    offered for two 6 s windows over three replicas admits 120 +- 4, and no window (60 consecutive buckets on
    Redis's clock) holds more than 60."""
    # The minute-scale version of tests/fleet/test_fleet.py's rpm smoke. The window is a parameter of the take and
    # its buckets are 1/60 of it, so 6 s is the same computation as 60 s, ten times sooner; counting on Redis's
    # buckets (the clock the limit is kept on) instead of the client's clock makes the window check exact.
    window = 6.0
    limiters = [LeasedLimiter(await replicas()) for _ in range(3)]
    admitted: list[int] = []

    async def one(i: int) -> None:
        adm = await limiters[i % 3].take("key:team:rpm", 1, 60, window)
        if adm.ok:
            assert adm.bucket is not None
            admitted.append(adm.bucket)

    t0 = time.monotonic()
    tasks = []
    for i in range(240):  # 20 per second: 2x the limit of 60 per 6 s
        await asyncio.sleep(max(0.0, t0 + i * window / 120 - time.monotonic()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    for lim in limiters:
        await lim.close()
    assert 116 <= len(admitted) <= 124, len(admitted)
    worst = max(sum(1 for b in admitted if start <= b < start + 60) for start in set(admitted))
    assert worst <= 60, worst


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


async def test_a_balance_carried_into_a_renewal_in_a_newer_bucket_goes_back_to_its_own(
    replicas: StateFactory,
) -> None:
    """A slice taken in one of the window's buckets (1 s of a 60 s window) and renewed in a later one: the balance
    the renewal carries over was counted in the earlier bucket, and goes back there. Given back to the renewal's
    bucket, which counted only the renewal, the refund stopped at 0 there and the rest stayed counted for the
    window (8 units here; 1,205 counted for 1,200 spent in the burst test above under load)."""
    # A frozen clock and no ticks: the slice is given back at close only, and every renewal is a full slice.
    lim = LeasedLimiter(await replicas(), min_slice=20, clock=lambda: 1000.0)
    first = await lim.take("key:carry:rpm", 1, 30_000, 60.0)  # the request's unit and a slice of 20
    assert first.ok
    assert lim.remote_takes == 1
    # Redis's clock (the buckets') moves on to a later bucket; nothing of this test is judged by the wait.
    for _ in range(100):
        if (await lim.state.take("key:probe:rpm", 1, 30_000, 60.0)).bucket != first.bucket:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("Redis's bucket did not move on in 5 s")
    for _ in range(11):  # down to 9 of 20: under half, so the renewal (300) is asked for
        assert (await lim.take("key:carry:rpm", 1, 30_000, 60.0)).ok
    await asyncio.gather(*lim._background)
    assert lim.remote_takes == 2
    renewed = await lim.take("key:carry:rpm", 1, 30_000, 60.0)
    await lim.close()
    assert await lim.state.usage("key:carry:rpm", 60.0) == 13  # 13 spent: 321 counted, 308 given back
    assert renewed.bucket == first.bucket  # the carried units are spent first, as their own bucket's
