"""The gateway's own requests become traffic_minutes rows beside the monitor's probes, in one store."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp

from conftest import GatewayHandle, SimFactory
from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.ledger import open_db
from tailgate.ledger.leaderboard import compute
from tailgate.ledger.samples import SampleStore, read_traffic
from tailgate.monitor import Monitor, targets_from_config


async def test_gateway_traffic_and_probes_side_by_side(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]], tmp_path: Path
) -> None:
    """Requests through the gateway are aggregated per minute into its ledger file; a monitor round into the
    same file adds probes; the leaderboard row carries both, counted separately. TTFT and tok/s come from the
    streamed requests only (a non-streamed answer arrives whole: no first token, no generation time)."""
    upstream = await sim("instant")
    config: dict[str, Any] = {
        "providers": {"p": {"base_url": upstream.url}},
        "models": {"m": {"routes": [{"provider": "p", "model": "up-m"}]}},
    }
    gw = await gateway(config)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
    async with aiohttp.ClientSession() as session:
        for i in range(10):
            async with session.post(f"{gw.url}/chat/completions", json={**body, "stream": i % 2 == 0}) as resp:
                assert resp.status == 200
                await resp.read()
        async with session.post(f"{gw.url}/chat/completions", json={**body, "model": "nope"}) as resp:
            assert resp.status == 404  # no provider tried: not traffic of any provider
    await gw.gateway.traffic.flush(everything=True)
    db = gw.gateway.ledger.path if gw.gateway.ledger is not None else None
    assert db is not None
    cfg = validate_data(config, GatewayConfig, "test-config")
    async with SampleStore(db) as store:
        monitor = Monitor(resolve_providers(cfg), targets_from_config(cfg), store, workloads=["short"])
        try:
            await monitor.run_round(0)
        finally:
            await monitor.close()
    with closing(open_db(db)) as conn:
        rows = read_traffic(conn)
        (board,) = compute(conn, window_s=3600, now=time.time() + 60)
    assert sum(r.requests for r in rows) == 10
    assert sum(r.tok_s_n for r in rows) == 5  # the five streamed ones
    assert {(r.provider, r.model) for r in rows} == {("p", "up-m")}
    assert sum(r.errors for r in rows) == 0
    assert sum(r.output_tokens for r in rows) == 200
    assert (board.provider, board.model, board.samples, board.traffic_requests) == ("p", "up-m", 1, 10)
    assert board.traffic_reliability_pct == 100.0
    assert board.traffic_ttft_p90_ms is not None
    assert board.traffic_tok_s_avg is not None
