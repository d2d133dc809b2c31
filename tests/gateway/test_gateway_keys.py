"""Runtime keys through a real gateway and simulated providers: the store's keys work and are revoked at
runtime, /admin/keys, refusals (model, tpm, concurrency, budget, expiry) counted per key in /metrics and
the ledger, budgets charged honestly (a stream cut short or cancelled pays for what it produced)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from conftest import GatewayHandle, SimFactory, eventually
from loop_lateness import WAKEUPS, LoopLateness
from tailgate.gateway.request_path.estimate import prompt_bound
from tailgate.ledger import read_rows
from tailgate.ledger.keys import create_key, revoke_key
from tailgate.ledger.store import open_store
from tailgate.ledger.usage import day_start

GwFactory = Callable[..., Awaitable[GatewayHandle]]
MSG = [{"role": "user", "content": "hello"}]
ADMIN = "admin-secret-0123456789"
YAML_KEY = "sk-yaml-0123456789abcdef"


def _config(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "admin_key": ADMIN,
        "keys": [{"id": "yaml", "key": YAML_KEY}],
        "providers": {"p": {"base_url": url, "api_keys": ["sk-up-0123456789"], "price": {"input": 1, "output": 2}}},
        "models": {
            "chat": {"routes": [{"provider": "p", "model": "m"}]},
            "code": {"routes": [{"provider": "p", "model": "m"}]},
        },
        **extra,
    }


async def _start(sim: SimFactory, gateway: GwFactory, **sim_kw: Any) -> tuple[Any, GatewayHandle, Path]:
    provider = await sim("instant", models=("m",), **sim_kw)
    gw = await gateway(_config(provider.url))
    assert gw.gateway.ledger is not None
    return provider, gw, gw.gateway.ledger.path


async def _chat(
    session: aiohttp.ClientSession, gw: GatewayHandle, key: str, **body: Any
) -> tuple[int, dict[str, str], Any]:
    payload = {"model": "chat", "messages": MSG, "max_tokens": 5, **body}
    async with session.post(
        f"{gw.url}/chat/completions", json=payload, headers={"Authorization": f"Bearer {key}"}
    ) as r:
        data = await r.read()
        return r.status, dict(r.headers), data


async def _metric(session: aiohttp.ClientSession, gw: GatewayHandle, key: str, reason: str) -> float:
    async with session.get(f"{gw.root_url}/metrics") as r:
        text = await r.text()
    for line in text.splitlines():
        if line.startswith("tailgate_key_refusals_total{") and f'key="{key}"' in line and f'reason="{reason}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_store_key_works_and_a_revoked_one_is_refused_within_a_second(
    sim: SimFactory, gateway: GwFactory
) -> None:
    _, gw, path = await _start(sim, gateway)
    with open_store(path) as conn:
        _, secret = create_key(conn, "team-a")
    # "Within 1 s" is the promise; the gateway runs in this process, so its loop is late by what this ticker
    # measures, and the allowance grows by that for each wake-up on the reload's path (loop_lateness.WAKEUPS).
    async with aiohttp.ClientSession() as session, LoopLateness() as late:
        t0 = time.monotonic()
        while (await _chat(session, gw, secret))[0] != 200:
            waited = time.monotonic() - t0
            assert waited < 1.0 + WAKEUPS * late.max_s, f"a new key did not work within 1 s ({waited:.2f} s)"
            await asyncio.sleep(0.02)
        assert (await _chat(session, gw, YAML_KEY))[0] == 200  # the YAML's keys still work
        with open_store(path) as conn:
            revoke_key(conn, "team-a")
        t0 = time.monotonic()
        while (status := (await _chat(session, gw, secret))[0]) == 200:
            waited = time.monotonic() - t0
            assert waited < 1.0 + WAKEUPS * late.max_s, f"a revoked key was still served after 1 s ({waited:.2f} s)"
            await asyncio.sleep(0.02)
        assert status == 401
    await gw.gateway.ledger.flush()
    rows = read_rows(path)
    assert {r.key_id for r in rows if r.status == 200} == {"team-a", "yaml"}
    # The revoked key's requests are on its own rows: its id, its alias, the reason (before it was loaded, the
    # new key was unknown: those first 401s have no key).
    assert (rows[-1].key_id, rows[-1].alias, rows[-1].status, rows[-1].outcome) == (
        "team-a",
        "chat",
        401,
        "key_revoked",
    )
    assert {(r.key_id, r.alias) for r in rows if r.outcome == "key_revoked"} == {("team-a", "chat")}


async def test_admin_api_creates_lists_updates_and_revokes(sim: SimFactory, gateway: GwFactory) -> None:
    _, gw, _ = await _start(sim, gateway)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{gw.root_url}/admin/keys", json={"id": "team-b"}) as r:
            assert r.status == 401  # no admin key
        body = {"id": "team-b", "tpm": 10_000, "models": ["chat"], "metadata": {"team": "b"}, "expires": "30d"}
        async with session.post(f"{gw.root_url}/admin/keys", json=body, headers=admin) as r:
            assert r.status == 201
            created = await r.json()
        secret = created["key"]
        assert secret.startswith("sk-")
        assert created["models"] == ["chat"]
        assert created["expires_at"] > time.time() + 29 * 86400
        assert (await _chat(session, gw, secret))[0] == 200  # reloaded before the answer: works at once
        async with session.post(f"{gw.root_url}/admin/keys", json={"id": "team-b"}, headers=admin) as r:
            assert r.status == 409
        async with session.patch(f"{gw.root_url}/admin/keys/team-b", json={"tpm": None}, headers=admin) as r:
            assert (await r.json())["tpm"] is None
        async with session.get(f"{gw.root_url}/admin/keys", headers=admin) as r:
            listed = (await r.json())["keys"]
        assert [k["id"] for k in listed] == ["team-b"]
        assert "key" not in listed[0]
        assert "key_sha256" not in listed[0]
        assert secret not in str(listed)
        assert listed[0]["spend"]["day"]["requests"] in (0, 1)  # the ledger may not have flushed yet
        async with session.delete(f"{gw.root_url}/admin/keys/team-b", headers=admin) as r:
            assert (await r.json())["state"] == "revoked"
        assert (await _chat(session, gw, secret))[0] == 401
        async with session.patch(f"{gw.root_url}/admin/keys/nobody", json={"rpm": 1}, headers=admin) as r:
            assert r.status == 404


async def test_refusals_are_openai_shaped_and_counted_per_key(sim: SimFactory, gateway: GwFactory) -> None:
    _, gw, path = await _start(sim, gateway)
    with open_store(path) as conn:
        _, chat_only = create_key(conn, "chat-only", models=["chat"])
        _, small_tpm = create_key(conn, "small-tpm", tpm=300)
        _, expired = create_key(conn, "old", expires_at=time.time() - 1)
        _, one_rpm = create_key(conn, "one-rpm", rpm=1)
    await gw.gateway.key_directory.reload()
    async with aiohttp.ClientSession() as session:
        status, _, body = await _chat(session, gw, chat_only, model="code")
        assert status == 403
        assert b'"code":"model_not_allowed"' in body.replace(b" ", b"")
        assert (await _chat(session, gw, chat_only))[0] == 200

        assert (await _chat(session, gw, small_tpm, max_tokens=200))[0] == 200
        status, headers, body = await _chat(session, gw, small_tpm, max_tokens=200)
        assert status == 429
        assert int(headers["Retry-After"]) >= 1
        assert b"Token rate limit" in body

        status, _, body = await _chat(session, gw, expired)
        assert status == 401
        assert b"key_expired" in body

        assert (await _chat(session, gw, one_rpm))[0] == 200
        status, headers, _ = await _chat(session, gw, one_rpm)
        assert status == 429
        assert int(headers["Retry-After"]) >= 1

        assert await _metric(session, gw, "chat-only", "model_not_allowed") == 1
        assert await _metric(session, gw, "one-rpm", "rpm_limited") == 1
        assert await _metric(session, gw, "small-tpm", "tpm_limited") == 1
        assert await _metric(session, gw, "old", "key_expired") == 1
    await gw.gateway.ledger.flush()
    refused = {(r.key_id, r.outcome, r.status) for r in read_rows(path) if r.status != 200}
    assert refused == {
        ("chat-only", "model_not_allowed", 403),
        ("small-tpm", "tpm_limited", 429),
        ("old", "key_expired", 401),
        ("one-rpm", "rpm_limited", 429),
    }


async def test_max_concurrency_refuses_the_extra_request(sim: SimFactory, gateway: GwFactory) -> None:
    _, gw, path = await _start(sim, gateway, faults={"stall_first_token_s": 0.5})
    with open_store(path) as conn:
        _, secret = create_key(conn, "one-at-a-time", max_concurrency=1)
    await gw.gateway.key_directory.reload()
    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(*(_chat(session, gw, secret) for _ in range(3)))
        statuses = sorted(r[0] for r in results)
        assert statuses == [200, 429, 429]
        assert (await _chat(session, gw, secret))[0] == 200  # the slot came back
        assert await _metric(session, gw, "one-at-a-time", "concurrency_limited") == 2


async def _budget_usage(gw: GatewayHandle, key: str) -> float:
    state = gw.gateway.admission._state()
    return float(await state.usage(f"key:{key}:budget:tokens:daily:{int(day_start(time.time()))}", None))


async def test_daily_token_budget_admits_until_spent(sim: SimFactory, gateway: GwFactory) -> None:
    """Admits while spent + this request's reservation fit; what was admitted never exceeds the budget."""
    _, gw, path = await _start(sim, gateway)
    budget = 2000
    with open_store(path) as conn:
        _, secret = create_key(conn, "budgeted", tokens_per_day=budget)
    await gw.gateway.key_directory.reload()
    async with aiohttp.ClientSession() as session:
        codes = []
        for _ in range(40):
            status, headers, body = await _chat(session, gw, secret, max_tokens=100)
            codes.append(status)
            if status == 429:
                assert b"budget_exceeded" in body
                assert int(headers["Retry-After"]) <= 86400
                break
            await gw.gateway.books.drain()  # its handler ended: settled (the 200 can reach us a moment before)
            await eventually(lambda: not gw.gateway.admission._pending, 1.0)  # settled
    assert codes[-1] == 429
    await gw.gateway.ledger.flush()
    served = [r for r in read_rows(path) if r.key_id == "budgeted" and r.status == 200]
    spent = sum((r.prompt_tokens or 0) + (r.output_tokens or 0) for r in served)
    sent = json.dumps({"model": "chat", "messages": MSG, "max_tokens": 100}).encode()  # aiohttp's json= encoding
    reservation = 100 + prompt_bound(sent)  # max_tokens + the prompt's bound
    assert budget - reservation <= spent <= budget
    assert await _budget_usage(gw, "budgeted") == spent  # settled to exactly what the ledger holds


