"""Adaptive routing wired into the gateway: the configured split while healthy, none to a far-over-SLO
provider, breakers cut a failing one, priors from the store (docs/routing.md, the promises)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp

from conftest import GatewayHandle, SimFactory, two_provider_config
from tailgate.ledger import open_db
from tailgate.ledger.samples import Sample, insert_samples
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


async def test_adaptive_sends_nothing_to_a_provider_far_over_its_slo(sim: SimFactory, gateway: GwFactory) -> None:
    """Primary's TTFT (600 ms) is 3× the alias SLO (P90 TTFT 200 ms): once seen, not one more client request
    goes to it (probes only), and /admin/providers says so. (200 ms leaves the instant secondary far within
    the SLO on a loaded machine too.)"""
    a = await sim("instant", models=("up-primary",), faults={"stall_first_token_s": 0.6})
    b = await sim("instant", models=("up-secondary",))
    config: dict[str, Any] = two_provider_config(
        a.url,
        b.url,
        routing={"policy": "adaptive", "slo": {"ttft_p90": "200ms", "e2e_p90": "2s"}},
        admin_key="admin-key-0123456789",
    )
    gw = await gateway(config)
    async with aiohttp.ClientSession() as session:
        await _send(session, gw, 40)
        await asyncio.sleep(0.5)
        before = len(a.truth.records())
        served = await _send(session, gw, 200)
        reached = a.truth.records()[before:]
        async with session.get(f"{gw.root_url}/admin/providers", headers=ADMIN) as r:
            admin = await r.json()
    assert served == Counter({"secondary": 200}), served
    # Only the gateway's active probes (x-request-id probe-…, every 1 s while down-weighted), however long the
    # 200 requests took: counted by what reached the primary, not by a wall clock.
    assert [r.client_request_id for r in reached if not (r.client_request_id or "").startswith("probe-")] == []
    weights = admin["routing"]["deepseek-v3.2"]["weights"]
    assert weights["primary"]["effective_weight"] == 0.0
    assert weights["primary"]["promise"] == "probes-only"
    assert "probes only" in weights["primary"]["reason"]
    assert weights["secondary"]["reason"] == "within slo: configured 20%"
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
    (5x its 100 ms SLO), it gets next to none of the new requests from 2 s after the fault on."""
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

    assert abs(share(0.0, 3.0) - 0.8) <= 0.03  # healthy: the configured 80 %, exactly but for rounding
    assert share(5.0, 9.0) < 0.05  # from 2 s after the fault: cut over
    assert share(6.0, 9.0) == 0.0


async def test_priors_from_the_store_keep_a_slow_provider_out_at_start_up(
    sim: SimFactory, gateway: GwFactory, tmp_path: Path
) -> None:
    """The monitor saw the primary at 5 s TTFT P90 (SLO 1 s): the gateway starts with it on probes only, so the
    first requests all go to the secondary; the explanation names the prior."""
    import time

    now = time.time()
    samples = [Sample(now - 5 * i, "primary", "up-primary", "short", 200, None, 5000.0, 6000.0, 8) for i in range(20)]
    with closing(open_db(tmp_path / "ledger0.db")) as conn:  # the store the gateway fixture gives it
        insert_samples(conn, samples)
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    routing = {"slo": {"ttft_p90": "1s", "e2e_p90": "3s"}, "probes": {"enabled": False}}
    gw = await gateway(two_provider_config(a.url, b.url, routing=routing, admin_key="admin-key-0123456789"))
    async with aiohttp.ClientSession() as session:
        served = await _send(session, gw, 50)
        async with session.get(f"{gw.root_url}/admin/providers", headers=ADMIN) as r:
            admin = await r.json()
    assert served == Counter({"secondary": 50})
    primary = admin["routing"]["deepseek-v3.2"]["weights"]["primary"]
    assert primary["source"] == "prior"
    assert "monitor's recent ttft p90 5.00s" in primary["reason"]
