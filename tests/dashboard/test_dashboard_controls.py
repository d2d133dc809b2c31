"""The dashboard on a real gateway: live state without secrets, and drain/enable only with the admin key."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from conftest import GatewayHandle, SimFactory, two_provider_config

ADMIN = "tg-admin-key-0123456789"


def _drained(gw: GatewayHandle, name: str = "primary") -> bool:
    return bool(gw.gateway.providers[name].drained)


async def _post(url: str, key: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with aiohttp.ClientSession() as s, s.post(url, headers=headers) as r:
        return r.status, await r.json()


async def _get(url: str, key: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
        return r.status, await r.json()


async def test_controls_need_the_admin_key(sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]) -> None:
    """No key or a wrong key: 401 and nothing changes; the admin key drains and enables a provider."""
    a, b = await sim(), await sim()
    gw = await gateway(two_provider_config(a.url, b.url, admin_key=ADMIN))
    root = gw.root_url + "/dashboard/api"
    status, meta = await _get(root + "/meta")
    assert (status, meta["mode"], meta["live"], meta["controls"]) == (200, "gateway", True, True)

    for key in (None, "wrong-key", "sk-test"):
        status, body = await _post(root + "/providers/primary/drain", key)
        assert status == 401, key
        assert body["error"]["code"] == "invalid_api_key"
        # No gateway keys: anyone on loopback may read; the reply says this caller may not use the controls.
        assert await _get(root + "/auth", key) == (200, {"admin": False, "read": True})
    assert not _drained(gw)

    assert await _get(root + "/auth", ADMIN) == (200, {"admin": True, "read": True})
    status, body = await _post(root + "/providers/primary/drain", ADMIN)
    assert (status, body) == (200, {"provider": "primary", "state": "drained"})
    assert _drained(gw)
    _, live = await _get(root + "/live")
    assert {p["name"]: p["state"] for p in live["providers"]} == {"primary": "drained", "secondary": "active"}
    status, _ = await _get(gw.root_url + "/readyz")
    assert status == 200  # secondary still serves

    status, body = await _post(root + "/providers/primary/enable", ADMIN)
    assert (status, body) == (200, {"provider": "primary", "state": "active"})
    assert not _drained(gw)
    status, body = await _post(root + "/providers/nope/drain", ADMIN)
    assert status == 404


async def test_controls_are_off_without_an_admin_key_in_the_config(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """Without ``admin_key`` the controls answer 403 to everyone; the read-only views still work."""
    a, b = await sim(), await sim()
    gw = await gateway(two_provider_config(a.url, b.url))
    root = gw.root_url + "/dashboard/api"
    status, meta = await _get(root + "/meta")
    assert (meta["live"], meta["controls"]) == (True, False)
    status, body = await _post(root + "/providers/primary/drain", "anything")
    assert status == 403
    assert not _drained(gw)
    for path in ("/live", "/leaderboard", "/heatmap", "/compare", "/catalog", "/series?provider=primary"):
        status, _ = await _get(root + path)
        assert status == 200, path


async def test_live_state_shows_weights_breakers_and_no_secrets(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """/live after real traffic: attempts, effective weights per alias, breakers; no upstream key or URL."""
    a, b = await sim(), await sim()
    gw = await gateway(two_provider_config(a.url, b.url, admin_key=ADMIN, routing={"policy": "adaptive"}))
    async with aiohttp.ClientSession() as s:
        for _ in range(10):
            payload = {"model": "deepseek-v3.2", "messages": [{"role": "user", "content": "hi"}]}
            async with s.post(gw.url + "/chat/completions", json=payload) as r:
                assert r.status == 200
        async with s.get(gw.root_url + "/dashboard/api/live") as r:
            assert r.status == 200
            text = await r.text()
    assert "canary" not in text
    assert "sk-secondary" not in text
    assert a.url not in text
    assert b.url not in text
    live = json.loads(text)
    assert sum(p["attempts"] for p in live["providers"]) == 10
    assert {p["breaker"]["state"] for p in live["providers"]} == {"closed"}
    weights = live["routing"]["deepseek-v3.2"]["weights"]
    assert set(weights) == {"primary", "secondary"}
    assert all(w["effective_weight"] > 0 for w in weights.values())
    assert live["aliases"]["deepseek-v3.2"][0] == {"provider": "primary", "model": "up-primary", "weight": 80}
    assert live["cutovers"] == []


async def test_breaker_cut_overs_appear_in_live_state(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """A failing primary opens its breaker; /live lists the transition as a recent cut-over with its age."""
    bad = await sim(faults={"error_rate": 1.0, "error_statuses": [500]})
    good = await sim()
    # The weighted policy: the subject is the breaker's cut-over on /live. Under load the adaptive policy may stop
    # sending to the failing primary after 3 failures in 1.5 s, before the 5th in a row opens its breaker.
    gw = await gateway(two_provider_config(bad.url, good.url, routing={"policy": "weighted"}))
    async with aiohttp.ClientSession() as s:
        for _ in range(30):  # the primary is tried first ~80 % of the time: 5 failures in a row come early
            payload = {"model": "deepseek-v3.2", "messages": [{"role": "user", "content": "hi"}]}
            async with s.post(gw.url + "/chat/completions", json=payload) as r:
                assert r.status == 200  # failed over to the secondary
    status, live = await _get(gw.root_url + "/dashboard/api/live")
    assert status == 200
    states = {p["name"]: p["breaker"]["state"] for p in live["providers"]}
    assert states["primary"] == "open"
    assert states["secondary"] == "closed"
    cut = live["cutovers"][0]
    assert (cut["provider"], cut["from"], cut["to"]) == ("primary", "closed", "open")
    assert 0 <= cut["ago_s"] < 10
    assert cut["reason"]
