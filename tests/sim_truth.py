"""The simulator's ground truth as tests read it: ``GET /sim/truth`` of a running simulator (docs/simulator.md), one
helper instead of a copy per test file.

``url`` is the simulator's API root (``…/v1``, what ``SimProvider.url`` and ``ThreadedSim.url`` are) or its root;
records come as the simulator keeps them (in the order requests ended), as plain dicts."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import aiohttp

from tailgate.sim.truth import as_dicts


def sim_root(url: str) -> str:
    """The simulator's root from its API root: ``http://127.0.0.1:PORT/v1`` → ``http://127.0.0.1:PORT``."""
    return url.removesuffix("/").removesuffix("/v1")


def _url(url: str, limit: int | None) -> str:
    return sim_root(url) + "/sim/truth" + (f"?limit={limit}" if limit is not None else "")


async def truth(
    url: str, *, session: aiohttp.ClientSession | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Every request the simulator at ``url`` recorded (its last ``limit``), on ``session`` or a session of its own."""
    if session is None:
        async with aiohttp.ClientSession() as own:
            return await truth(url, session=own, limit=limit)
    async with session.get(_url(url, limit)) as resp:
        assert resp.status == 200, resp.status
        return as_dicts(await resp.read())


async def truth_by_id(url: str, *, session: aiohttp.ClientSession | None = None) -> dict[str, dict[str, Any]]:
    """The records by the request id the client (or the gateway) sent (``client_request_id``), each id once."""
    records = await truth(url, session=session)
    by_id = {rec["client_request_id"]: rec for rec in records}
    assert len(by_id) == len(records), "a request id the simulator saw twice"
    return by_id


def truth_sync(url: str, *, limit: int | None = None) -> list[dict[str, Any]]:
    """:func:`truth` for a test with no event loop of its own (a simulator in a thread)."""
    with urllib.request.urlopen(_url(url, limit), timeout=10) as resp:  # noqa: S310 - a loopback simulator
        records: list[dict[str, Any]] = json.loads(resp.read())["requests"]
    return records
