"""Adaptive routing wired into the gateway: weights follow measured P90, breakers cut a failing provider."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from conftest import GatewayHandle, SimFactory, two_provider_config
from tailgate.sim.faults import Faults

GwFactory = Callable[..., Awaitable[GatewayHandle]]
BODY = {"model": "deepseek-v3.2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}
ADMIN = {"Authorization": "Bearer admin-key-0123456789"}


async def _send(session: aiohttp.ClientSession, gw: GatewayHandle, n: int, concurrency: int = 8) -> Counter[str]:
    sem = asyncio.Semaphore(concurrency)

    async def one() -> str:
        async with sem, session.post(f"{gw.url}/chat/completions", json=BODY) as r:
            await r.read()
            assert r.status == 200
            return str(r.headers["x-tailgate-provider"])

    return Counter(await asyncio.gather(*(one() for _ in range(n))))


async def test_adaptive_moves_traffic_off_a_provider_over_its_slo(sim: SimFactory, gateway: GwFactory) -> None:
    """Primary's TTFT (300 ms) breaks the alias SLO (P90 TTFT 100 ms): its 80% share falls to a trickle."""
    a = await sim("instant", models=("up-primary",), faults={"stall_first_token_s": 0.3})
    b = await sim("instant", models=("up-secondary",))
    config: dict[str, Any] = two_provider_config(
        a.url,
        b.url,
        routing={"policy": "adaptive", "slo": {"ttft_p90": "100ms", "e2e_p90": "1s"}},
        admin_key="admin-key-0123456789",
    )
    gw = await gateway(config)
    async with aiohttp.ClientSession() as session:
        for _ in range(5):  # weights are recomputed about every second and smoothed over ~3 s
            await _send(session, gw, 40)
            await asyncio.sleep(1.0)
        served = await _send(session, gw, 200)
        async with session.get(f"{gw.root_url}/admin/providers", headers=ADMIN) as r:
            admin = await r.json()
    # 80 × (0.1 / 0.3)² ≈ 9 against the secondary's 20: about 30% instead of the configured 80%.
    assert served["primary"] / 200 < 0.45, served
    weights = admin["routing"]["deepseek-v3.2"]["weights"]
    assert weights["primary"]["effective_weight"] < weights["primary"]["configured_weight"]
    assert admin["routing"]["deepseek-v3.2"]["policy"] == "adaptive"


async def test_breaker_opens_on_a_failing_provider_and_stops_attempts(sim: SimFactory, gateway: GwFactory) -> None:
    """Every primary call fails: after a few failures its breaker opens and requests go straight to the secondary."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    a.set_faults(Faults(error_rate=1.0, error_statuses=[500]))
    gw = await gateway(two_provider_config(a.url, b.url, admin_key="admin-key-0123456789"))
    async with aiohttp.ClientSession() as session:
        served = await _send(session, gw, 60, concurrency=1)
        before = sum(1 for r in a.truth.records() if r.status == 500)
        await _send(session, gw, 40, concurrency=1)
        after = sum(1 for r in a.truth.records() if r.status == 500)
        async with session.get(f"{gw.root_url}/admin/providers", headers=ADMIN) as r:
            admin = await r.json()
        async with session.get(f"{gw.root_url}/metrics") as r:
            metrics = await r.text()
    assert served == Counter({"secondary": 60})  # no client saw the failures
    assert after - before == 0  # open breaker: no more attempts at the primary
    primary = next(p for p in admin["providers"] if p["name"] == "primary")
    assert primary["breaker"]["state"] == "open"
    assert 'tailgate_breaker_transitions_total{provider="primary",state="open"} 1.0' in metrics
    # scrape-time gauges: the open breaker (2) and the primary's effective weight 0, the secondary's 20
    assert 'tailgate_breaker_state{provider="primary"} 2.0' in metrics
    assert 'tailgate_breaker_state{provider="secondary"} 0.0' in metrics
    assert 'tailgate_effective_weight{alias="deepseek-v3.2",provider="primary"} 0.0' in metrics
    assert 'tailgate_effective_weight{alias="deepseek-v3.2",provider="secondary"} 20.0' in metrics


async def test_adaptive_cuts_over_within_seconds_of_a_degradation(sim: SimFactory, gateway: GwFactory) -> None:
    """Default policy (adaptive): healthy, the split is 80/20; once the primary's first token takes 0.5 s
    (5x its 100 ms SLO), its share of new requests falls below 35 % within 5 s, and stays low."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    routing = {"slo": {"ttft_p90": "100ms", "e2e_p90": "1s"}, "probes": {"enabled": False}}
    gw = await gateway(two_provider_config(a.url, b.url, routing=routing))
    assert gw.gateway.policy_for("deepseek-v3.2").name == "adaptive"
    loop = asyncio.get_running_loop()
    sent: list[tuple[float, asyncio.Task[str]]] = []

    async def one(session: aiohttp.ClientSession) -> str:
        async with session.post(f"{gw.url}/chat/completions", json=BODY) as r:
            await r.read()
            assert r.status == 200
            return str(r.headers["x-tailgate-provider"])

    async with aiohttp.ClientSession() as session:
        t0 = loop.time()
        fault_at = t0 + 3.0
        faulted = False
        while loop.time() < t0 + 9.0:
            if not faulted and loop.time() >= fault_at:
                a.set_faults(Faults(stall_first_token_s=0.5))
                faulted = True
            sent.append((loop.time() - t0, asyncio.create_task(one(session))))
            await asyncio.sleep(1 / 40)
        await asyncio.gather(*(task for _, task in sent))

    def share(lo: float, hi: float) -> float:
        picks = [task.result() for at, task in sent if lo <= at < hi]
        return sum(1 for p in picks if p == "primary") / len(picks)

    assert 0.65 < share(0.5, 3.0) < 0.95  # healthy: the configured 80 %
    assert share(8.0, 9.0) < 0.35  # 5 s after the fault: cut over
    assert share(6.0, 9.0) < 0.4
