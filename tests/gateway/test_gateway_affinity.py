"""Conversation affinity through the real gateway over two simulated providers with prefix caches, the official
openai SDK as the client (raw HTTP where a test sends thousands; docs/routing.md, promise 7): a conversation keeps
its route and its upstream key (its later turns hit the provider's cache), the population keeps 80/20, short requests
keep the exact split, a drained route moves only its conversations and they come back, three replicas agree with no
shared state, a hot prefix stays within its bound."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from conftest import GatewayHandle, SimFactory
from tailgate.routing.affinity import TENANT_SLACK, affinity_key, hrw_order
from tailgate.routing.route import Route

GwFactory = Callable[..., Awaitable[GatewayHandle]]
ADMIN = "admin-secret-0123456789"
SYSTEM = "You are a writing assistant. Keep the author's voice; answer with the revised paragraph only."


def _doc(i: int) -> str:
    return f"Draft {i}: " + f"chapter {i} of the novel, where the harbour town wakes before dawn. " * 8  # ~140 tok


def _config(a_url: str, b_url: str, **affinity: Any) -> dict[str, Any]:
    return {
        "providers": {
            "primary": {"base_url": a_url, "api_keys": ["sk-a-0000000001", "sk-a-0000000002", "sk-a-0000000003"]},
            "secondary": {"base_url": b_url, "api_keys": ["sk-b-0000000001", "sk-b-0000000002", "sk-b-0000000003"]},
        },
        "models": {
            "writer": {
                "routes": [
                    {"provider": "primary", "model": "m", "weight": 80},
                    {"provider": "secondary", "model": "m", "weight": 20},
                ]
            }
        },
        "routing": {
            "probes": {"enabled": False},
            "slo": {"ttft_p90": 60, "e2e_p90": 120},  # a busy test machine never moves weight off a route
            **({"affinity": affinity} if affinity else {}),
        },
        "admin_key": ADMIN,
    }


async def _sims(sim: SimFactory) -> tuple[Any, Any]:
    a = await sim("provider-a", models=("m",), engine={"pre_median_s": 0.0}, time_scale=0.01)
    b = await sim("provider-a", models=("m",), engine={"pre_median_s": 0.0}, time_scale=0.01)
    return a, b


async def _ask(client: Any, messages: list[dict[str, str]], **extra: Any) -> tuple[str, int]:
    raw = await client.chat.completions.with_raw_response.create(
        model="writer", messages=messages, max_tokens=2, **extra
    )
    resp = raw.parse()
    details = resp.usage.prompt_tokens_details
    return raw.headers["x-tailgate-provider"], (details.cached_tokens or 0) if details is not None else 0


async def _gather(n: int, make: Callable[[int], Awaitable[Any]], width: int = 16) -> list[Any]:
    gate = asyncio.Semaphore(width)

    async def one(i: int) -> Any:
        async with gate:
            return await make(i)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def test_a_conversation_keeps_its_route_and_its_key_so_later_turns_hit_the_cache(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    a, b = await _sims(sim)
    gw = await gateway(_config(a.url, b.url))
    client = oai(gw.url)

    async def conversation(i: int) -> list[tuple[str, int]]:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _doc(i)}]
        turns = []
        for t in range(4):  # no affinity key from the client: the stable prefix is the key
            turns.append(await _ask(client, messages))
            messages += [{"role": "assistant", "content": f"revision {t}"}, {"role": "user", "content": f"again {t}"}]
        return turns

    convs = await _gather(40, conversation)
    for turns in convs:
        assert len({p for p, _ in turns}) == 1, turns  # one route for the whole conversation
        assert turns[0][1] == 0
        assert all(cached > 0 for _, cached in turns[1:]), turns  # same provider AND same API key: a cache hit
    # (each provider has three keys and its cache is per key: round-robin keys would hit on ~1 turn in 3)
    served = Counter(turns[0][0] for turns in convs)
    assert served["primary"] > served["secondary"] > 0

    # x-session-id wins over the prefix: different prompts, one route
    for s in range(10):
        routes = {
            (
                await _ask(
                    client,
                    [{"role": "user", "content": _doc(1000 + t)}],
                    extra_headers={"x-session-id": f"session-{s}"},
                )
            )[0]
            for t in range(3)
        }
        assert len(routes) == 1


async def test_population_splits_80_20_and_short_requests_keep_the_exact_split(
    sim: SimFactory, gateway: GwFactory
) -> None:
    """First turns go each to its key's rendezvous winner (80/20 ± 3 points over 1,000 keys); short and identical
    short prompts, and identical long embeddings inputs, keep the exact 80/20 split (within one request)."""
    a, b = await _sims(sim)
    gw = await gateway(_config(a.url, b.url))
    # It sent 2,200 requests through the openai SDK and ran past its 30 s under coverage on a busy machine. The SDK's
    # own work was 4/5 of that (7 ms vs 1.4 ms a request, gateway and simulator included; the SDK is the other
    # tests' subject): raw HTTP with the same bodies here. And a share over 1,000 routed requests checked less than
    # the exact route of each of 200 does: the share is the keys' (computed), the gateway must match each key.
    routes = [Route("writer", "primary", "m", 80.0), Route("writer", "secondary", "m", 20.0)]
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer sk-test"}) as session:

        async def ask(content: str) -> str:
            body = {"model": "writer", "messages": [{"role": "user", "content": content}], "max_tokens": 2}
            async with session.post(f"{gw.url}/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()
                await r.read()
                return r.headers["x-tailgate-provider"]

        # The population: 1,000 conversations' first turns (each above the 64-token cache minimum) split 80/20 by
        # their keys' rendezvous winners; the gateway sends each of 200 of them to exactly that winner.
        winners = []
        for i in range(1000):
            key = affinity_key({}, {"model": "writer", "messages": [{"role": "user", "content": _doc(i)}]})
            assert key is not None
            winners.append(hrw_order(key[0], routes, lambda r: r.weight)[0].provider)
        share = Counter(winners)["primary"] / 1000
        assert abs(share - 0.8) <= 0.03, share
        firsts = await _gather(200, lambda i: ask(_doc(i * 5)))
        assert firsts == winners[::5]
        assert set(firsts) == {"primary", "secondary"}
        # short one-off requests (below the cache minimum) and identical short ones: the exact split, as without
        # affinity (smooth weighted round-robin: within one request of 80 % of any run of consecutive picks)
        short = await _gather(100, lambda i: ask(f"hi {i}"))
        same = await _gather(100, lambda i: ask("hi"))

        # embeddings have no prompt cache: identical long inputs are split per request, not held as a hot key
        async def embed(i: int) -> str:
            async with session.post(f"{gw.url}/embeddings", json={"model": "writer", "input": _doc(1)}) as r:
                assert r.status == 200, await r.text()
                await r.read()
                return r.headers["x-tailgate-provider"]

        embeds = await _gather(100, embed)
    for got in (short, same, embeds):
        assert abs(Counter(got)["primary"] - 80) <= 1, Counter(got)


async def test_a_drained_route_moves_only_its_conversations_and_they_come_back(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    a, b = await _sims(sim)
    gw = await gateway(_config(a.url, b.url))
    client = oai(gw.url)

    def turn(i: int, t: int) -> Awaitable[tuple[str, int]]:
        return _ask(
            client, [{"role": "user", "content": _doc(i) + f" turn {t}"}], extra_headers={"x-session-id": f"c{i}"}
        )

    before = await _gather(200, lambda i: turn(i, 0))
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{gw.root_url}/admin/providers/primary/drain", headers=admin) as r:
            assert r.status == 200
        during = await _gather(200, lambda i: turn(i, 1))
        async with session.post(f"{gw.root_url}/admin/providers/primary/enable", headers=admin) as r:
            assert r.status == 200
        after = await _gather(200, lambda i: turn(i, 2))
        async with session.get(f"{gw.root_url}/admin/providers", headers=admin) as r:
            view = await r.json()
    assert {p for p, _ in during} == {"secondary"}
    for i in range(200):
        if before[i][0] == "secondary":
            assert during[i][0] == "secondary"  # not moved: it was never on the drained route
        assert after[i][0] == before[i][0]  # back where its cache is
    assert Counter(p for p, _ in before)["primary"] > 100
    # /admin/providers shows the hit rate per route (the session turns above hit within each provider)
    rates = {p["name"]: p["cache"] for p in view["providers"]}
    for name in ("primary", "secondary"):
        assert rates[name]["prompt_tokens"] > 0
        assert 0.0 < rates[name]["hit_rate"] < 1.0


@pytest.mark.parametrize("backend", ["local", "redis"])
async def test_three_replicas_agree_on_every_conversation_without_shared_state(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any], backend: str, request: pytest.FixtureRequest
) -> None:
    """Three replicas, alone (local state) or as a fleet on one Redis: the route is a function of the key and
    the admitted routes, so they agree on every conversation (the chooser itself reads no state)."""
    a, b = await _sims(sim)
    config = _config(a.url, b.url)
    if backend == "redis":
        server = request.getfixturevalue("redis_server")
        config["state"] = {"backend": "redis", "url": server.url, "namespace": f"t{uuid.uuid4().hex[:12]}"}
    replicas = [await gateway(config, ledger=False) for _ in range(3)]
    clients = [oai(g.url) for g in replicas]

    def state_calls() -> int:  # Redis round trips of the three replicas (0 on local state)
        return sum(int(getattr(g.gateway.fleet.state, "calls", 0)) for g in replicas)

    calls_before = state_calls()
    picks: list[set[str]] = []
    for i in range(150):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _doc(i)}]
        got = {(await _ask(c, messages))[0] for c in clients}
        picks.append(got)
    assert all(len(g) == 1 for g in picks)  # 100 % agreement
    assert {next(iter(g)) for g in picks} == {"primary", "secondary"}
    # ... with no Redis call added for it: 450 routed requests, not one round trip (an open gateway's request
    # path makes none; affinity reads nothing shared)
    assert state_calls() == calls_before


async def test_a_hot_prefix_stays_within_share_plus_epsilon(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    a, b = await _sims(sim)
    gw = await gateway(_config(a.url, b.url, epsilon=0.1, window=100))
    client = oai(gw.url)
    hot = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _doc(7)}]  # every client sends it
    got = [(await _ask(client, hot))[0] for _ in range(400)]
    late = Counter(got[100:])
    winner = got[0]  # the key's rendezvous winner: the bound applies once window / 4 assignments are counted
    n = late[winner]
    share = 0.8 if winner == "primary" else 0.2
    assert n / 300 <= share + 0.1 + 0.02, late
    assert n / 300 >= share  # it keeps at least its share: only what is over the bound spills


async def test_admin_providers_shows_the_hit_rate_per_route(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """One provider, two routes (two upstream models behind two aliases): conversations on one, one-off prompts
    on the other; ``cache_routes`` tells them apart where the provider's ``cache`` mixes them."""
    a = await sim("provider-a", models=("m", "m2"), engine={"pre_median_s": 0.0}, time_scale=0.01)
    config = _config(a.url, a.url)
    config["providers"] = {"primary": config["providers"]["primary"]}
    config["models"] = {
        "writer": {"routes": [{"provider": "primary", "model": "m", "weight": 1}]},
        "editor": {"routes": [{"provider": "primary", "model": "m2", "weight": 1}]},
    }
    gw = await gateway(config)
    client = oai(gw.url)

    def turn(t: int) -> Callable[[int], Awaitable[tuple[str, int]]]:
        history = [{"role": "user", "content": f"t{k}"} for k in range(t)]
        return lambda i: _ask(client, [{"role": "user", "content": _doc(i)}, *history])

    for t in range(3):  # 20 conversations x 3 turns on "m": the later turns hit
        await _gather(20, turn(t))

    async def one_off(i: int) -> None:  # distinct prompts on "m2": nothing to hit
        await client.chat.completions.create(
            model="editor", messages=[{"role": "user", "content": f"{uuid.uuid4()} " + _doc(i)}], max_tokens=2
        )

    await _gather(20, one_off)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with aiohttp.ClientSession() as session, session.get(f"{gw.root_url}/admin/providers", headers=admin) as r:
        view = await r.json()
    (primary,) = view["providers"]
    routes, whole = primary["cache_routes"], primary["cache"]
    assert set(routes) == {"m", "m2"}
    assert routes["m"]["hit_rate"] > 0.3  # turns 2 and 3 of each conversation
    assert routes["m2"]["cached_tokens"] == 0
    assert routes["m2"]["hit_rate"] == 0.0
    assert 0.0 < whole["hit_rate"] < routes["m"]["hit_rate"]  # the provider's rate mixes both routes
    for k in ("prompt_tokens", "cached_tokens"):
        assert routes["m"][k] + routes["m2"][k] == whole[k]


