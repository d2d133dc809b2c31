"""Helpers shared by the upstream tests (imported by basename, like tests/wire/sdk_stub.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tailgate.sim.provider import SimProvider
from tailgate.upstream import Call, Endpoint, Event, Timeouts, UpstreamClient

SimFactory = Callable[..., Awaitable[SimProvider]]


def chat_body(max_tokens: int = 5, *, stream: bool = True, **extra: Any) -> dict[str, Any]:
    """A minimal chat request for the simulator."""
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "stream": stream,
        **extra,
    }


class Clients:
    """Makes UpstreamClients for a test and closes them all afterwards."""

    def __init__(self) -> None:
        self.made: list[UpstreamClient] = []

    def __call__(self, url: str, keys: tuple[str, ...] = (), **timeouts: float | None) -> UpstreamClient:
        client = UpstreamClient(Endpoint("test", url, api_keys=keys, timeouts=Timeouts(**timeouts)))
        self.made.append(client)
        return client

    async def close(self) -> None:
        for client in self.made:
            await client.close()


async def run(c: Call) -> list[Event]:
    """Every event of a call, the final CallResult included."""
    events: list[Event] = []
    async with c:
        async for event in c:
            events.append(event)
    return events


def near(ours: float | None, truth: float | None) -> bool:
    """Within max(2 ms, 5%) of the simulator's truth."""
    assert ours is not None
    assert truth is not None
    return abs(ours - truth) <= max(2.0, 0.05 * truth)