async def test_a_cut_stream_is_charged_for_what_it_produced(sim: SimFactory, gateway: GwFactory) -> None:
    _, gw, path = await _start(sim, gateway, faults={"disconnect_after_tokens": 7})
    with open_store(path) as conn:
        _, secret = create_key(conn, "streamer", tokens_per_day=100_000)
    await gw.gateway.key_directory.reload()
    async with aiohttp.ClientSession() as session:
        status, _, body = await _chat(session, gw, secret, max_tokens=500, stream=True)
    assert status == 200
    assert b"error" in body  # ended with an SSE error event
    await eventually(lambda: not gw.gateway.admission._pending, 1.0)
    await gw.gateway.ledger.flush()
    (row,) = [r for r in read_rows(path) if r.key_id == "streamer"]
    assert row.outcome != "ok"
    assert row.output_tokens == 7
    # The provider never sent usage: the prompt is the gateway's own count (the prompt bound), flagged estimated.
    assert row.prompt_tokens is not None
    assert row.prompt_tokens > 0
    assert row.tokens_estimated
    charged = await _budget_usage(gw, "streamer")
    assert charged == row.prompt_tokens + 7  # the prompt plus what it produced: not 0, not the 500 reserved
    assert row.cost is not None
    assert row.cost > 0


async def test_a_cancelled_stream_is_charged_for_what_it_produced(sim: SimFactory, gateway: GwFactory) -> None:
    _, gw, path = await _start(sim, gateway, faults={"slow_drip_s": 0.02})
    with open_store(path) as conn:
        _, secret = create_key(conn, "leaver", tokens_per_day=100_000)
    await gw.gateway.key_directory.reload()
    payload = {"model": "chat", "messages": MSG, "max_tokens": 400, "stream": True}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{gw.url}/chat/completions", json=payload, headers={"Authorization": f"Bearer {secret}"}) as r,
    ):
        assert r.status == 200
        seen = 0
        async for _ in r.content.iter_any():
            seen += 1
            if seen >= 5:
                break  # the client goes away mid-stream
    await gw.gateway.ledger.flush()
    await eventually(lambda: any(r.key_id == "leaver" for r in read_rows(path)), 3.0)
    await eventually(lambda: not gw.gateway.admission._pending, 1.0)
    (row,) = [r for r in read_rows(path) if r.key_id == "leaver"]
    assert row.outcome == "client_closed"
    assert row.output_tokens is not None
    assert 0 < row.output_tokens < 400
    assert row.prompt_tokens is not None
    assert row.prompt_tokens > 0
    assert await _budget_usage(gw, "leaver") == row.prompt_tokens + row.output_tokens


