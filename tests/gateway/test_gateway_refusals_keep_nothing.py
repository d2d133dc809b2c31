"""A refusal keeps nothing (docs/keys.md): a request refused for any reason — model not allowed, budget, tpm,
concurrency, load shedding, pacing — takes nothing from the key's rpm, tpm, budget or concurrency slot; only
requests that went upstream count. Through a real gateway and simulated providers, on both state backends
(the in-process one and a real redis-server), reading the key's counters in the fleet state."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from conftest import GatewayHandle, SimFactory, eventually
from tailgate.ledger.keys import create_key
from tailgate.ledger.store import open_store
from tailgate.ledger.usage import day_start
from tailgate.sim.faults import Faults
from tailgate.sim.provider import SimProvider

GwFactory = Callable[..., Awaitable[GatewayHandle]]
MSG = [{"role": "user", "content": "hello"}]


@pytest.fixture(params=["local", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any]]:
    """The gateway config's ``state`` section for each backend."""
    if request.param == "local":
        yield {}
        return
    server = request.getfixturevalue("redis_server")
    yield {"state": {"backend": "redis", "url": server.url, "namespace": f"t{uuid.uuid4().hex[:12]}"}}


async def _gateway(sim: SimFactory, gateway: GwFactory, state: dict[str, Any]) -> tuple[GatewayHandle, SimProvider]:
    """The gateway, and the provider behind the ``slow`` model (its ``hold`` fault keeps requests in flight)."""
    fast = await sim("instant", models=("m",))
    slow = await sim("instant", models=("m",))
    paced = await sim("instant", models=("m",))
    config = {
        "admin_key": "admin-0123456789abcdef",
        "keys": [{"id": "filler", "key": "sk-filler-0123456789"}],
        "providers": {
            "p": {"base_url": fast.url, "price": {"input": 1, "output": 2}},
            "slow": {"base_url": slow.url},
            "q": {"base_url": paced.url, "limits": {"rpm": 1}},
        },
        "models": {
            "chat": {"routes": [{"provider": "p", "model": "m"}]},
            "code": {"routes": [{"provider": "p", "model": "m"}]},
            "slow": {"routes": [{"provider": "slow", "model": "m"}]},
            "paced": {"routes": [{"provider": "q", "model": "m"}]},
        },
        "routing": {"probes": {"enabled": False}, "shed": {"max_in_flight": 2, "thresholds": {"batch": 0.5}}},
        **state,
    }
    return await gateway(config), slow


async def _chat(
    session: aiohttp.ClientSession, gw: GatewayHandle, key: str, model: str = "chat", max_tokens: int = 5
) -> tuple[int, dict[str, Any]]:
    payload = {"model": model, "messages": MSG, "max_tokens": max_tokens}
    async with session.post(
        f"{gw.url}/chat/completions", json=payload, headers={"Authorization": f"Bearer {key}"}
    ) as r:
        return r.status, await r.json()


async def _usage(gw: GatewayHandle, name: str, window_s: float | None) -> float:
    return float(await gw.gateway.state.usage(name, window_s))


async def _settles_at(gw: GatewayHandle, name: str, window_s: float | None, want: float) -> None:
    """The counter reads ``want`` (refunds with Redis are sent in the background)."""
    for _ in range(200):
        if await _usage(gw, name, window_s) == want:
            return
        await asyncio.sleep(0.01)
    assert await _usage(gw, name, window_s) == want, name


