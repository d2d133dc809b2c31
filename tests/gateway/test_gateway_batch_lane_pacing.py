"""Priority at the pacer through a real gateway (docs/routing.md, "The batch lane at the pacer").

Live requests marked batch (``x-tailgate-class: batch`` or ``service_tier: "flex"``) wait at a provider's pacer for
the budget interactive traffic leaves, up to ``routing.pacing.batch_wait``; interactive requests never wait behind
them and are never moved off the provider because of them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from conftest import GatewayHandle, SimFactory
from tailgate.gateway.request_path.attempts import Attempts
from tailgate.routing import Route

GwFactory = Callable[..., Awaitable[GatewayHandle]]
BATCH = {"x-tailgate-class": "batch"}


def _config(primary: str, secondary: str, rpm: float, batch_wait: float) -> dict[str, Any]:
    return {
        "providers": {
            "primary": {"base_url": primary, "limits": {"rpm": rpm}},
            "secondary": {"base_url": secondary},
        },
        "models": {
            "m": {
                "routes": [
                    {"provider": "primary", "model": "up", "weight": 1},
                    {"provider": "secondary", "model": "up", "weight": 0},  # a pure fallback
                ]
            }
        },
        "routing": {"probes": {"enabled": False}, "pacing": {"batch_wait": batch_wait}},
    }


async def _chat(
    session: aiohttp.ClientSession, gw: GatewayHandle, headers: dict[str, str], **body: Any
) -> tuple[int, str, float]:
    t0 = time.monotonic()
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2} | body
    async with session.post(f"{gw.url}/chat/completions", json=payload, headers=headers) as r:
        await r.read()
        return r.status, r.headers.get("x-tailgate-provider", "-"), time.monotonic() - t0


async def test_batch_requests_wait_at_the_pacer_instead_of_moving_on(sim: SimFactory, gateway: GwFactory) -> None:
    """rpm 240 (paced at 3.6/s, a bucket of 3.6): 10 batch requests at once all go to the primary — the first
    ones at once, the rest as the bucket refills, none to the fallback — and the primary answers no 429."""
    a = await sim("instant", models=("up",), faults={"rate_limit_rpm": 240})
    b = await sim("instant", models=("up",))
    gw = await gateway(_config(a.url, b.url, 240, 10.0))
    async with aiohttp.ClientSession() as session:
        out = await asyncio.gather(
            *(_chat(session, gw, BATCH) for _ in range(8)),
            *(_chat(session, gw, {}, service_tier="flex") for _ in range(2)),
        )
    assert [s for s, _, _ in out] == [200] * 10
    assert Counter(p for _, p, _ in out) == {"primary": 10}
    assert sum(r.status == 429 for r in a.truth.records()) == 0
    assert max(t for _, _, t in out) >= 1.0  # (10 - 3.6) / 3.6 s: they waited for the refill


async def test_a_batch_request_past_its_wait_moves_on(sim: SimFactory, gateway: GwFactory) -> None:
    """``batch_wait: 0``: a batch request never waits; it goes to the primary while the bucket has budget (rpm 120:
    a bucket of 1.8, the first goes) and, paced out, to the fallback as interactive does."""
    a = await sim("instant", models=("up",))
    b = await sim("instant", models=("up",))
    gw = await gateway(_config(a.url, b.url, 120, 0.0))
    async with aiohttp.ClientSession() as session:
        out = [await _chat(session, gw, BATCH) for _ in range(4)]
    assert [s for s, _, _ in out] == [200] * 4
    assert out[0][1] == "primary"
    # none waited: a batch request that had waited for the refill (1.8/s) would have gone to the primary
    assert Counter(p for _, p, _ in out)["secondary"] >= 2


async def test_interactive_requests_are_never_moved_off_the_provider_by_batch_work(
    sim: SimFactory, gateway: GwFactory
) -> None:
    """rpm 600 (9/s, a bucket of 9): 60 batch requests wait in the lane while interactive requests arrive at
    3/s for 3 s. Every interactive request goes to the primary at once (none moved to the fallback, none
    waiting); the batch lane still gets the budget they leave (most of it), and the primary answers no 429."""
    a = await sim("instant", models=("up",), faults={"rate_limit_rpm": 600})
    b = await sim("instant", models=("up",))
    gw = await gateway(_config(a.url, b.url, 600, 20.0))
    async with aiohttp.ClientSession() as session:
        batch = [asyncio.create_task(_chat(session, gw, BATCH)) for _ in range(60)]
        await asyncio.sleep(0.3)  # the lane is full and drains the bucket to what it must leave
        interactive = []
        for _ in range(9):
            interactive.append(asyncio.create_task(_chat(session, gw, {})))
            await asyncio.sleep(1 / 3)
        inter = await asyncio.gather(*interactive)
        done = await asyncio.gather(*batch)
    # none waited for the pacer: an interactive request asks it once and, paced out, goes to the fallback
    assert [(s, p) for s, p, _ in inter] == [(200, "primary")] * 9
    assert all(s == 200 for s, _, _ in done)
    assert Counter(p for _, p, _ in done)["primary"] == 60  # the lane waited for the primary's spare budget
    assert sum(r.status == 429 for r in a.truth.records()) == 0


@pytest.mark.timing  # the reserve follows the interactive rate measured over the last 2 s of wall time
async def test_a_burst_within_the_measured_interactive_rate_is_not_moved_by_batch_work(
    sim: SimFactory, gateway: GwFactory
) -> None:
    """One host, rpm 600 (9/s, a bucket of 9): 60 batch requests wait in the lane while interactive requests arrive
    at 3/s for 2 s, then 3 at once. The batch lane keeps the measured interactive demand × the bucket's second
    (~3 requests) plus one, so the burst is served by the primary too: no interactive request moved (before the
    interactive demand was measured on a locally paced provider the lane kept one request, and 2 of the 3 moved)."""
    a = await sim("instant", models=("up",), faults={"rate_limit_rpm": 600})
    b = await sim("instant", models=("up",))
    gw = await gateway(_config(a.url, b.url, 600, 20.0))
    async with aiohttp.ClientSession() as session:
        batch = [asyncio.create_task(_chat(session, gw, BATCH)) for _ in range(60)]
        await asyncio.sleep(0.3)  # the lane is full and drains the bucket to what it must leave
        steady = []
        for _ in range(6):
            steady.append(asyncio.create_task(_chat(session, gw, {})))
            await asyncio.sleep(1 / 3)
        burst = await asyncio.gather(*(_chat(session, gw, {}) for _ in range(3)))
        inter = await asyncio.gather(*steady) + burst
        done = await asyncio.gather(*batch)
    assert Counter(p for _, p, _ in burst) == {"primary": 3}
    assert [(s, p) for s, p, _ in inter] == [(200, "primary")] * 9
    assert all(s == 200 for s, _, _ in done)
    assert Counter(p for _, p, _ in done)["primary"] == 60
    assert sum(r.status == 429 for r in a.truth.records()) == 0


@pytest.mark.timing  # a refill of 5.5 s against an answer at once; the bound (2.5 s) leaves a loaded machine room
async def test_a_batch_attempt_asks_the_breaker_before_waiting_at_the_pacer(
    sim: SimFactory, gateway: GwFactory
) -> None:
    """rpm 12 (0.18/s, a bucket of one request): the first batch request empties the primary's bucket, then its
    breaker opens after the request's routing order was made (another request's failure). The batch attempt at the
    primary asks the breaker before the pacer: refused at once, instead of waiting ~5.5 s for the refill (its
    ``batch_wait`` is 10 s) and being refused after it with the primary's token spent."""
    a = await sim("instant", models=("up",))
    b = await sim("instant", models=("up",))
    gw = await gateway(_config(a.url, b.url, 12, 10.0))
    async with aiohttp.ClientSession() as session:
        assert (await _chat(session, gw, BATCH))[:2] == (200, "primary")
    core = gw.gateway.core
    core.breakers.get("primary").force_open(60.0, "test: the primary is down")
    paced: list[Any] = []
    t0 = time.perf_counter()
    admitted = await Attempts(core).admit_lane(Route("m", "primary", "up", 1.0), 0.0, paced, "batch", t0 + 10.0)
    assert not admitted
    assert time.perf_counter() - t0 < 2.5