async def test_dashboard_keys_page_and_its_json(sim: SimFactory, gateway: GwFactory) -> None:
    """Keys & spend: the page, keys with their spend and the usage report, read-only with the dashboard key."""
    provider = await sim("instant", models=("m",))
    gw = await gateway(_config(provider.url, dashboard_key="dash-0123456789"))
    assert gw.gateway.ledger is not None
    path = gw.gateway.ledger.path
    view = {"Authorization": "Bearer dash-0123456789"}  # with keys configured the dashboard's data needs a key
    with open_store(path) as conn:
        _, secret = create_key(conn, "team-a", tokens_per_day=100_000, metadata={"team": "a"})
    await gw.gateway.key_directory.reload()
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            assert (await _chat(session, gw, secret))[0] == 200
        await gw.gateway.ledger.flush()
        async with session.get(f"{gw.root_url}/dashboard/keys") as r:
            assert r.status == 200
            assert "keys &amp; spend" in await r.text()
        async with session.get(f"{gw.root_url}/dashboard/api/keys") as r:
            assert r.status == 401  # no key: no data (docs/reliability.md)
        async with session.get(f"{gw.root_url}/dashboard/api/keys", headers=view) as r:
            keys = (await r.json())["keys"]
        (team,) = keys
        assert team["id"] == "team-a"
        assert team["spend"]["day"]["requests"] == 3
        assert team["spend"]["day"]["tokens"] > 0
        assert secret not in str(keys)
        async with session.get(f"{gw.root_url}/dashboard/api/usage?by=key&since=24h", headers=view) as r:
            groups = (await r.json())["groups"]
        assert {g["key"]: g["requests"] for g in groups} == {"team-a": 3}
        async with session.get(f"{gw.root_url}/dashboard/api/usage?by=nope", headers=view) as r:
            assert r.status == 400


