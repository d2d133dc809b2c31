"""The stream relay's pushed path (``upstream.call.Call._pump``): once the first token is written, every later
upstream read is measured and written to the client from the upstream connection's callback. Each case runs a
real gateway (front door) in front of a scripted upstream that writes its frames one read at a time, so the
pushed path is what relays them; a spy on ``_pump`` proves it ran. What the client sees, byte for byte, and
the ledger row are checked: order, the dropped usage chunk, a malformed frame never relayed, an upstream error
event, an idle upstream, a slow client (backpressure), a client that leaves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from conftest import GatewayHandle
from tailgate.gateway.http.lean_reply import ChunkedStream
from tailgate.ledger import read_rows
from tailgate.upstream.call import Call

GwFactory = Callable[..., Awaitable[GatewayHandle]]
Step = bytes | float  # bytes: written (one upstream read); float: seconds slept before the next write


def _token(text: str) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "up"}
    chunk["choices"] = [{"index": 0, "delta": {"content": text}, "finish_reason": None}]
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n'
DONE = b"data: [DONE]\n\n"


@dataclass
class Scripted:
    """An upstream that answers every stream with ``steps`` (set per test)."""

    steps: list[Step] = field(default_factory=list)
    url: str = ""
    finished: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for step in self.steps:
                if isinstance(step, float):
                    await asyncio.sleep(step)
                else:
                    await resp.write(step)
            self.finished += 1
        except (ConnectionError, asyncio.CancelledError):
            pass
        return resp


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    up = Scripted()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", up.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    up.url = f"http://127.0.0.1:{site.port}/v1"
    yield up
    await runner.cleanup()


@pytest.fixture
def pumps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """How each pushed relay ended: "end" (an end frame), "none" (pulled on), or the exception's name."""
    seen: list[str] = []
    real = Call._pump

    async def spy(self: Any, *args: Any) -> Any:
        try:
            out = await real(self, *args)
        except BaseException as exc:
            seen.append(type(exc).__name__)
            raise
        seen.append("end" if out is not None else "none")
        return out

    monkeypatch.setattr(Call, "_pump", spy)
    return seen


async def _gateway(gateway: GwFactory, url: str) -> GatewayHandle:
    return await gateway(
        {
            "providers": {
                "up": {
                    "base_url": url,
                    "api_keys": ["sk-up-0123456789"],
                    "timeouts": {"first_token": 2.0, "idle": 0.4, "total": 30},
                }
            },
            "models": {"m": {"routes": [{"provider": "up", "model": "up"}]}},
        }
    )


