"""Accounting invariants over a mixed run against simulated providers (docs/keys.md): admitted requests (whole
and streamed), refusals for every reason (model not allowed, expired, rpm, tpm, concurrency, budget, shed,
pacing), streams the provider cut, a key revoked mid-run and a budget spent to its end. For every key:
``tailgate usage`` = the ledger = the sum of what the provider reported (the simulator's ``/sim/truth``) plus
the documented estimates (a cut stream's prompt: the gateway's count, the prompt bound, flagged estimated), and
refusals change no counter (the key's rpm, tpm and budget counters in the fleet state equal what the admitted
requests used)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from click.testing import CliRunner

from conftest import GatewayHandle, SimFactory, eventually
from sim_truth import truth as sim_truth
from tailgate.cli import main
from tailgate.gateway.request_path.estimate import prompt_bound
from tailgate.ledger import read_rows
from tailgate.ledger.keys import create_key
from tailgate.ledger.store import open_store
from tailgate.ledger.usage import day_start, usage

GwFactory = Callable[..., Awaitable[GatewayHandle]]
ADMIN = "admin-0123456789abcdef"
PRICE = {"input": 3.0, "output": 11.0}
REFUSALS = {
    "model_not_allowed",
    "rpm_limited",
    "budget_exceeded",
    "tpm_limited",
    "concurrency_limited",
    "shed",
    "rate_limited",
    "key_expired",
    "key_revoked",
}


class Run:
    """Sends requests with their own ``x-request-id`` and remembers each body's length (for the estimates)."""

    def __init__(self, session: aiohttp.ClientSession, gw: GatewayHandle) -> None:
        self.session, self.gw = session, gw
        self.body: dict[str, bytes] = {}
        self.n = 0

    async def chat(
        self, key: str, model: str = "chat", *, max_tokens: int = 8, stream: bool = False, cls: str | None = None
    ) -> int:
        self.n += 1
        rid = f"acct-{self.n:04d}"
        body = json.dumps(
            {"model": model, "messages": [{"role": "user", "content": f"request {self.n}"}], "max_tokens": max_tokens}
            | ({"stream": True} if stream else {})
        ).encode()
        self.body[rid] = body
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", "x-request-id": rid}
        if cls is not None:
            headers["x-tailgate-class"] = cls
        async with self.session.post(self.gw.url + "/chat/completions", data=body, headers=headers) as r:
            await r.read()
            return r.status