async def test_a_tenant_cannot_mine_session_ids_onto_one_route(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """Issue 37, defect 7: one client key cycling 40 x-session-id values that all hash to the 20 % route (found
    offline, as an attacker's probes would) gets at most 20 % + ε of its requests there (+ the tenant slack),
    not all of them; its first request still goes to the route its session hashes to."""
    a, b = await _sims(sim)
    config = {**_config(a.url, b.url, epsilon=0.1, window=1000), "keys": [{"id": "tenant", "key": "tg-tenant-0123"}]}
    gw = await gateway(config)
    client = oai(gw.url, key="tg-tenant-0123")
    routes = [Route("writer", "primary", "m", 80.0), Route("writer", "secondary", "m", 20.0)]
    mined = []
    for i in itertools.count():
        got = affinity_key({"x-session-id": f"s-{i}"}, {})
        assert got is not None
        if hrw_order(got[0], routes, lambda r: r.weight)[0].provider == "secondary":
            mined.append(f"s-{i}")
            if len(mined) == 40:
                break
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _doc(3)}]
    first = await _ask(client, messages, extra_headers={"x-session-id": mined[0]})
    assert first[0] == "secondary"  # the mining is real: alone, its session goes there
    n = 400
    served = await _gather(
        n - 1, lambda i: _ask(client, messages, extra_headers={"x-session-id": mined[(i + 1) % 40]}), width=8
    )
    on_secondary = 1 + sum(1 for provider, _ in served if provider == "secondary")
    assert on_secondary <= (0.2 + 0.1) * n + TENANT_SLACK, on_secondary
    assert on_secondary >= 0.2 * n - TENANT_SLACK  # what is over the bound moves; the rest keeps its route
