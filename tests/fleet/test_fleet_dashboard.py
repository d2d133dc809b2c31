"""The dashboard of a fleet: whichever replica a refresh reaches, its live API shows every replica (from what
each publishes through Redis), names the one that answered, and reads the fleet-merged windows."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from test_fleet import ADMIN, BODY, FleetFactory, Replica
from test_fleet import fleet as fleet

from conftest import SimFactory


async def _live(session: aiohttp.ClientSession, replica: Replica) -> dict[str, Any]:
    async with session.get(f"{replica.url}/dashboard/api/live", headers=ADMIN) as resp:
        assert resp.status == 200
        return dict((await resp.json())["fleet"])


async def test_every_replica_shows_the_whole_fleet_and_names_itself(sim: SimFactory, fleet: FleetFactory) -> None:
    """Traffic through replicas 0 and 1 only: replica 2's live view lists all three replicas (itself marked as
    the one answering), and its windows — fleet-merged — count the requests it never saw."""
    a = await sim("instant", models=("up",))
    b = await sim("instant", models=("up",))
    replicas = await fleet(3, a.url, b.url)
    headers = {"Authorization": "Bearer tg-free-key-0123"}
    async with aiohttp.ClientSession() as session:
        for r in replicas[:2]:
            for _ in range(10):
                async with session.post(f"{r.url}/v1/chat/completions", json=BODY, headers=headers) as resp:
                    assert resp.status == 200
        deadline = time.monotonic() + 15  # publishing is every second; bounded wait on a busy machine
        while True:
            view = await _live(session, replicas[2])
            served = sum((w["e2e_ms"] or {}).get("count", 0) for w in view["windows"])
            if len(view["replicas"]) == 3 and served >= 20:
                break
            assert time.monotonic() < deadline, view
            await asyncio.sleep(0.2)
        assert view["shared"] is True
        assert view["windows_scope"] == "fleet"
        answering = [r for r in view["replicas"] if r["answering"]]
        assert len(answering) == 1
        assert answering[0]["replica"] == view["replica"]
        assert len({r["replica"] for r in view["replicas"]}) == 3
        for r in view["replicas"]:
            assert set(r["providers"]) == {"a", "b"}
            assert set(r["weights"]["m"]) == {"a", "b"}
            assert r["config"]
        other = await _live(session, replicas[0])
        assert other["replica"] != view["replica"]  # each answer names its own replica
