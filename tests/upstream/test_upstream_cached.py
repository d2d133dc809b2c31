"""The measurement core reads cached prompt tokens from either usage shape (OpenAI's and DeepSeek's)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from upstream_support import Clients, SimFactory

from tailgate.upstream import RESPONSES, CallResult, call
from tailgate.upstream._frames import decode_body, decode_frame

DOC = "the writing assistant resends the whole document every turn " * 40  # 2,400 chars = 600 tokens


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    made = Clients()
    yield made
    await made.close()


def body(stream: bool, text: str = DOC) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 3, "stream": stream}


@pytest.mark.parametrize(
    ("usage", "cached"),
    [
        ({"prompt_tokens": 10, "completion_tokens": 1}, None),
        ({"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 8}}, 8),
        ({"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": None}, None),
        ({"prompt_tokens": 10, "completion_tokens": 1, "prompt_cache_hit_tokens": 6, "prompt_cache_miss_tokens": 4}, 6),
        (
            {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 0}, "prompt_cache_hit_tokens": 6},
            6,
        ),
        ({"input_tokens": 10, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 4}}, 4),
    ],
)
def test_usage_shapes(usage: dict[str, Any], cached: int | None) -> None:
    """OpenAI's details, DeepSeek's hit tokens, the Responses API's; None when the provider said nothing."""
    raw = json.dumps({"choices": [], "usage": usage}).encode()
    parsed = decode_frame(raw).usage
    assert parsed is not None
    assert parsed.cached == cached
    assert decode_body(raw).usage is not None
    assert decode_body(raw).usage.cached == cached  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", [False, True])
async def test_cached_tokens_match_the_simulators_truth(sim: SimFactory, clients: Clients, stream: bool) -> None:
    """Against a DeepSeek-shaped simulator: 0 on the cold call, the cached prefix on the next, as its truth says."""
    p = await sim("provider-a", engine={"pre_median_s": 0.0}, time_scale=0.05)
    c = clients(p.url, keys=("sk-a",))
    cold = await call(c, "chat/completions", body(stream), stream=stream).collect()
    warm = await call(c, "chat/completions", body(stream), stream=stream).collect()
    truth = p.truth.records()
    assert (cold.cached_tokens, warm.cached_tokens) == (0, 9 * 64)
    assert [t.cached_tokens for t in truth] == [0, 9 * 64]
    assert warm.prompt_tokens == 600


async def test_responses_api_cached_tokens(sim: SimFactory, clients: Clients) -> None:
    """The Responses API's input_tokens_details.cached_tokens, streamed (response.completed)."""
    p = await sim("instant")
    c = clients(p.url)
    req = {"model": "m", "input": DOC, "max_output_tokens": 2, "stream": True}
    await call(c, "responses", req, stream=True, dialect=RESPONSES).collect()
    warm = await call(c, "responses", req, stream=True, dialect=RESPONSES).collect()
    assert warm.cached_tokens == 4 * 128


async def test_no_cache_fields_is_none(sim: SimFactory, clients: Clients) -> None:
    """A provider that says nothing about caching (prefix_cache: false): cached_tokens is None, not 0."""
    p = await sim("instant", engine={"prefix_cache": False})
    c = clients(p.url)
    for stream in (False, True):
        result = await call(c, "chat/completions", body(stream), stream=stream).collect()
        assert result.ok
        assert result.cached_tokens is None


async def test_deepseek_only_usage_shape_end_to_end(clients: Clients) -> None:
    """An upstream that reports only prompt_cache_hit_tokens (older DeepSeek): read in a stream and a body."""

    usage = {
        "prompt_tokens": 700,
        "completion_tokens": 1,
        "prompt_cache_hit_tokens": 640,
        "prompt_cache_miss_tokens": 60,
    }

    async def handler(request: web.Request) -> web.StreamResponse:
        req = await request.json()
        if not req.get("stream"):
            msg = {"role": "assistant", "content": "ok"}
            return web.json_response({"choices": [{"index": 0, "message": msg}], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}}]}
        for frame in (chunk, {"choices": [], "usage": usage}):
            await resp.write(b"data: " + json.dumps(frame).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        c = clients(f"http://127.0.0.1:{port}/v1")
        results: list[CallResult] = [
            await call(c, "chat/completions", body(stream), stream=stream).collect() for stream in (False, True)
        ]
    finally:
        await runner.cleanup()
    assert [r.cached_tokens for r in results] == [640, 640]
    assert all(r.ok for r in results)