async def test_a_gateway_on_postgres_ships_and_reports_it(
    sim: SimFactory, gateway: GwFactory, pg_url: str, tmp_path: Path
) -> None:
    """ledger.url: rows reach PostgreSQL through the spool; /metrics shows the shipping; keys come from there."""
    provider = await sim("instant", models=("m",))
    ledger = {"path": str(tmp_path / "spool.db"), "url": pg_url, "ship_interval": "100ms"}
    gw = await gateway(_config(provider.url, ledger=ledger))
    with open_store(pg_url) as conn:
        _, secret = create_key(conn, "team-pg")
    await gw.gateway.key_directory.reload()
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            assert (await _chat(session, gw, secret))[0] == 200
        assert gw.gateway.ledger is not None
        await gw.gateway.ledger.flush()

        def shipped() -> bool:
            with open_store(pg_url) as conn:
                return bool(conn.execute("SELECT COUNT(*) FROM requests WHERE key_id = 'team-pg'").fetchone()[0] == 3)

        for _ in range(100):
            if await asyncio.to_thread(shipped):
                break
            await asyncio.sleep(0.05)
        assert await asyncio.to_thread(shipped)
        async with session.get(f"{gw.root_url}/metrics") as r:
            text = await r.text()
    assert 'tailgate_store_shipped_rows_total{table="requests"} 3.0' in text
    assert "tailgate_store_spool_backlog 0.0" in text


