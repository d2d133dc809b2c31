"""The gateway end to end: official SDK → real gateway → real simulated providers."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest

from conftest import GatewayHandle, SimFactory, two_provider_config
from tailgate.ledger import read_rows
from tailgate.sim.faults import Faults

GwFactory = Callable[..., Awaitable[GatewayHandle]]
MSG = [{"role": "user", "content": "hello"}]
CANARY = "sk-primary-canary-0123456789"
ONE_TOKEN = {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 1}


async def _pair(sim: SimFactory, gateway: GwFactory, **extra: Any) -> tuple[Any, Any, GatewayHandle]:
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    gw = await gateway(two_provider_config(a.url, b.url, **extra))
    return a, b, gw


async def _post(session: aiohttp.ClientSession, gw: GatewayHandle, body: dict[str, Any], **headers: str) -> Any:
    async with session.post(f"{gw.url}/chat/completions", json=body, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.read()


async def test_sdk_non_stream_and_stream_through_the_gateway(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """The SDK gets answers with usage; the alias is rewritten to each route's upstream model id."""
    a, b, gw = await _pair(sim, gateway)
    client = oai(gw.url, "anything")
    t0 = time.perf_counter()
    raw = await client.chat.completions.with_raw_response.create(model="deepseek-v3.2", messages=MSG, max_tokens=5)
    elapsed_ms = (time.perf_counter() - t0) * 1000.0
    resp = raw.parse()
    assert resp.usage is not None
    assert resp.usage.completion_tokens == 5
    assert raw.headers["x-tailgate-provider"] in ("primary", "secondary")
    assert raw.headers["x-tailgate-attempts"] == "1"
    assert 0 < float(raw.headers["x-tailgate-overhead-ms"]) < elapsed_ms  # the gateway's own part of the call
    stream = await client.chat.completions.create(model="deepseek-v3.2", messages=MSG, max_tokens=6, stream=True)
    chunks = [c async for c in stream]
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 6
    assert all(c.usage is None for c in chunks)  # the gateway asked for usage upstream and removed it again
    models = await client.models.list()
    assert [m.id for m in models.data] == ["deepseek-v3.2"]


async def test_eighty_twenty_split_of_1000_requests(sim: SimFactory, gateway: GwFactory) -> None:
    """An 80/20 config splits 1,000 requests within ±4 points."""
    a, b, gw = await _pair(sim, gateway)
    sem = asyncio.Semaphore(32)

    async def one(session: aiohttp.ClientSession) -> str:
        async with sem:
            status, headers, _ = await _post(session, gw, {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 1})
            assert status == 200
            return str(headers["x-tailgate-provider"])

    async with aiohttp.ClientSession() as session:
        served = Counter(await asyncio.gather(*(one(session) for _ in range(1000))))
    assert abs(served["primary"] / 1000 - 0.8) <= 0.04, served
    assert served["primary"] + served["secondary"] == 1000


async def test_batch_class_prefers_the_batch_route(sim: SimFactory, gateway: GwFactory) -> None:
    """x-tailgate-class: batch goes to the route marked for batch."""
    a, b, gw = await _pair(sim, gateway)
    async with aiohttp.ClientSession() as session:
        for _ in range(20):
            status, headers, _ = await _post(
                session,
                gw,
                {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 1},
                **{"x-tailgate-class": "batch"},
            )
            assert headers["x-tailgate-provider"] == "secondary"


@pytest.mark.parametrize("mode", ["503", "reset", "refuse"])
async def test_primary_down_loses_no_request(sim: SimFactory, gateway: GwFactory, mode: str) -> None:
    """With the primary out (503, reset or refused), every request is served by the secondary."""
    a, b, gw = await _pair(sim, gateway)
    a.set_faults(Faults(outage=True, outage_mode=mode))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(
            *(
                _post(session, gw, {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 2, "stream": i % 2 == 0})
                for i in range(40)
            )
        )
    assert [r[0] for r in results] == [200] * 40
    assert {r[1]["x-tailgate-provider"] for r in results} == {"secondary"}
    assert max(int(r[1]["x-tailgate-attempts"]) for r in results) == 2


