"""When no route can take a request, the refusal says per provider why — never more than is true."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from conftest import GatewayHandle, SimFactory

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


async def _config(sim: SimFactory) -> dict[str, Any]:
    a, b = await sim("instant", models=("up",)), await sim("instant", models=("up",))
    return {
        "providers": {"a": {"base_url": a.url}, "b": {"base_url": b.url}},
        "models": {"m": {"routes": [{"provider": "a", "model": "up"}, {"provider": "b", "model": "up"}]}},
    }


async def _refusal(gw: GatewayHandle) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.post(f"{gw.url}/chat/completions", json=BODY) as resp:
        return resp.status, (await resp.json())["error"]["message"]


async def test_one_paused_and_one_drained_is_not_every_provider_rate_limited(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """a paused by a 429, b drained: a 429 that names both reasons, not "every provider is rate limited"."""
    gw = await gateway(await _config(sim))
    providers = gw.gateway.core.providers
    providers["a"].pause(30.0, time.monotonic())
    providers["b"].drained = True
    status, message = await _refusal(gw)
    assert status == 429, message
    assert message.startswith("No provider can take a request for 'm' now (a: rate limited (429), paused for "), message
    assert ", b: drained). Retry after " in message, message
    assert "Every provider" not in message


async def test_every_provider_paused_says_every_provider_is_rate_limited(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """Both paused by a 429: that sentence is true, and it is kept."""
    gw = await gateway(await _config(sim))
    for p in gw.gateway.core.providers.values():
        p.pause(30.0, time.monotonic())
    status, message = await _refusal(gw)
    assert status == 429, message
    assert message.startswith("Every provider for 'm' is rate limited right now. Retry after "), message
