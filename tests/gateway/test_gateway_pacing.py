"""Rate-limit pacing through a real gateway: below a provider's known RPM, spill, and an own 429 when paced out."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from conftest import GatewayHandle, SimFactory, two_provider_config

GwFactory = Callable[..., Awaitable[GatewayHandle]]
MSG = [{"role": "user", "content": "hi"}]
ADMIN = {"Authorization": "Bearer admin-key-0123456789"}


async def _burst(
    session: aiohttp.ClientSession, gw: GatewayHandle, n: int, per_s: float
) -> list[tuple[int, str, dict[str, Any]]]:
    """``n`` requests at ``per_s`` (open loop): (status, provider, body) each."""

    async def one() -> tuple[int, str, dict[str, Any]]:
        body = {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 2}
        async with session.post(f"{gw.url}/chat/completions", json=body) as r:
            data = await r.json()
            return (
                r.status,
                r.headers.get("x-tailgate-provider", "-"),
                data | {"retry-after": r.headers.get("Retry-After")},
            )

    tasks = []
    for _ in range(n):
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(1.0 / per_s)
    return list(await asyncio.gather(*tasks))


async def test_pacing_keeps_upstream_429s_near_zero_and_spills(sim: SimFactory, gateway: GwFactory) -> None:
    """The primary allows 2 req/s per key; with ``limits.rpm: 120`` the gateway paces it at 90 % (1.8/s)
    and spills the rest of its 80 % share to the secondary: no upstream 429, every client request served."""
    a = await sim("instant", models=("up-primary",), faults={"rate_limit_rps": 2})
    b = await sim("instant", models=("up-secondary",))
    config = two_provider_config(a.url, b.url, admin_key="admin-key-0123456789", routing={"probes": {"enabled": False}})
    config["providers"]["primary"]["limits"] = {"rpm": 120}
    gw = await gateway(config)
    async with aiohttp.ClientSession() as session:
        out = await _burst(session, gw, 60, 20.0)  # 3 s at 20 req/s: unpaced, the primary would get ~16/s
        async with session.get(f"{gw.root_url}/admin/providers", headers=ADMIN) as r:
            admin = await r.json()
        async with session.get(f"{gw.root_url}/metrics") as r:
            metrics = await r.text()
    assert all(status == 200 for status, _, _ in out)
    assert 'tailgate_paced_total{provider="primary"}' in metrics
    assert 'tailgate_paced_total{provider="secondary"}' not in metrics
    served = Counter(p for _, p, _ in out)
    upstream_429 = sum(1 for r in a.truth.records() if r.status == 429)
    assert upstream_429 == 0
    assert 3 <= served["primary"] <= 9  # ≈ 1.8 burst + 1.8/s × 3 s
    primary = next(p for p in admin["providers"] if p["name"] == "primary")
    assert primary["pacer"]["rpm"]["limit"] == 120
    assert primary["pacer"]["skipped"] >= 30


async def test_every_route_paced_out_gives_an_own_429_with_retry_after(sim: SimFactory, gateway: GwFactory) -> None:
    """When no route can take a request now, the client gets a 429 in the OpenAI shape with a Retry-After."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    config = two_provider_config(a.url, b.url, routing={"probes": {"enabled": False}})
    config["providers"]["primary"]["limits"] = {"rpm": 60}
    config["providers"]["secondary"]["limits"] = {"rpm": 60}
    gw = await gateway(config)
    async with aiohttp.ClientSession() as session:
        out = await _burst(session, gw, 10, 50.0)
    statuses = Counter(s for s, _, _ in out)
    assert statuses[200] == 2  # one request's burst per provider (0.9/s each)
    assert statuses[429] == 8
    refused = next(body for s, _, body in out if s == 429)
    assert refused["error"]["type"] == "rate_limit_error" or refused["error"]["code"] == "rate_limit_exceeded"
    assert refused["retry-after"] in ("1", "2")
    assert not [r for r in a.truth.records() + b.truth.records() if r.status == 429]


async def test_upstream_429_pauses_the_provider(sim: SimFactory, gateway: GwFactory) -> None:
    """Without a configured limit the first 429 (Retry-After 1 s) pauses the primary: new requests go to
    the secondary instead of collecting more 429s."""
    a = await sim("instant", models=("up-primary",), faults={"rate_limit_rps": 1})
    b = await sim("instant", models=("up-secondary",))
    gw = await gateway(two_provider_config(a.url, b.url, routing={"probes": {"enabled": False}}))
    async with aiohttp.ClientSession() as session:
        out = await _burst(session, gw, 30, 30.0)
    assert all(status == 200 for status, _, _ in out)
    assert sum(1 for r in a.truth.records() if r.status == 429) <= 2
