"""The measurement core reads Anthropic's Messages API stream (a passthrough's, bench --api anthropic): tokens are
text, thinking and tool-input deltas (a signature is none), the answer starts at the first text or tool input,
usage comes from message_start and message_delta merged (cache reads and writes added to the prompt, reads as
cached), message_stop ends the stream, an error event fails it. The same bytes with LF and with CRLF line ends
(the fast path and the SSE field parser) measure the same."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from upstream_support import Clients, run

from tailgate.upstream import ANTHROPIC, CallResult, Chunk, Done, call

EVENTS: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "usage": {
                "input_tokens": 7,
                "cache_read_input_tokens": 30,
                "cache_creation_input_tokens": 3,
                "output_tokens": 1,
            },
        },
    },
    {"type": "ping"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "m"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "content_block_stop", "index": 1},
    {
        "type": "content_block_start",
        "index": 2,
        "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}},
    },
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
]


def frames(events: list[dict[str, Any]], eol: str) -> bytes:
    return "".join(f"event: {e['type']}{eol}data: {json.dumps(e)}{eol}{eol}" for e in events).encode()


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[str, dict[str, bytes]]]:
    """A stand-in native endpoint: POST /v1/messages answers whatever ``bodies[\"next\"]`` holds, as a stream."""
    bodies: dict[str, bytes] = {}

    async def messages(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in bodies["next"].split(b"\n\n"):  # one write per frame (the pieces rejoined are the body)
            if piece:
                await resp.write(piece + b"\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", bodies
    await runner.cleanup()


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    made = Clients()
    yield made
    await made.close()


BODY = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
async def test_an_anthropic_stream_is_measured(
    upstream: tuple[str, dict[str, bytes]], clients: Clients, eol: str
) -> None:
    url, bodies = upstream
    bodies["next"] = frames(EVENTS, "\n").replace(b"\n", eol.encode())
    events = await run(call(clients(url, ("sk-native",)), "/v1/messages", BODY, stream=True, dialect=ANTHROPIC))
    result = events[-1]
    assert isinstance(result, CallResult)
    assert result.ok, result
    chunks = [e for e in events if isinstance(e, Chunk)]
    assert [c.token_count for c in chunks] == [0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0]
    assert isinstance(events[-2], Done)
    assert b"message_stop" in (events[-2].raw or b"")  # the end frame, handed on to the relay
    assert result.token_chunks == 4
    assert (result.prompt_tokens, result.output_tokens, result.cached_tokens) == (40, 9, 30)
    assert result.tokens_estimated is False
    assert result.ttft_ms is not None
    assert result.ttft_answer_ms is not None
    assert result.ttft_answer_ms >= result.ttft_ms
    assert result.reasoning_tokens == 2  # thinking chunks before the answer (no reasoning count in the usage)
    assert len(result.itl_ms) == 3


async def test_an_error_event_fails_the_stream_after_it_is_relayed(
    upstream: tuple[str, dict[str, bytes]], clients: Clients
) -> None:
    url, bodies = upstream
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    bodies["next"] = frames([*EVENTS[:4], error], "\n")
    events = await run(call(clients(url), "/v1/messages", BODY, stream=True, dialect=ANTHROPIC))
    result = events[-1]
    assert isinstance(result, CallResult)
    assert result.error_class == "stream_error"
    relayed = [e for e in events if isinstance(e, Chunk)]
    assert b"overloaded_error" in relayed[-1].raw


async def test_the_request_carries_x_api_key_and_no_usage_injection(clients: Clients) -> None:
    """An Anthropic path gets the key as x-api-key too, and its body as it was (no stream_options)."""
    seen: dict[str, Any] = {}

    async def messages(request: web.Request) -> web.Response:
        seen["key"] = request.headers.get("x-api-key")
        seen["bearer"] = request.headers.get("Authorization")
        seen["body"] = await request.json()
        return web.json_response(
            {
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [{"type": "text", "text": "ok"}],
                "usage": {"input_tokens": 3, "output_tokens": 1},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        body = {**BODY, "stream": False}
        events = await run(
            call(
                clients(f"http://127.0.0.1:{port}", ("sk-native",)),
                "/v1/messages",
                body,
                stream=False,
                dialect=ANTHROPIC,
            )
        )
    finally:
        await runner.cleanup()
    result = events[-1]
    assert isinstance(result, CallResult)
    assert result.ok, result
    assert (result.prompt_tokens, result.output_tokens) == (3, 1)
    assert seen == {"key": "sk-native", "bearer": "Bearer sk-native", "body": body}