async def test_refusals_take_nothing_from_the_keys_counters(
    sim: SimFactory, gateway: GwFactory, backend: dict[str, Any]
) -> None:
    """rpm 5 + models [chat]: five 403s, then five 200s for its own model (the sixth is the rpm's 429); budget,
    tpm, concurrency, shed and pacing refusals leave rpm, tpm and budget where the admitted requests put them."""
    gw, slow = await _gateway(sim, gateway, backend)
    assert gw.gateway.ledger is not None
    with open_store(gw.gateway.ledger.path) as conn:
        keys = {
            "models": create_key(conn, "models", rpm=5, models=["chat"])[1],
            "budget": create_key(conn, "budget", rpm=3, tokens_per_day=20)[1],
            "tpm": create_key(conn, "tpm", rpm=3, tpm=100)[1],
            "conc": create_key(conn, "conc", rpm=10, max_concurrency=1)[1],
            "batch": create_key(conn, "batch", rpm=10, traffic_class="batch")[1],
            "paced": create_key(conn, "paced", rpm=10)[1],
        }
    await gw.gateway.key_directory.reload()
    day = int(day_start(time.time()))
    async with aiohttp.ClientSession() as session:
        # model not allowed: five 403s, then the key's own model five times; only then the rpm says no.
        for _ in range(5):
            status, body = await _chat(session, gw, keys["models"], model="code")
            assert (status, body["error"]["code"]) == (403, "model_not_allowed")
        for _ in range(5):
            assert (await _chat(session, gw, keys["models"]))[0] == 200
        status, body = await _chat(session, gw, keys["models"])
        assert (status, body["error"]["code"]) == (429, "rate_limit_exceeded")
        await _settles_at(gw, "key:models:rpm", 60.0, 5)

        # an exhausted budget keeps saying so (never "rate limit reached") and takes nothing.
        for _ in range(5):
            status, body = await _chat(session, gw, keys["budget"], max_tokens=50)
            assert (status, body["error"]["code"]) == (429, "budget_exceeded")
        await _settles_at(gw, "key:budget:rpm", 60.0, 0)
        await _settles_at(gw, f"key:budget:budget:tokens:daily:{day}", None, 0)

        # tpm: a request over the key's whole tokens per minute (a 400 since issue 37: no minute could admit it).
        for _ in range(4):
            status, body = await _chat(session, gw, keys["tpm"], max_tokens=500)
            assert (status, body["error"]["code"]) == (400, "max_tokens_too_large")
        await _settles_at(gw, "key:tpm:rpm", 60.0, 0)
        await _settles_at(gw, "key:tpm:tpm", 60.0, 0)

        # concurrency: one served (held upstream until the other two were answered), two refused; only the
        # served one is counted.
        slow.set_faults(Faults(hold=True))
        conc = [asyncio.ensure_future(_chat(session, gw, keys["conc"], model="slow")) for _ in range(3)]
        await eventually(lambda: slow.held == 1 and sum(t.done() for t in conc) == 2, 10.0)
        slow.set_faults(Faults(hold=False))
        assert sorted(r[0] for r in await asyncio.gather(*conc)) == [200, 429, 429]
        await _settles_at(gw, "key:conc:rpm", 60.0, 1)

        # load shedding: a batch key's requests while another request, held upstream until they were
        # answered, holds half of max_in_flight.
        slow.set_faults(Faults(hold=True))
        filler = asyncio.ensure_future(_chat(session, gw, "sk-filler-0123456789", model="slow"))
        await eventually(lambda: slow.held == 1 and _in_flight(gw) == 1, 10.0)
        for _ in range(3):
            status, body = await _chat(session, gw, keys["batch"])
            assert status == 429, body
            assert "shedding" in body["error"]["message"]
        assert not filler.done()
        slow.set_faults(Faults(hold=False))
        assert (await filler)[0] == 200
        await _settles_at(gw, "key:batch:rpm", 60.0, 0)

        # pacing: the provider's rpm 1 admits one; the next two are paced out (429) and not counted.
        assert (await _chat(session, gw, keys["paced"], model="paced"))[0] == 200
        for _ in range(2):
            status, body = await _chat(session, gw, keys["paced"], model="paced")
            assert status == 429, body
            assert "known rate limit" in body["error"]["message"]
        await _settles_at(gw, "key:paced:rpm", 60.0, 1)


def _in_flight(gw: GatewayHandle) -> int:
    return sum(p.in_flight for p in gw.gateway.providers.values())
