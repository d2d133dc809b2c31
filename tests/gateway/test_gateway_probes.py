"""Active probes against real simulated providers: they feed health, open and re-close a breaker, stop cleanly."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from conftest import GatewayHandle, SimFactory, two_provider_config
from tailgate.sim.faults import Faults

GwFactory = Callable[..., Awaitable[GatewayHandle]]
ADMIN = {"Authorization": "Bearer admin-key-0123456789"}
FAST_PROBES = {"probes": {"interval": "100ms", "jitter": 0, "timeout": "2s"}, "breaker": {"cooldown": "1s"}}


async def _admin(session: aiohttp.ClientSession, gw: GatewayHandle) -> dict[str, Any]:
    async with session.get(f"{gw.root_url}/admin/providers", headers=ADMIN) as r:
        assert r.status == 200
        data: dict[str, Any] = await r.json()
        return data


def _provider(admin: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in admin["providers"] if p["name"] == name)


async def _wait_for(check: Callable[[], Awaitable[bool]], within_s: float) -> None:
    """Poll ``check`` (an HTTP read of /admin) every 50 ms until it holds; fail after ``within_s``."""
    async with asyncio.timeout(within_s):
        while not await check():  # noqa: ASYNC110 - the state lives behind HTTP; there is no event to await
            await asyncio.sleep(0.05)


async def test_probes_open_and_reclose_a_breaker_without_client_traffic(sim: SimFactory, gateway: GwFactory) -> None:
    """With no client requests at all, failing probes open the primary's breaker and, after the
    provider recovers, half-open probes close it again (3 trial successes)."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    a.set_faults(Faults(error_rate=1.0, error_statuses=[500]))
    gw = await gateway(two_provider_config(a.url, b.url, routing=FAST_PROBES, admin_key="admin-key-0123456789"))
    async with aiohttp.ClientSession() as session:

        async def state_is(want: str) -> bool:
            return bool(_provider(await _admin(session, gw), "primary")["breaker"]["state"] == want)

        await _wait_for(lambda: state_is("open"), 5.0)  # 5 failed probes in a row, 100 ms apart
        admin = await _admin(session, gw)
        window = _provider(admin, "primary")["models"]["up-primary"]["window"]
        assert window["probes"] >= 5
        assert window["probe_faults"] >= 5
        assert window["errors"]["http_5xx"] >= 5
        a.set_faults(Faults(error_rate=0.0))
        await _wait_for(lambda: state_is("closed"), 5.0)  # cool-down 1 s ± 20 %, then 3 trial probes
        admin = await _admin(session, gw)
        async with session.get(f"{gw.root_url}/metrics") as r:
            metrics = await r.text()
    primary = _provider(admin, "primary")
    moves = [(t["from"], t["to"]) for t in primary["breaker"]["transitions"]]
    assert moves[-3:] == [("closed", "open"), ("open", "half_open"), ("half_open", "closed")]
    assert "trial requests succeeded" in primary["breaker"]["transitions"][-1]["reason"]
    probes = primary["models"]["up-primary"]["probes"]
    assert probes["ok"] >= 3
    assert probes["last_outcome"] == "ok"
    assert probes["last_ttft_ms"] is not None
    assert 'tailgate_probes_total{outcome="http_5xx",provider="primary"}' in metrics
    assert 'tailgate_probes_total{outcome="ok",provider="primary"}' in metrics
    # Every probe reached the simulator as a tiny streamed chat request.
    assert all(r.stream and (r.output_tokens or 0) <= 8 for r in a.truth.records())


async def test_probes_feed_health_and_stop_on_close(sim: SimFactory, gateway: GwFactory) -> None:
    """Probes of a healthy provider fill its window (TTFT samples, flagged as probes); after close no
    probe task is left and no more requests arrive."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    gw = await gateway(two_provider_config(a.url, b.url, routing=FAST_PROBES, admin_key="admin-key-0123456789"))
    await asyncio.sleep(0.6)
    h = gw.gateway.health.get("secondary", "up-secondary")
    assert h.snapshot()["probes"] >= 3
    assert h.snapshot()["ttft_ms"]["count"] >= 3
    assert h.in_flight == 0  # probes are not client traffic
    await gw.stop()
    n = len(a.truth.records())
    await asyncio.sleep(0.3)
    assert len(a.truth.records()) == n
    assert not [t for t in asyncio.all_tasks() if (t.get_name() or "").startswith("probe ")]


async def test_probes_off(sim: SimFactory, gateway: GwFactory) -> None:
    """``routing.probes.enabled: false`` sends none."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    routing = {"probes": {"enabled": False, "interval": "50ms"}}
    await gateway(two_provider_config(a.url, b.url, routing=routing))
    await asyncio.sleep(0.3)
    assert not a.truth.records()
    assert not b.truth.records()


async def test_a_demoted_route_is_probed_every_second_and_readmitted_on_probe_evidence(
    sim: SimFactory, gateway: GwFactory
) -> None:
    """Promise 2: the primary (TTFT 300 ms, SLO 100 ms) gets no client request; with a 30 s probe interval it
    is still probed about every second while held down; once it is fast again, probes alone re-admit it
    (slow start) and client requests reach it again."""
    a = await sim("instant", models=("up-primary",))
    a.set_faults(Faults(stall_first_token_s=0.3))
    b = await sim("instant", models=("up-secondary",))
    routing = {"slo": {"ttft_p90": "100ms", "e2e_p90": "1s"}, "probes": {"interval": "30s", "jitter": 0}}
    gw = await gateway(two_provider_config(a.url, b.url, routing=routing, admin_key="admin-key-0123456789"))
    body = {"model": "deepseek-v3.2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}

    async def send(session: aiohttp.ClientSession, n: int) -> list[str]:
        out = []
        for _ in range(n):
            async with session.post(f"{gw.url}/chat/completions", json=body) as r:
                await r.read()
                out.append(r.headers["x-tailgate-provider"])
        return out

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(send(session, 5) for _ in range(8)))  # 40 requests, 8 at a time
        assert _provider(await _admin(session, gw), "primary")["effective_weights"]["deepseek-v3.2"]["promise"] == (
            "probes-only"
        )
        before = len(a.truth.records())
        await asyncio.sleep(3.5)
        probes = len(a.truth.records()) - before
        assert 2 <= probes <= 5, probes  # every ~1 s, not every 30 s
        assert len(b.truth.records()) == sum(1 for r in b.truth.records() if r.client_request_id)  # b: no probe
        a.clear_faults()  # fast again: the next three probes re-admit it

        async def readmitted() -> bool:
            w = _provider(await _admin(session, gw), "primary")["effective_weights"]["deepseek-v3.2"]
            return bool(w["promise"] in ("slow-start", "configured-split"))

        await _wait_for(readmitted, within_s=8.0)
        served = await send(session, 100)
    assert 0 < served.count("primary") < 80  # back, but slowly (slow start), not its whole 80 % at once
