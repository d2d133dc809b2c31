"""The lean front door (gateway/http/lean_connection.py) on raw sockets: what it serves, what it hands to aiohttp.

The ``/v1`` POSTs are answered without aiohttp's ``Server`` header; every other route carries it (aiohttp's
handler took the connection). Real gateway on port 0, real simulated provider, bytes on a real socket.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from conftest import GatewayHandle, SimFactory
from tailgate.gateway.http.lean_reply import WriteBatch
from tailgate.ledger import read_rows

GwFactory = Callable[..., Awaitable[GatewayHandle]]
CHAT = b"/v1/chat/completions"
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}).encode()


def _config(url: str, **server: Any) -> dict[str, Any]:
    return {
        "providers": {"sim": {"base_url": url, "api_keys": ["sk-up-0123456789"]}},
        "models": {"m": {"routes": [{"provider": "sim", "model": "up"}]}},
        "server": server,
    }


def _post(body: bytes = BODY, path: bytes = CHAT, extra: bytes = b"") -> bytes:
    return b"POST %b HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%b\r\n%b" % (
        path,
        len(body),
        extra,
        body,
    )


def _get(path: bytes) -> bytes:
    return b"GET %b HTTP/1.1\r\nHost: t\r\n\r\n" % path


class _Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)


async def _read_answer(reader: asyncio.StreamReader) -> _Answer:
    """One HTTP/1.1 response: Content-Length, chunked, or until close."""
    line = await reader.readline()
    assert line.startswith(b"HTTP/1."), line
    status = int(line.split()[1])
    headers: dict[str, str] = {}
    while (h := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = h.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    if status == 100:
        return _Answer(status, headers, b"")
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding") == "chunked":
        parts = []
        while (size := int((await reader.readline()).strip(), 16)) > 0:
            parts.append(await reader.readexactly(size))
            await reader.readline()
        await reader.readline()
        body = b"".join(parts)
    else:
        body = await reader.read()
    return _Answer(status, headers, body)


async def _connect(gw: GatewayHandle) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", gw.port)


async def _closed(reader: asyncio.StreamReader, within: float = 5.0) -> bool:
    """The server closed the connection (EOF) within ``within`` seconds."""
    return await asyncio.wait_for(reader.read(), within) == b""


async def test_one_connection_moves_from_the_front_door_to_aiohttp_and_stays_served(
    sim: SimFactory, gateway: GwFactory
) -> None:
    """Keep-alive: a chat served by the front door, then GET /v1/models handed to aiohttp on the same
    connection, then chat again (aiohttp serves it now); every answer right, nothing lost."""
    up = await sim("instant", models=("up",))
    gw = await gateway(_config(up.url))
    reader, writer = await _connect(gw)
    writer.write(_post())
    first = await _read_answer(reader)
    assert first.status == 200, first.body
    assert "server" not in first.headers  # the front door's answer
    assert first.json()["usage"]["completion_tokens"] == 3
    assert first.headers["x-tailgate-provider"] == "sim"
    assert first.headers["date"].endswith("GMT")
    writer.write(_get(b"/v1/models"))
    models = await _read_answer(reader)
    assert models.status == 200
    assert "aiohttp" in models.headers["server"]  # handed over: aiohttp's handler answered
    assert [m["id"] for m in models.json()["data"]] == ["m"]
    writer.write(_post())
    again = await _read_answer(reader)
    assert again.status == 200
    assert again.json()["usage"]["completion_tokens"] == 3
    assert "aiohttp" in again.headers["server"]
    writer.close()
    # a connection whose first request is not a /v1 POST goes to aiohttp at once
    reader, writer = await _connect(gw)
    writer.write(_get(b"/healthz"))
    health = await _read_answer(reader)
    assert health.status == 200
    assert health.json() == {"status": "ok"}
    writer.close()
    await asyncio.sleep(0.05)
    assert gw.gateway.ledger is not None
    await gw.gateway.ledger.flush()
    assert [r.status for r in read_rows(gw.gateway.ledger.path)] == [200, 200]  # both chats, one row each


async def test_pipelined_requests_are_answered_in_order(sim: SimFactory, gateway: GwFactory) -> None:
    """Three /v1 POSTs in one write: three answers in order. A GET pipelined behind a POST in the same write
    cannot be handed over (its first byte is not a read's): the POST is served, the GET gets a 400 that says
    why, and the connection closes."""
    up = await sim("instant", models=("up",))
    gw = await gateway(_config(up.url))
    reader, writer = await _connect(gw)
    bodies = [
        json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": n}).encode()
        for n in (1, 2, 3)
    ]
    writer.write(b"".join(_post(b) for b in bodies))
    answers = [await _read_answer(reader) for _ in bodies]
    assert [a.status for a in answers] == [200, 200, 200]
    assert [a.json()["usage"]["completion_tokens"] for a in answers] == [1, 2, 3]
    writer.write(_post() + _get(b"/v1/models"))
    served = await _read_answer(reader)
    assert served.status == 200
    refused = await _read_answer(reader)
    assert refused.status == 400
    assert "own connection" in refused.json()["error"]["message"]
    assert refused.headers["connection"] == "close"
    assert await _closed(reader)
    writer.close()


async def test_a_loop_turns_answers_are_batched_and_each_connection_keeps_its_order(
    sim: SimFactory, gateway: GwFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forty connections, each with two pipelined POSTs and a GET behind them in one write, all at once: the
    answers a loop turn makes after its first are queued and written together at the end of the turn
    (lean_reply.WriteBatch), while the GET's refusal (400, then the close) is written at once in the same
    turn as the second answer: every connection gets its two answers, then the refusal, then the close."""
    flushed: list[int] = []
    real_flush = WriteBatch._flush

    def spy(self: WriteBatch) -> None:
        flushed.append(len(self._fronts))
        real_flush(self)

    monkeypatch.setattr(WriteBatch, "_flush", spy)
    up = await sim("instant", models=("up",))
    gw = await gateway(_config(up.url))
    conns = [await _connect(gw) for _ in range(40)]

    def body(n: int) -> bytes:
        return json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": n}).encode()

    for _, writer in conns:
        writer.write(_post(body(1)) + _post(body(2)) + _get(b"/v1/models"))

    async def answers(reader: asyncio.StreamReader) -> list[Any]:
        got = [await _read_answer(reader) for _ in range(3)]
        assert await _closed(reader)
        return [a.status for a in got] + [a.json()["usage"]["completion_tokens"] for a in got[:2]]

    assert await asyncio.gather(*(answers(r) for r, _ in conns)) == [[200, 200, 400, 1, 2]] * 40
    for _, writer in conns:
        writer.close()
    assert sum(flushed) > 0  # some answers did wait for the end of their turn


async def test_expect_continue_chunked_bodies_and_their_limit(sim: SimFactory, gateway: GwFactory) -> None:
    """``Expect: 100-continue`` gets its 100 before the body is sent; a chunked body is read whole; a chunked
    body past ``max_body_bytes`` (no Content-Length to refuse early) is a 413 and the connection closes."""
    up = await sim("instant", models=("up",))
    gw = await gateway({**_config(up.url), "max_body_bytes": 4096})
    reader, writer = await _connect(gw)
    head = _post(extra=b"Expect: 100-continue\r\n")[: -len(BODY)]
    writer.write(head)
    cont = await asyncio.wait_for(_read_answer(reader), 5)
    assert cont.status == 100
    writer.write(BODY)
    answer = await _read_answer(reader)
    assert answer.status == 200
    assert answer.json()["usage"]["completion_tokens"] == 3
    chunked = _post(b"").replace(b"Content-Length: 0", b"Transfer-Encoding: chunked")
    pieces = [BODY[:10], BODY[10:40], BODY[40:]]
    writer.write(chunked + b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n")
    answer = await _read_answer(reader)
    assert answer.status == 200
    assert answer.json()["usage"]["completion_tokens"] == 3
    big = b"x" * 3000
    writer.write(chunked + b"%x\r\n%b\r\n" % (len(big), big) * 2)
    refused = await _read_answer(reader)
    assert refused.status == 413
    assert "4096" in refused.json()["error"]["message"]
    assert await _closed(reader)
    writer.close()


async def test_http10_and_connection_close_end_the_connection(sim: SimFactory, gateway: GwFactory) -> None:
    """An HTTP/1.0 request (no keep-alive) and a ``Connection: close`` one: answered, then closed."""
    up = await sim("instant", models=("up",))
    gw = await gateway(_config(up.url))
    for request in (_post().replace(b"HTTP/1.1", b"HTTP/1.0"), _post(extra=b"Connection: close\r\n")):
        reader, writer = await _connect(gw)
        writer.write(request)
        answer = await _read_answer(reader)
        assert answer.status == 200, answer.body
        assert answer.headers["connection"] == "close"
        assert await _closed(reader)
        writer.close()


async def test_a_stream_through_the_front_door_is_chunked_and_keeps_the_connection(
    sim: SimFactory, gateway: GwFactory
) -> None:
    """A stream: chunked SSE with the gateway's headers, ``[DONE]`` last, then the same connection serves on."""
    up = await sim("instant", models=("up",))
    gw = await gateway(_config(up.url))
    reader, writer = await _connect(gw)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True})
    writer.write(_post(body.encode()))
    stream = await _read_answer(reader)
    assert stream.status == 200
    assert stream.headers["content-type"] == "text/event-stream"
    assert stream.headers["transfer-encoding"] == "chunked"
    assert stream.headers["x-tailgate-attempts"] == "1"
    frames = [f for f in stream.body.split(b"\n\n") if f]
    assert frames[-1] == b"data: [DONE]"
    tokens = sum(
        1
        for f in frames[:-1]
        if json.loads(f[6:])["choices"] and json.loads(f[6:])["choices"][0]["delta"].get("content")
    )
    assert tokens == 4
    writer.write(_post())
    assert (await _read_answer(reader)).status == 200
    writer.close()


