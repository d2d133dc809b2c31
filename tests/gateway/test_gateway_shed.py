"""Traffic classes under pressure: batch is shed first (routing.shed), interactive goes to the fastest route."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from conftest import GatewayHandle, SimFactory, eventually, two_provider_config
from tailgate.ledger import read_rows
from tailgate.routing import SLO, AdaptivePolicy, BreakerConfig, BreakerRegistry, HealthRegistry, Route
from tailgate.sim.faults import Faults
from tailgate.upstream.events import CallResult

GwFactory = Callable[..., Awaitable[GatewayHandle]]
MSG = [{"role": "user", "content": "hi"}]


async def test_batch_is_shed_first_and_other_classes_only_at_capacity(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """max_in_flight 4, batch at 50 %: with two streams in flight a batch request gets a 429 with Retry-After
    (and a ledger row with outcome 'shed'), an untagged one is admitted; at 4 in flight both shed. The requests
    in flight are held by the simulators' ``hold`` fault until the test releases them."""
    a = await sim("instant", models=("up-primary",), faults={"hold": True})
    b = await sim("instant", models=("up-secondary",), faults={"hold": True})
    config = two_provider_config(a.url, b.url, routing={"shed": {"max_in_flight": 4, "thresholds": {"batch": 0.5}}})
    gw = await gateway(config)
    client = oai(gw.url)

    async def slow() -> None:
        stream = await client.chat.completions.create(model="deepseek-v3.2", messages=MSG, max_tokens=4, stream=True)
        async for _ in stream:
            pass

    async with aiohttp.ClientSession() as session:

        async def post(cls: str | None) -> tuple[int, dict[str, str], bytes]:
            headers = {"x-tailgate-class": cls} if cls else {}
            body = {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 1}
            async with session.post(f"{gw.url}/chat/completions", json=body, headers=headers) as resp:
                return resp.status, dict(resp.headers), await resp.read()

        holders = [asyncio.create_task(slow()) for _ in range(2)]
        await eventually(lambda: a.held + b.held == 2, 10.0)  # both streams are in flight
        status, headers, body = await post("batch")
        assert status == 429, body
        assert headers["Retry-After"] == "1"
        assert b"shedding 'batch' traffic" in body
        assert b"routing.shed.max_in_flight" in body
        admitted = asyncio.create_task(post(None))  # untagged at 50 %: admitted, the third in flight
        await eventually(lambda: a.held + b.held == 3, 10.0)
        holders.append(asyncio.create_task(slow()))
        await eventually(lambda: a.held + b.held == 4, 10.0)  # four in flight: pressure 1.0
        status, _, body = await post(None)
        assert status == 429, body
        a.set_faults(Faults(hold=False))
        b.set_faults(Faults(hold=False))
        status, _, body = await admitted
        assert status == 200, body
        await asyncio.gather(*holders)
        status, _, body = await post("batch")  # pressure gone: served again
        assert status == 200, body
        async with session.get(f"{gw.root_url}/metrics") as resp:
            metrics = await resp.text()
    assert 'tailgate_shed_total{alias="deepseek-v3.2",traffic_class="batch"} 1.0' in metrics
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    shed = [r for r in rows if r.outcome == "shed"]
    assert [(r.status, r.traffic_class, r.provider) for r in shed] == [(429, "batch", None), (429, None, None)]


def test_interactive_follows_the_configured_split() -> None:
    """Both routes within the SLO: untagged and interactive traffic both follow the 80/20 weights, even though
    b is faster (issue 10: fastest-first is the least-latency policy); once b's breaker is open, all go to a."""
    t = [1000.0]
    health = HealthRegistry(clock=lambda: t[0])
    breakers = BreakerRegistry(BreakerConfig(consecutive_failures=2), clock=lambda: t[0])
    policy = AdaptivePolicy(health, breakers=breakers, slo=SLO(2.0, 6.0), clock=lambda: t[0], rng=random.Random(3))
    a, b = Route("m", "a", "ma", 80), Route("m", "b", "mb", 20)
    for _ in range(20):
        health.get("a", "ma").observe(CallResult(200, None, 0.0, True, ttft_ms=900, e2e_ms=1800, output_tokens=5))
        health.get("b", "mb").observe(CallResult(200, None, 0.0, True, ttft_ms=300, e2e_ms=900, output_tokens=5))
    firsts = [policy.order([a, b])[0].provider for _ in range(2000)]
    assert firsts.count("a") == 1600  # untagged: the weights, exactly
    interactive = [policy.order([a, b], "interactive")[0].provider for _ in range(2000)]
    assert interactive.count("a") == 1600
    for _ in range(2):
        breakers.get("b").record_result(CallResult(None, "connect", 0.0, True))
    assert breakers.get("b").state == "open"
    assert [r.provider for r in policy.order([a, b], "interactive")] == ["a"]


def test_shed_config_errors_name_the_field() -> None:
    """A bad shed setting is a config error naming its path, not a silent default."""
    from tailgate.config.loader import ConfigError, validate_data
    from tailgate.config.schema import GatewayConfig

    url = "http://127.0.0.1:9/v1"
    config = two_provider_config(url, url, routing={"shed": {"max_in_flight": 0}})
    with pytest.raises(ConfigError, match=r"routing\.shed\.max_in_flight"):
        validate_data(config, GatewayConfig, "gw.yaml")
