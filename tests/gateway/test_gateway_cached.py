"""Cached prompt tokens through the gateway, against the simulator's prefix cache: the ledger row says what the
provider cached (the simulator's truth), the cost and the key's cost budget price them at ``cached_input``,
``tailgate_tokens_total`` counts them as ``cached``, and ``tailgate usage --json`` shows them."""

from __future__ import annotations

import json
import re
import time

import aiohttp
import pytest
from click.testing import CliRunner

from conftest import GatewayHandle, SimFactory
from tailgate.cli import main
from tailgate.ledger import read_rows
from tailgate.ledger.keys import create_key
from tailgate.ledger.store import open_store
from tailgate.ledger.usage import day_start

ADMIN = "admin-secret-0123456789"
PRICE = {"input": 2.0, "output": 3.0, "cached_input": 0.2}
DOC = "the writing assistant resends the whole document every turn " * 80  # 4,800 chars = 1,200 tokens


@pytest.mark.parametrize("stream", [False, True])
async def test_a_repeated_long_prompt_is_booked_and_priced_as_cached(
    sim: SimFactory, gateway: object, stream: bool
) -> None:
    p = await sim("provider-a", engine={"pre_median_s": 0.0}, time_scale=0.05)  # DeepSeek-shaped, 64-token blocks
    q = await sim("instant", engine={"prefix_cache": False})  # says nothing about caching
    gw: GatewayHandle = await gateway(  # type: ignore[operator]
        {
            "providers": {
                "p": {"base_url": p.url, "api_keys": ["sk-p-0123456789"], "price": PRICE},
                "q": {"base_url": q.url, "api_keys": ["sk-q-0123456789"], "price": PRICE},
            },
            "models": {
                "doc": {"routes": [{"provider": "p", "model": "m"}]},
                "plain": {"routes": [{"provider": "q", "model": "m"}]},
            },
            "routing": {"probes": {"enabled": False}},
            "admin_key": ADMIN,
        }
    )
    assert gw.gateway.ledger is not None
    path = gw.gateway.ledger.path
    with open_store(path) as conn:
        secret = create_key(conn, "team-a", cost_per_day=100.0)[1]
    await gw.gateway.key_directory.reload()
    headers = {"Authorization": f"Bearer {secret}"}
    body = {"messages": [{"role": "user", "content": DOC}], "max_tokens": 4, "stream": stream}
    async with aiohttp.ClientSession() as session:
        for model in ("doc", "doc", "doc", "plain", "plain"):
            async with session.post(f"{gw.url}/chat/completions", json={**body, "model": model}, headers=headers) as r:
                assert r.status == 200
                await r.read()
        async with session.get(f"{gw.root_url}/metrics") as r:
            metrics = await r.text()
        await gw.gateway.ledger.flush()
        admin = {"Authorization": f"Bearer {ADMIN}"}
        async with session.get(f"{gw.root_url}/dashboard/api/usage?by=provider&since=1h", headers=admin) as r:
            assert r.status == 200
            dashboard = {g["provider"]: g for g in (await r.json())["groups"]}
    truth = p.truth.records()
    assert [t.cached_tokens for t in truth] == [0, 1152, 1152]  # 18 whole 64-token blocks of 1,200
    await gw.stop()

    rows = read_rows(path)
    assert [r.provider for r in rows] == ["p", "p", "p", "q", "q"]
    assert [r.cached_tokens for r in rows] == [0, 1152, 1152, None, None]  # None: q never said
    for row in rows:
        cached = row.cached_tokens or 0
        prompt, output = row.prompt_tokens or 0, row.output_tokens or 0
        want = ((prompt - cached) * 2.0 + cached * 0.2 + output * 3.0) / 1e6
        assert row.cost == pytest.approx(want), row
    warm, cold = rows[1].cost, rows[0].cost
    assert warm is not None
    assert cold is not None
    assert warm < cold * 0.3  # 96 % of the prompt at a tenth of the price

    # the key's cost budget settled on the same (cached) price
    day = int(day_start(time.time()))
    spent = float(await gw.gateway.state.usage(f"key:team-a:budget:cost:daily:{day}", None))
    assert spent == pytest.approx(sum(r.cost or 0.0 for r in rows))

    # Prometheus: the cached kind, per provider (0 for the provider that never said, like reasoning)
    found = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'^tailgate_tokens_total\{direction="cached",provider="([^"]+)"\} (\S+)', metrics, re.M)
    }
    assert found == {"p": 2304.0, "q": 0.0}

    # tailgate usage --json
    out = CliRunner().invoke(main, ["usage", "--db", str(path), "--by", "provider", "--json"])
    assert out.exit_code == 0, out.output
    groups = {g["provider"]: g for g in json.loads(out.stdout)}  # stderr names the store
    assert groups["p"]["cached_tokens"] == 2304
    assert groups["p"]["cache_hit_rate"] == round(2304 / 3600, 4)
    assert (groups["q"]["cached_tokens"], groups["q"]["cache_hit_rate"]) == (0, None)
    # the dashboard's usage API passes the same keys through
    assert {p: (g["cached_tokens"], g["cache_hit_rate"]) for p, g in dashboard.items()} == {
        p: (g["cached_tokens"], g["cache_hit_rate"]) for p, g in groups.items()
    }
