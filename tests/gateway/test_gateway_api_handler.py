"""An API is a handler (gateway/api_handler.py): a sixth API — tests/gateway/toy_api.py, one module — is served end to
end once registered, through the whole request path (key, alias, reservation, routing, the measurement core,
the ledger), with its own shapes for answers, streams and errors, and no other file changed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import toy_api

from conftest import GatewayHandle, SimFactory
from tailgate.gateway import api_handler
from tailgate.ledger import read_rows


@pytest.fixture
async def toy() -> AsyncIterator[api_handler.Api]:
    api_handler.register(toy_api.API)
    yield toy_api.API
    api_handler.unregister(toy_api.API)


async def test_a_registered_module_is_served_end_to_end(
    toy: api_handler.Api, sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    p = await sim("instant", models=("up",))
    gw = await gateway(
        {
            "providers": {"a": {"base_url": p.url}},
            "models": {"m": {"routes": [{"provider": "a", "model": "up"}]}},
        }
    )
    url = f"{gw.url}/toy/say"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json={"model": "m", "say": "hello"}) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["x-tailgate-provider"] == "a"
            answer: Any = await resp.json(content_type=None)
        assert isinstance(answer["toy"], str)
        assert answer["toy"]
        async with session.post(url, json={"model": "m", "say": "hello", "stream": True}) as resp:
            assert resp.status == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            frames = (await resp.read()).decode().split("\n\n")
        assert frames[-2:] == ["data: end", ""]
        assert len(frames) > 3
        assert all(f.startswith("data: ") for f in frames[:-1])
        async with session.post(url, json={"model": "nope", "say": "hi"}) as resp:  # the gateway's own refusal
            assert resp.status == 404
            refused: Any = await resp.json(content_type=None)
        assert refused["status"] == 404
        assert "nope" in refused["toy_error"]
        async with session.post(url, json={"model": "m"}) as resp:  # the handler's validation
            assert resp.status == 400
            assert "toy request" in (await resp.json(content_type=None))["toy_error"]
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    assert [(r.endpoint, r.stream, r.status, r.outcome) for r in rows] == [
        ("toy", False, 200, "ok"),
        ("toy", True, 200, "ok"),
        ("toy", False, 404, "unknown_model"),
        ("toy", False, 400, "bad_request"),
    ]
    assert rows[1].output_tokens
    assert rows[1].ttft_ms is not None


async def test_unregistered_it_is_not_served(sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]) -> None:
    p = await sim("instant", models=("up",))
    gw = await gateway(
        {"providers": {"a": {"base_url": p.url}}, "models": {"m": {"routes": [{"provider": "a", "model": "up"}]}}}
    )
    async with aiohttp.ClientSession() as session, session.post(f"{gw.url}/toy/say", json={"model": "m"}) as resp:
        assert resp.status == 404
    await gw.stop()


def test_a_path_is_served_by_one_handler(toy: api_handler.Api) -> None:
    class Other(toy_api.ToyApi):
        name = "other"

    with pytest.raises(ValueError, match="served by 'toy' already"):
        api_handler.register(Other())