async def test_mid_stream_cut_ends_with_an_sse_error_event(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """A provider that cuts the stream after output began: the client gets an SSE error event, no silent end."""
    a, b, gw = await _pair(sim, gateway)
    for p in (a, b):
        p.set_faults(Faults(disconnect_after_tokens=3))
    async with aiohttp.ClientSession() as session:
        status, headers, body = await _post(
            session, gw, {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 10, "stream": True}
        )
    assert status == 200
    text = body.decode()
    assert text.count('"content":"') - text.count('"content":""') == 3
    assert "event: error" in text
    assert "[DONE]" not in text
    stream = await oai(gw.url).chat.completions.create(model="deepseek-v3.2", messages=MSG, max_tokens=10, stream=True)
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass


async def test_429_retry_after_is_honoured(sim: SimFactory, gateway: GwFactory) -> None:
    """After the primary's 429 with Retry-After, no request goes to it until the pause ends."""
    a, b, gw = await _pair(sim, gateway)
    a.set_faults(Faults(rate_limit_rps=1))
    async with aiohttp.ClientSession() as session:
        results = [
            await _post(session, gw, {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 1}) for _ in range(30)
        ]
    assert [r[0] for r in results] == [200] * 30
    primary_429s = [r for r in a.truth.records() if r.status == 429]
    assert len(primary_429s) == 1  # one 429, then the primary is left alone for its Retry-After (1 s)
    state = gw.gateway.providers["primary"].snapshot()
    assert state["state"] == "paused"


async def test_drain_moves_all_new_traffic_at_once(sim: SimFactory, gateway: GwFactory) -> None:
    """After POST /admin/providers/primary/drain, no new request goes to the primary; enable restores it."""
    a, b, gw = await _pair(sim, gateway, admin_key="admin-secret-key-123")
    admin = {"Authorization": "Bearer admin-secret-key-123"}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{gw.root_url}/admin/providers/primary/drain") as r:
            assert r.status == 401
        async with session.post(f"{gw.root_url}/admin/providers/primary/drain", headers=admin) as r:
            assert (await r.json())["state"] == "drained"
        served = [
            (await _post(session, gw, {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 1}))[1][
                "x-tailgate-provider"
            ]
            for _ in range(50)
        ]
        assert set(served) == {"secondary"}
        async with session.get(f"{gw.root_url}/admin/providers", headers=admin) as r:
            listing = await r.json()
        assert {p["name"]: p["state"] for p in listing["providers"]}["primary"] == "drained"
        async with session.get(f"{gw.root_url}/readyz") as r:
            assert r.status == 200
        async with session.post(f"{gw.root_url}/admin/providers/primary/enable", headers=admin) as r:
            assert r.status == 200
        served = [
            (await _post(session, gw, {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 1}))[1][
                "x-tailgate-provider"
            ]
            for _ in range(50)
        ]
        assert "primary" in served


async def test_gateway_keys_admin_and_per_key_rpm(sim: SimFactory, gateway: GwFactory) -> None:
    """With keys configured: missing/wrong key → 401; a key over its RPM → 429 with Retry-After; the ledger
    has one row per request, the key's id on its own."""
    a, b, gw = await _pair(sim, gateway, keys=[{"id": "team-a", "key": "tg-team-a-key", "rpm": 2}])
    body = {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 1}
    async with aiohttp.ClientSession() as session:
        assert (await _post(session, gw, body))[0] == 401
        assert (await _post(session, gw, body, Authorization="Bearer wrong"))[0] == 401
        ok = [await _post(session, gw, body, Authorization="Bearer tg-team-a-key") for _ in range(3)]
    assert [r[0] for r in ok] == [200, 200, 429]
    assert "Retry-After" in ok[2][1]
    assert gw.gateway.ledger is not None
    await gw.gateway.ledger.flush()
    rows = read_rows(gw.gateway.ledger.path)
    assert [(r.status, r.key_id, r.outcome) for r in rows] == [  # one row per request, the key's on its own
        (401, None, "unauthorized"),
        (401, None, "unauthorized"),
        (200, "team-a", "ok"),
        (200, "team-a", "ok"),
        (429, "team-a", "rpm_limited"),
    ]


async def test_bad_input_is_answered_in_openai_shape(sim: SimFactory, gateway: GwFactory) -> None:
    """Oversized body → 413, invalid field → 400 naming it, unknown alias → 404, bad JSON → 400."""
    a, b, gw = await _pair(sim, gateway, max_body_bytes=2048)
    async with aiohttp.ClientSession() as session:
        big = {"model": "deepseek-v3.2", "messages": [{"role": "user", "content": "x" * 5000}]}
        status, _, body = await _post(session, gw, big)
        assert status == 413
        assert json.loads(body)["error"]["message"].startswith("Request body too large")
        status, _, body = await _post(session, gw, {"model": "deepseek-v3.2", "messages": MSG, "temperature": 7})
        assert (status, json.loads(body)["error"]["param"]) == (400, "temperature")
        status, _, body = await _post(session, gw, {"model": "gpt-9", "messages": MSG})
        assert status == 404
        assert json.loads(body)["error"]["code"] == "model_not_found"
        async with session.post(f"{gw.url}/chat/completions", data=b"{nope") as resp:
            assert resp.status == 400
        async with session.get(f"{gw.url}/nothing") as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["type"] == "invalid_request_error"


async def test_upstream_key_never_leaves_the_process(sim: SimFactory, gateway: GwFactory, caplog: Any) -> None:
    """The canary upstream key is in no response, error, metric, admin output or ledger row."""
    a, b, gw = await _pair(sim, gateway, admin_key="admin-secret-key-123")
    a.set_faults(Faults(error_rate=1.0, error_statuses=[500]))
    b.set_faults(Faults(error_rate=1.0, error_statuses=[502]))
    seen: list[str] = []
    async with aiohttp.ClientSession() as session:
        for stream in (False, True):
            status, headers, body = await _post(
                session, gw, {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 1, "stream": stream}
            )
            assert status in (500, 502)  # the last upstream error is passed on
            seen += [body.decode(), json.dumps(headers)]
        for path in ("/metrics", "/admin/providers", "/readyz"):
            async with session.get(gw.root_url + path, headers={"Authorization": "Bearer admin-secret-key-123"}) as r:
                seen.append(await r.text())
    await gw.stop()
    assert gw.gateway.ledger is not None
    seen += [repr(row) for row in read_rows(gw.gateway.ledger.path)]
    seen += [rec.getMessage() for rec in caplog.records]
    assert not any(CANARY in text for text in seen)
    assert len(read_rows(gw.gateway.ledger.path)) == 2


async def test_client_disconnect_cancels_the_upstream_at_once(sim: SimFactory, gateway: GwFactory) -> None:
    """A client that leaves mid-stream frees the provider's slot at once; nothing stays in flight."""
    a = await sim("provider-a", time_scale=0.2, models=("up-primary",))
    b = await sim("provider-a", time_scale=0.2, models=("up-secondary",))
    gw = await gateway(two_provider_config(a.url, b.url))
    body = {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 400, "stream": True}
    async with aiohttp.ClientSession() as session, session.post(f"{gw.url}/chat/completions", json=body) as resp:
        seen = 0
        async for line in resp.content:
            if b'"content":"' in line and b'"content":""' not in line:
                seen += 1
                if seen == 3:
                    break
        resp.close()
    for _ in range(100):
        if a.engine.active == 0 and b.engine.active == 0:
            break
        await asyncio.sleep(0.01)
    assert a.engine.active == b.engine.active == 0
    assert all(p.in_flight == 0 for p in gw.gateway.providers.values())


async def test_metrics_show_the_upstream_pools_reusing_connections(sim: SimFactory, gateway: GwFactory) -> None:
    """/metrics has each provider's pool: twelve sequential requests reuse keep-alive connections."""
    a, b, gw = await _pair(sim, gateway)
    async with aiohttp.ClientSession() as session:
        for i in range(12):
            status, _, _ = await _post(
                session, gw, {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 3, "stream": i % 2 == 0}
            )
            assert status == 200
        async with session.get(f"{gw.root_url}/metrics") as r:
            metrics = await r.text()
    await gw.stop()
    values: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith(("tailgate_upstream_connections{", "tailgate_upstream_connects_total{")):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    connects = {p: values[f'tailgate_upstream_connects_total{{provider="{p}"}}'] for p in ("primary", "secondary")}
    assert 1 <= sum(connects.values()) <= 4  # two pools, each reusing its connection (a probe may add one)
    for p in ("primary", "secondary"):
        in_use = values[f'tailgate_upstream_connections{{provider="{p}",state="in_use"}}']
        idle = values[f'tailgate_upstream_connections{{provider="{p}",state="idle"}}']
        assert in_use + idle <= connects[p]
    assert sum(values[f'tailgate_upstream_connections{{provider="{p}",state="idle"}}'] for p in connects) >= 1


async def test_metrics_and_ledger_rows(sim: SimFactory, gateway: GwFactory) -> None:
    """/metrics counts requests by outcome; the ledger holds one row per request with tokens and timings."""
    a, b, gw = await _pair(sim, gateway)
    async with aiohttp.ClientSession() as session:
        for i in range(10):
            await _post(session, gw, {"model": "deepseek-v3.2", "messages": MSG, "max_tokens": 4, "stream": i % 2 == 0})
        await _post(session, gw, {"model": "nope", "messages": MSG})
        async with session.get(f"{gw.root_url}/metrics") as r:
            metrics = await r.text()
    assert 'tailgate_requests_total{alias="deepseek-v3.2"' in metrics
    assert "tailgate_ttft_seconds_bucket" in metrics
    assert 'tailgate_requests_total{alias="nope",api="openai",outcome="unknown_model",provider="-"} 1.0' in metrics
    await gw.stop()
    assert gw.gateway.ledger is not None
    rows = read_rows(gw.gateway.ledger.path)
    assert len(rows) == 11
    served = [r for r in rows if r.status == 200]
    assert len(served) == 10
    assert all(r.output_tokens == 4 and r.e2e_ms is not None and r.ttft_ms is not None for r in served)
    assert {r.upstream_model for r in served} <= {"up-primary", "up-secondary"}
    assert [r.outcome for r in rows if r.status != 200] == ["unknown_model"]
