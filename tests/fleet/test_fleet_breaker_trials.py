"""Half-open trials on a fleet: one replica runs them, the others stay open, and all close together."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from conftest import GatewayHandle, SimFactory, eventually
from loop_lateness import WAKEUPS, LoopLateness
from tailgate.sim.faults import Faults
from tailgate.state.server import RedisServer

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def test_one_replica_runs_the_trials_and_every_replica_closes_with_it(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]], redis_server: RedisServer
) -> None:
    """a fails on replica A only (B gets no traffic): A's breaker opens, B's within 1 s. a recovers: A runs
    the half-open trial and closes; B, which never went half-open itself, closes within 1 s of A."""
    a, b = await sim("instant", models=("up",)), await sim("instant", models=("up",))
    namespace = f"t{uuid.uuid4().hex[:10]}"

    def config(replica: str) -> dict[str, Any]:
        return {
            "providers": {"a": {"base_url": a.url}, "b": {"base_url": b.url}},
            "models": {
                "m": {
                    "routes": [
                        {"provider": "a", "model": "up", "weight": 80},
                        {"provider": "b", "model": "up", "weight": 20},
                    ]
                }
            },
            "routing": {
                "policy": "weighted",
                "probes": {"enabled": False},  # the trials are client requests
                "breaker": {"cooldown": "0.5s", "max_cooldown": "0.5s", "trial_requests": 1},
            },
            "state": {
                "backend": "redis",
                "url": redis_server.url,
                "namespace": namespace,
                "replica": replica,
                "timeout": "250ms",
                "sync_interval": "50ms",
            },
        }

    ga, gb = await gateway(config("A")), await gateway(config("B"))
    breaker_a = ga.gateway.breakers.get("a")
    breaker_b = gb.gateway.breakers.get("a")
    a.set_faults(Faults(error_rate=1.0, error_statuses=[500]))
    # "Within 1 s" is the promise; both gateways run on this process's loop, so the allowance grows by its
    # lateness measured in the same run, once per wake-up on the sync's path (loop_lateness.WAKEUPS).
    async with aiohttp.ClientSession() as session, LoopLateness() as late:

        async def send() -> None:
            async with session.post(f"{ga.url}/chat/completions", json=BODY) as r:
                await r.read()

        for _ in range(60):
            if breaker_a.state != "closed":
                break
            await send()
        assert breaker_a.state == "open"
        t_open = time.monotonic()
        await eventually(lambda: breaker_b.state == "open", within_s=30.0)
        took = time.monotonic() - t_open
        assert took <= 1.0 + WAKEUPS * late.max_s, (took, late.max_s)
        a.clear_faults()
        deadline = time.monotonic() + 10.0
        while breaker_a.state != "closed" and time.monotonic() < deadline:
            await send()
            await asyncio.sleep(0.05)
        assert breaker_a.state == "closed"
        t_closed = time.monotonic()
        await eventually(lambda: breaker_b.state == "closed", within_s=30.0)
        took = time.monotonic() - t_closed
        assert took <= 1.0 + WAKEUPS * late.max_s, (took, late.max_s)
    b_states = [t.to_state for t in breaker_b.transitions]
    assert "half_open" not in b_states, b_states  # B never sent trials of its own
    assert [t.to_state for t in breaker_a.transitions][-2:] == ["half_open", "closed"]