async def test_a_restart_does_not_reset_a_budget(sim: SimFactory, gateway: GwFactory, tmp_path: Path) -> None:
    """Local state: a new process starts each budget counter from the store's spend for the period."""
    provider = await sim("instant", models=("m",))
    ledger = {"path": str(tmp_path / "shared.db")}
    budget = 700
    first = await gateway(_config(provider.url, ledger=ledger))
    with open_store(tmp_path / "shared.db") as conn:
        _, secret = create_key(conn, "team-r", tokens_per_day=budget)
    await first.gateway.key_directory.reload()
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            assert (await _chat(session, first, secret, max_tokens=100))[0] == 200
        await first.stop()  # its rows are in the store now
        second = await gateway(_config(provider.url, ledger=ledger))
        statuses = []
        for _ in range(20):
            statuses.append((await _chat(session, second, secret, max_tokens=100))[0])
            if statuses[-1] == 429:
                break
            await second.gateway.books.drain()  # its handler ended: settled
            await eventually(lambda: not second.gateway.admission._pending, 1.0)
    assert statuses[-1] == 429
    assert second.gateway.ledger is not None
    await second.gateway.ledger.flush()
    served = [r for r in read_rows(tmp_path / "shared.db") if r.key_id == "team-r" and r.status == 200]
    assert len(served) == 3 + statuses.count(200)
    spent = sum((r.prompt_tokens or 0) + (r.output_tokens or 0) for r in served)
    reservation = 100 + prompt_bound(json.dumps({"model": "chat", "messages": MSG, "max_tokens": 100}).encode())
    assert budget - reservation <= spent <= budget  # counted across the restart, not from zero


async def test_ratelimit_headers_on_every_answer_and_models_the_key_may_use(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """A key with rpm and tpm: x-ratelimit-{limit,remaining,reset}-{requests,tokens} on a whole answer (read by
    the openai SDK), on a stream's head and on a refusal (which takes nothing); /v1/models lists what it may use."""
    _, gw, path = await _start(sim, gateway)
    with open_store(path) as conn:
        _, secret = create_key(conn, "limited", rpm=10, tpm=10_000, models=["chat"])
    await gw.gateway.key_directory.reload()
    client = oai(gw.url, key=secret)
    raw = await client.chat.completions.with_raw_response.create(model="chat", messages=MSG, max_tokens=5)
    h = raw.headers
    assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("10", "9")
    assert h["x-ratelimit-limit-tokens"] == "10000"
    reserved = 10_000 - int(h["x-ratelimit-remaining-tokens"])
    assert 5 < reserved < 100  # prompt estimate + max_tokens of this request
    assert h["x-ratelimit-reset-requests"].endswith("s")
    assert 0 < float(h["x-ratelimit-reset-tokens"].removesuffix("s")) <= 60
    async with aiohttp.ClientSession() as session:
        payload = {"model": "chat", "messages": MSG, "max_tokens": 5, "stream": True}
        async with session.post(
            f"{gw.url}/chat/completions", json=payload, headers={"Authorization": f"Bearer {secret}"}
        ) as r:
            assert r.status == 200
            assert r.headers["x-ratelimit-remaining-requests"] == "8"
            assert "x-ratelimit-remaining-tokens" in r.headers
            await r.read()
        status, headers, _ = await _chat(session, gw, secret, model="code")
        assert status == 403
        assert (headers["x-ratelimit-limit-requests"], headers["x-ratelimit-remaining-requests"]) == ("10", "8")
        status, headers, _ = await _chat(session, gw, YAML_KEY)  # no limits: no x-ratelimit-*
        assert status == 200
        assert not any(k.lower().startswith("x-ratelimit") for k in headers)
        async with session.get(f"{gw.url}/models", headers={"Authorization": f"Bearer {secret}"}) as r:
            assert [m["id"] for m in (await r.json())["data"]] == ["chat"]
        async with session.get(f"{gw.url}/models", headers={"Authorization": f"Bearer {YAML_KEY}"}) as r:
            assert [m["id"] for m in (await r.json())["data"]] == ["chat", "code"]
