"""Time-of-day price windows through the gateway (issue 41): a live request that arrives inside a provider's
window is priced at the window's price, and its ledger row names the tier and the lane; ``tailgate usage --by
lane`` reads them back."""

from __future__ import annotations

import json
import time

import aiohttp
import pytest
from click.testing import CliRunner

from conftest import GatewayHandle, SimFactory
from tailgate.cli import main
from tailgate.ledger import read_rows
from tailgate.ledger.store import open_store

PRICE = {"input": 2.0, "output": 3.0}


async def test_a_request_inside_a_window_is_priced_and_tiered_by_it(sim: SimFactory, gateway: object) -> None:
    now = time.gmtime()
    minute = now.tm_hour * 60 + now.tm_min
    start, end = (minute - 60) % 1440, (minute + 60) % 1440  # the window holds now, whatever the hour
    window = {
        "name": "night",
        "start": f"{start // 60:02d}:{start % 60:02d}",
        "end": f"{end // 60:02d}:{end % 60:02d}",
        "timezone": "UTC",
        "ratio": 0.5,
    }
    p = await sim("instant")
    q = await sim("instant")
    gw: GatewayHandle = await gateway(  # type: ignore[operator]
        {
            "providers": {
                "p": {"base_url": p.url, "api_keys": ["sk-p-0123456789"], "price": {**PRICE, "windows": [window]}},
                "q": {"base_url": q.url, "api_keys": ["sk-q-0123456789"], "price": PRICE},
            },
            "models": {
                "a": {"routes": [{"provider": "p", "model": "m"}]},
                "b": {"routes": [{"provider": "q", "model": "m"}]},
            },
            "routing": {"probes": {"enabled": False}},
        }
    )
    assert gw.gateway.ledger is not None
    path = gw.gateway.ledger.path
    body = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8}
    async with aiohttp.ClientSession() as session:
        for model in ("a", "b"):
            async with session.post(f"{gw.url}/chat/completions", json={**body, "model": model}) as r:
                assert r.status == 200
                await r.read()
    await gw.stop()
    rows = read_rows(path)
    assert [(r.provider, r.lane, r.price_tier) for r in rows] == [
        ("p", "interactive", "night"),
        ("q", "interactive", "standard"),
    ]
    for row, share in zip(rows, (0.5, 1.0), strict=True):
        want = ((row.prompt_tokens or 0) * 2.0 + (row.output_tokens or 0) * 3.0) * share / 1e6
        assert row.cost == pytest.approx(want)
    with open_store(path) as conn:
        (lane,) = conn.execute("SELECT DISTINCT lane FROM requests").fetchone()
        assert lane == "interactive"
    out = CliRunner().invoke(main, ["usage", "--db", str(path), "--by", "lane", "--json"])
    assert out.exit_code == 0, out.output
    groups = json.loads(out.stdout)  # stderr names the store
    assert [(g["lane"], g["requests"]) for g in groups] == [("interactive", 2)]
    assert groups[0]["cost"] == pytest.approx(sum(r.cost or 0 for r in rows), abs=1e-9)