async def test_a_client_gone_mid_request_cancels_it_and_is_booked_499(sim: SimFactory, gateway: GwFactory) -> None:
    """The client closes while the upstream is still working: the request is cancelled (no upstream call left
    open) and the ledger books it ``client_closed`` with status 499."""
    up = await sim("instant", models=("up",), faults={"stall_headers_s": 3.0})
    gw = await gateway(_config(up.url))
    reader, writer = await _connect(gw)
    writer.write(_post())
    await asyncio.sleep(0.3)
    writer.close()
    for _ in range(100):
        await asyncio.sleep(0.05)
        if gw.gateway.providers["sim"].in_flight == 0:
            break
    assert gw.gateway.providers["sim"].in_flight == 0
    assert gw.gateway.ledger is not None
    await gw.gateway.ledger.flush()
    rows = read_rows(gw.gateway.ledger.path)
    assert [(r.status, r.outcome) for r in rows] == [(499, "client_closed")]


@pytest.mark.parametrize("front", ["lean", "aiohttp"])
async def test_http_front_switch(sim: SimFactory, gateway: GwFactory, front: str) -> None:
    """``server.http_front: aiohttp`` sends the /v1 POSTs through aiohttp too; both answer the same."""
    up = await sim("instant", models=("up",))
    gw = await gateway(_config(up.url, http_front=front))
    reader, writer = await _connect(gw)
    writer.write(_post())
    answer = await _read_answer(reader)
    assert answer.status == 200
    assert answer.json()["usage"]["completion_tokens"] == 3
    assert ("server" in answer.headers) is (front == "aiohttp")
    writer.close()