async def _stream(gw: GatewayHandle, *, pause_s: float = 0.0) -> bytes:
    """The client's whole body (it waits ``pause_s`` before reading any of it)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with aiohttp.ClientSession() as s, s.post(f"{gw.url}/chat/completions", json=body) as r:
        assert r.status == 200
        await asyncio.sleep(pause_s)
        return await r.read()


async def _row(gw: GatewayHandle) -> Any:
    assert gw.gateway.ledger is not None
    await gw.gateway.ledger.flush()
    rows = read_rows(gw.gateway.ledger.path)
    assert len(rows) == 1
    return rows[0]


def _contents(body: bytes) -> list[str]:
    out = []
    for frame in body.split(b"\n\n"):
        if frame.startswith(b"data: {"):
            obj = json.loads(frame[6:])
            if obj.get("choices"):
                out.append(obj["choices"][0]["delta"]["content"])
    return out


async def test_later_reads_are_pushed_in_order_and_measured(
    scripted: Scripted, gateway: GwFactory, pumps: list[str]
) -> None:
    words = [f"w{i} " for i in range(40)]
    steps: list[Step] = []
    for w in words:
        steps += [_token(w), 0.005]
    scripted.steps = [*steps, USAGE % 40, 0.005, DONE]
    gw = await _gateway(gateway, scripted.url)
    body = await _stream(gw)
    assert _contents(body) == words  # every token, in order, once
    assert b'"usage"' not in body  # asked on the client's behalf: dropped
    assert body.endswith(DONE)
    assert pumps == ["end"]
    row = await _row(gw)
    assert (row.status, row.outcome, row.output_tokens) == (200, "ok", 40)
    assert row.tokens_estimated is False  # the usage chunk was read


async def test_a_malformed_frame_is_never_relayed(scripted: Scripted, gateway: GwFactory, pumps: list[str]) -> None:
    scripted.steps = [_token("a"), 0.01, _token("b"), 0.01, _token("c") + b"data: {not json\n\n", 0.01, DONE]
    gw = await _gateway(gateway, scripted.url)
    body = await _stream(gw)
    assert _contents(body) == ["a", "b", "c"]  # the frame before it in the same read is relayed
    assert b"not json" not in body
    assert b"event: error" in body or b'"error"' in body  # ended with an SSE error event, never a silent cut
    assert not body.endswith(DONE)
    assert pumps == ["_Failed"]
    row = await _row(gw)
    assert row.outcome == "malformed"
    assert row.output_tokens == 3


async def test_a_failure_later_in_the_first_tokens_read_still_commits_at_that_token(
    scripted: Scripted, gateway: GwFactory
) -> None:
    """The headers and the first token's whole read leave in one write, at the end of that read. A malformed
    frame later in the same read changes nothing the client sees: the stream was its own from the first token
    (no fallback), it gets the tokens before the bad frame, then an error event."""
    scripted.steps = [_token("a") + _token("b") + b"data: {not json\n\n", 0.01, DONE]
    gw = await _gateway(gateway, scripted.url)
    body = await _stream(gw)
    assert _contents(body) == ["a", "b"]
    assert b"not json" not in body
    assert b"event: error" in body
    row = await _row(gw)
    assert (row.status, row.outcome, row.output_tokens) == (200, "malformed", 2)


async def test_an_upstream_error_event_is_relayed_then_ends_the_stream(
    scripted: Scripted, gateway: GwFactory, pumps: list[str]
) -> None:
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    scripted.steps = [_token("a"), 0.01, _token("b"), 0.01, error, 0.01, DONE]
    gw = await _gateway(gateway, scripted.url)
    body = await _stream(gw)
    assert _contents(body) == ["a", "b"]
    assert b"overloaded" in body  # the upstream's own error frame reaches the client
    assert pumps == ["_Failed"]
    assert (await _row(gw)).outcome == "stream_error"


async def test_an_idle_upstream_times_out_while_pushing(
    scripted: Scripted, gateway: GwFactory, pumps: list[str]
) -> None:
    scripted.steps = [_token("a"), 0.01, _token("b"), 0.01, _token("c"), 3.0, DONE]
    gw = await _gateway(gateway, scripted.url)
    body = await _stream(gw)
    assert _contents(body) == ["a", "b", "c"]
    assert b"timeout_idle" in body
    assert pumps == ["none"]  # the watchdog failed the read: the pull loop's read reported it
    row = await _row(gw)
    assert (row.outcome, row.output_tokens) == ("timeout_idle", 3)


async def test_a_slow_client_pauses_the_push_and_loses_nothing(
    scripted: Scripted, gateway: GwFactory, pumps: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    drains: list[int] = []
    real_drain = ChunkedStream.drain

    async def drain(self: ChunkedStream) -> None:
        drains.append(1)
        await real_drain(self)

    monkeypatch.setattr(ChunkedStream, "drain", drain)
    words = [f"{i:05d}" + "x" * 4000 for i in range(2500)]  # ~10 MB: more than the sockets' buffers hold
    scripted.steps = [_token(words[0]), 0.01, *(_token(w) for w in words[1:]), DONE]
    gw = await _gateway(gateway, scripted.url)
    body = await _stream(gw, pause_s=1.0)
    assert _contents(body) == words
    assert body.endswith(DONE)
    assert drains  # the client's transport filled up: the push waited for it
    assert pumps == ["end"]
    assert (await _row(gw)).outcome == "ok"


async def test_a_client_that_leaves_mid_push_is_charged_for_what_it_got(
    scripted: Scripted, gateway: GwFactory, pumps: list[str]
) -> None:
    steps: list[Step] = []
    for i in range(200):
        steps += [_token(f"w{i}"), 0.01]
    scripted.steps = [*steps, DONE]
    gw = await _gateway(gateway, scripted.url)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with aiohttp.ClientSession() as s, s.post(f"{gw.url}/chat/completions", json=body) as r:
        got = 0
        async for _ in r.content.iter_any():
            got += 1
            if got >= 10:
                break
    for _ in range(100):
        if gw.gateway.providers["up"].in_flight == 0:
            break
        await asyncio.sleep(0.05)
    assert gw.gateway.providers["up"].in_flight == 0  # the upstream call was closed
    assert pumps == ["CancelledError"]
    row = await _row(gw)
    assert (row.status, row.outcome) == (499, "client_closed")
    assert row.output_tokens is not None
    assert 5 <= row.output_tokens < 200  # what it produced before the client left, not zero, not all
    assert scripted.finished == 0