@pytest.mark.timeout(90)  # ~70 requests, a few of them held 0.5 s, on a busy 2-core machine
async def test_usage_equals_ledger_equals_provider_truth_and_refusals_change_nothing(
    sim: SimFactory, gateway: GwFactory
) -> None:
    """The invariants of the module docstring over one mixed run; every row on the right key and alias."""
    fast = await sim("instant", models=("m",))
    cutter = await sim("instant", models=("m",), faults={"disconnect_after_tokens": 3})
    slow = await sim("instant", models=("m",), faults={"stall_first_token_s": 0.5})
    paced = await sim("instant", models=("m",))
    sims = (fast, cutter, slow, paced)
    gw = await gateway(
        {
            "admin_key": ADMIN,
            "providers": {
                "p": {"base_url": fast.url, "price": PRICE},
                "cut": {"base_url": cutter.url, "price": PRICE},
                "slow": {"base_url": slow.url, "price": PRICE},
                "q": {"base_url": paced.url, "price": PRICE, "limits": {"rpm": 1}},
            },
            "models": {
                "chat": {"routes": [{"provider": "p", "model": "m"}]},
                "code": {"routes": [{"provider": "p", "model": "m"}]},
                "cut": {"routes": [{"provider": "cut", "model": "m"}]},
                "slow": {"routes": [{"provider": "slow", "model": "m"}]},
                "paced": {"routes": [{"provider": "q", "model": "m"}]},
            },
            "routing": {"probes": {"enabled": False}, "shed": {"max_in_flight": 3, "thresholds": {"batch": 0.3}}},
        }
    )
    assert gw.gateway.ledger is not None
    path = gw.gateway.ledger.path
    with open_store(path) as conn:
        keys = {
            "a": create_key(conn, "a", rpm=5, models=["chat", "cut"])[1],
            "b": create_key(conn, "b", tokens_per_day=200)[1],
            "c": create_key(conn, "c", tpm=80)[1],
            "d": create_key(conn, "d", max_concurrency=1)[1],
            "e": create_key(conn, "e", traffic_class="batch")[1],
            "f": create_key(conn, "f", rpm=10)[1],
            "g": create_key(conn, "g", expires_at=time.time() - 1)[1],
            "h": create_key(conn, "h", tokens_per_day=100_000)[1],
        }
    await gw.gateway.key_directory.reload()

    async with aiohttp.ClientSession() as session:
        run = Run(session, gw)
        # a: admitted whole, streamed and cut; refused for its model; then its rpm (5) says no.
        assert await run.chat(keys["a"]) == 200
        assert await run.chat(keys["a"], stream=True) == 200
        assert await run.chat(keys["a"], "cut", stream=True, max_tokens=50) == 200  # cut after 3 tokens
        assert await run.chat(keys["a"], "cut", stream=True, max_tokens=50) == 200
        for _ in range(3):
            assert await run.chat(keys["a"], "code") == 403
        assert await run.chat(keys["a"]) == 200
        assert await run.chat(keys["a"], stream=True) == 429  # five admitted (the 403s took nothing): the rpm
        # b: a daily budget of 200 tokens, spent to its end, then refused (retries keep the budget's answer).
        statuses = []
        for _ in range(12):
            statuses.append(await run.chat(keys["b"], max_tokens=20))
            await gw.gateway.books.drain()  # settled before the next: each sees what the last one really used
        assert statuses[0] == 200
        assert statuses[-3:] == [429, 429, 429]
        # c: tpm 80 — one request fits, one asks for more than the whole minute (a 400: no minute could admit it).
        assert await run.chat(keys["c"], max_tokens=10) == 200
        assert await run.chat(keys["c"], max_tokens=200) == 400
        # d: max_concurrency 1 against a slow provider: one served, two refused.
        got = await asyncio.gather(*(run.chat(keys["d"], "slow") for _ in range(3)))
        assert sorted(got) == [200, 429, 429]
        # e: a batch key's requests shed while another request holds a third of max_in_flight.
        await gw.gateway.books.drain()  # d's answered request has finished (no longer in flight)
        holder = asyncio.ensure_future(run.chat(keys["f"], "slow"))
        await eventually(lambda: sum(p.in_flight for p in gw.gateway.providers.values()) >= 1, 3.0)
        assert [await run.chat(keys["e"]) for _ in range(2)] == [429, 429]
        assert await holder == 200
        # f: the provider's rpm 1 admits one; the next is paced out.
        assert await run.chat(keys["f"], "paced") == 200
        assert await run.chat(keys["f"], "paced") == 429
        # g: expired.
        assert await run.chat(keys["g"]) == 401
        # h: served, revoked mid-run through /admin/keys, then refused on its own row.
        assert await run.chat(keys["h"], stream=True) == 200
        assert await run.chat(keys["h"], "cut", stream=True, max_tokens=50) == 200
        async with session.delete(gw.root_url + "/admin/keys/h", headers={"Authorization": f"Bearer {ADMIN}"}) as r:
            assert r.status == 200
        assert [await run.chat(keys["h"]) for _ in range(2)] == [401, 401]

        await gw.gateway.books.drain()
        await gw.gateway.ledger.flush()
        truth = [t for s in sims for t in await sim_truth(s.url, session=session)]

    rows = [r for r in read_rows(path) if r.request_id.startswith("acct-")]
    assert len(rows) == run.n  # one row per request, whatever its outcome
    assert {r.outcome for r in rows} >= REFUSALS | {"ok", "cut"}
    assert all(r.key_id is not None for r in rows)  # every row on its key: refused, expired and revoked too
    assert {(r.key_id, r.outcome) for r in rows if r.outcome in ("key_expired", "key_revoked")} == {
        ("g", "key_expired"),
        ("h", "key_revoked"),
    }
    assert all(r.alias != "-" for r in rows)

    by_request = defaultdict(list)
    for t in truth:
        by_request[t["client_request_id"]].append(t)
    per_key: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])  # provider-reported + estimates
    estimated = 0
    for row in rows:
        sent = by_request.get(row.request_id, [])
        if row.provider is None:  # refused before any attempt: nothing upstream, nothing charged
            assert row.outcome in REFUSALS, row
            assert sent == []
            assert (row.prompt_tokens, row.output_tokens, row.cost) == (None, None, None), row
            continue
        (t,) = sent  # no retries in this run: one upstream request per admitted one
        assert row.output_tokens == t["output_tokens"], row
        if row.outcome == "cut":  # the provider never sent usage: the gateway's own count of the prompt
            assert row.tokens_estimated
            assert row.prompt_tokens == round(prompt_bound(run.body[row.request_id]))
            estimated += 1
        else:
            assert row.prompt_tokens == t["prompt_tokens"], row
        assert row.prompt_tokens is not None
        assert row.output_tokens is not None
        cost = (row.prompt_tokens * PRICE["input"] + row.output_tokens * PRICE["output"]) / 1e6
        assert row.cost == pytest.approx(cost)
        k = per_key[row.key_id or "-"]
        k[0] += row.prompt_tokens
        k[1] += row.output_tokens
        k[2] += cost
    assert estimated == 3  # a's two cut streams and h's

    ledger: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        g = ledger[row.key_id or "-"]
        g["requests"] += 1
        g["errors"] += row.outcome != "ok" and row.provider is not None
        g["refused"] += row.outcome != "ok" and row.provider is None
        g["input_tokens"] += row.prompt_tokens or 0
        g["output_tokens"] += row.output_tokens or 0
        g["cost"] += row.cost or 0.0
    with open_store(path) as conn:
        report = {g["key"]: g for g in usage(conn, since=time.time() - 3600, by="key")}
    result = CliRunner().invoke(main, ["usage", "--db", str(path), "--by", "key", "--since", "1h", "--json"])
    assert result.exit_code == 0, result.output
    cli = {g["key"]: g for g in json.loads(result.stdout)}
    assert cli == report
    for key in keys:
        mine = report.get(key)
        want = ledger.get(key)
        if want is None:
            assert mine is None
            continue
        assert mine is not None, key
        for field in ("requests", "errors", "refused", "input_tokens", "output_tokens"):
            assert mine[field] == want[field], (key, field)
        assert mine["cost"] == pytest.approx(want["cost"]), key
        reported = per_key.get(key, [0, 0, 0.0])
        assert (mine["input_tokens"], mine["output_tokens"]) == (reported[0], reported[1]), key
        assert mine["cost"] == pytest.approx(reported[2]), key

    # Refusals change no counter: each key's counters hold what its admitted requests used, nothing more.
    state = gw.gateway.state
    day = int(day_start(time.time()))
    admitted: dict[str, int] = defaultdict(int)
    for row in rows:
        admitted[row.key_id or "-"] += row.provider is not None

    async def counter(name: str, window_s: float | None) -> float:
        return float(await state.usage(name, window_s))

    assert await counter("key:a:rpm", 60.0) == admitted["a"] == 5
    assert await counter("key:f:rpm", 60.0) == admitted["f"] == 2
    for key in ("b", "h"):
        spent = ledger[key]["input_tokens"] + ledger[key]["output_tokens"]
        assert await counter(f"key:{key}:budget:tokens:daily:{day}", None) == spent, key
    assert ledger["b"]["input_tokens"] + ledger["b"]["output_tokens"] <= 200  # the budget held at its end
    assert ledger["b"]["refused"] >= 3
    c_spent = ledger["c"]["input_tokens"] + ledger["c"]["output_tokens"]
    assert await counter("key:c:tpm", 60.0) == c_spent