def test_reply_framing_and_the_header_guard() -> None:
    """A whole reply is one status line, framing headers, a Date, the reply's headers and its body; a header that
    would split the response (CR or LF in a name or value) is refused, never written."""
    from tailgate.gateway.http.exchange import Reply
    from tailgate.gateway.http.lean_reply import reply_bytes

    raw = reply_bytes(Reply(429, {"Retry-After": "2", "x-request-id": "r1"}, b'{"error":{}}'), keep_alive=False)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 429 Too Many Requests"
    fields = dict(line.split(b": ", 1) for line in lines[1:])
    assert fields[b"Content-Length"] == b"12"
    assert fields[b"Content-Type"] == b"application/json"
    assert fields[b"Connection"] == b"close"
    assert fields[b"Retry-After"] == b"2"
    assert fields[b"Date"].endswith(b" GMT")
    assert body == b'{"error":{}}'
    assert b"Connection" not in reply_bytes(Reply(200, {}, b"{}"), keep_alive=True)
    for bad in ({"x-request-id": "a\r\nSet-Cookie: x=1"}, {"x\nbad": "1"}):
        with pytest.raises(ValueError, match="CR or LF"):
            reply_bytes(Reply(200, bad, b"{}"), keep_alive=True)


async def test_an_upgrade_request_is_answered_by_aiohttp(sim: SimFactory, gateway: GwFactory) -> None:
    """``Upgrade: h2c`` on a chat POST (what ``curl --http2`` sends over cleartext): handed to aiohttp, which
    answers it in HTTP/1.1 — an answer, not a dropped connection."""
    up = await sim("instant", models=("up",))
    gw = await gateway(_config(up.url))
    reader, writer = await _connect(gw)
    writer.write(
        _post(
            extra=b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n"
        )
    )
    answer = await asyncio.wait_for(_read_answer(reader), 10)
    assert answer.status == 200, answer.body
    assert answer.json()["usage"]["completion_tokens"] == 3
    assert "aiohttp" in answer.headers["server"]
    writer.close()


async def test_a_served_request_leaves_no_handler_task_behind(sim: SimFactory, gateway: GwFactory) -> None:
    """A finished request's handler task is freed when it ends, not by the cyclic garbage collector: the request
    deadline's timer once closed over the exchange that held it, a cycle that kept every finished task (3,000 after
    3,000 requests at c=50) until a collection ran — memory and collector passes on the hot path."""
    up = await sim("instant", models=("up",))
    gw = await gateway(_config(up.url, request_deadline=60))
    reader, writer = await _connect(gw)

    def finished_handlers() -> int:
        return sum(
            1
            for o in gc.get_objects()
            if isinstance(o, asyncio.Task)
            and o.done()
            and getattr(o.get_coro(), "__qualname__", "") == "LeanConnection._serve"
        )

    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            writer.write(_post())
            assert (await _read_answer(reader)).status == 200
        await asyncio.sleep(0.05)  # the last handler finishes after its answer is out (books)
        assert finished_handlers() == 0
    finally:
        gc.enable()
        writer.close()
