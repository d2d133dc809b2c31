"""The front door's status-code contract, one table run against every path of both servers.

Both servers on one port answer the refusals of HTTP the same way (``wire.http_refusals``): a malformed request
(400), no such path (404), a wrong method (405), a body too slow (408) or too large (413), a body that is not JSON
(415), a header too large (431), and ``request_deadline`` (504 before the first byte, an SSE ``error`` event
after it). The doors: the lean front door (its ``/v1`` POSTs: the chat and Messages APIs; a request pipelined
behind one of them in the same read, which the lean door must answer itself), a route aiohttp serves on the lean
door's port (``/admin/keys``, handed over from the first byte), and the same paths with ``server.http_front:
aiohttp``. Real gateways on port 0 in front of real simulators; raw asyncio streams, since a client library would
refuse to send most of these requests.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web

from conftest import make_spec
from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.gateway.app import Gateway
from tailgate.gateway.http.listener import runner_kwargs, site
from tailgate.sim.provider import SimProvider

T = TypeVar("T")

MAX_BODY = 4096
MAX_HEADER = 1024
BODY_READ_TIMEOUT_S = 0.3
DEADLINE_S = 0.8


@dataclass(frozen=True)
class Door:
    """A path of one server: ``front`` is ``server.http_front``; ``api`` the error shape its path speaks."""

    front: str
    path: str
    api: str  # "openai", "anthropic" (under /v1/messages), "admin" (aiohttp's own route, OpenAI shape)
    pipelined: bool = False
    """The request under test follows a complete /v1 POST in the same write (the lean door answers it itself)."""

    @property
    def proxied(self) -> bool:
        return self.api != "admin"


DOORS = {
    "lean /v1/chat/completions": Door("lean", "/v1/chat/completions", "openai"),
    "lean /v1/messages": Door("lean", "/v1/messages", "anthropic"),
    "lean /v1/chat/completions pipelined": Door("lean", "/v1/chat/completions", "openai", pipelined=True),
    "lean port, aiohttp /admin/keys": Door("lean", "/admin/keys", "admin"),
    "aiohttp /v1/chat/completions": Door("aiohttp", "/v1/chat/completions", "openai"),
    "aiohttp /v1/messages": Door("aiohttp", "/v1/messages", "anthropic"),
    "aiohttp /admin/keys": Door("aiohttp", "/admin/keys", "admin"),
}


@dataclass(frozen=True)
class Expect:
    status: int
    code: str | None
    closes: bool
    """The server closes the connection after this answer (else a next request on it is served)."""


CONTRACT = {
    "malformed": Expect(400, "bad_request", closes=True),
    "no such path": Expect(404, None, closes=False),
    "wrong method": Expect(405, "method_not_allowed", closes=False),
    "body too slow": Expect(408, "request_timeout", closes=True),
    "body too large": Expect(413, "request_too_large", closes=True),
    "not JSON": Expect(415, "unsupported_media_type", closes=True),
    "header too large": Expect(431, "header_too_large", closes=True),
    "deadline": Expect(504, "deadline_exceeded", closes=False),
    "deadline mid-stream": Expect(200, "deadline_exceeded", closes=False),
}


def expected(door: Door, case: str) -> Expect | None:
    """The contract at this door; None where the case does not apply (the exceptions are the design's):

    - 415 and the deadline hold for ``/v1`` paths only (``BodyLimits.json_paths``, the deadline middleware's
      prefix): an admin route judges its own body and has no deadline.
    - A request pipelined behind a ``/v1`` POST in one read cannot be handed to aiohttp (its first byte is not a
      read's): one the lean door does not serve (an unknown path, a wrong method) is a 400 that says so.
    """
    if door.api == "admin" and case in ("not JSON", "deadline", "deadline mid-stream"):
        return None
    if door.pipelined and case in ("no such path", "wrong method"):
        return Expect(400, "bad_request", closes=True)
    return CONTRACT[case]


def _body(door: Door, model: str = "m", stream: bool = False) -> bytes:
    if door.api == "admin":
        return b'{"name": "k"}'
    return json.dumps(
        {"model": model, "max_tokens": 30, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()


def _post(path: str, body: bytes, *, content_type: str = "application/json", extra: bytes = b"") -> bytes:
    return b"POST %b HTTP/1.1\r\nHost: t\r\nContent-Type: %b\r\nContent-Length: %d\r\n%b\r\n%b" % (
        path.encode(),
        content_type.encode(),
        len(body),
        extra,
        body,
    )


def request_for(door: Door, case: str) -> tuple[bytes, bytes]:
    """The request's bytes: sent at once, then (after a pause) the rest (``body too slow``: never)."""
    path = door.path
    if case == "malformed":
        return b"POST %b HTTP/1.1\r\nHost: t\r\nno colon in this header line\r\n\r\n" % path.encode(), b""
    if case == "no such path":
        return _post(path + "-nope", _body(door)), b""
    if case == "wrong method":
        return b"PUT %b HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n" % path.encode(), b""
    if case == "body too slow":
        whole = _post(path, _body(door))
        return whole[:-5], b""  # the rest never comes
    if case == "body too large":
        head = _post(path, b"x" * (MAX_BODY + 1))
        return head[: head.index(b"\r\n\r\n") + 4], b""  # the declared length alone is refused
    if case == "not JSON":
        return _post(path, b"<chat/>", content_type="text/xml"), b""
    if case == "header too large":
        return _post(path, _body(door), extra=b"X-Filler: %b\r\n" % (b"a" * (2 * MAX_HEADER))), b""
    if case == "deadline":
        return _post(path, _body(door, model="stalled")), b""
    if case == "deadline mid-stream":
        return _post(path, _body(door, model="dripping", stream=True)), b""
    raise AssertionError(case)


class _Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


async def _read_answer(reader: asyncio.StreamReader) -> _Answer:
    """One HTTP/1.1 response: Content-Length, chunked, or until close."""
    line = await reader.readline()
    assert line.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), line  # aiohttp answers a request it cannot parse in 1.0
    status = int(line.split()[1])
    headers: dict[str, str] = {}
    while (h := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = h.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
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


def _error(door: Door, body: bytes) -> tuple[str, str | None]:
    """(message, code) of an error body in the door's shape; the shape itself is checked."""
    obj = json.loads(body)
    if door.api == "anthropic":
        assert obj["type"] == "error", obj
        assert set(obj["error"]) == {"type", "message"}, obj
        assert isinstance(obj["error"]["type"], str), obj
        return obj["error"]["message"], None  # Anthropic's shape has no code
    assert set(obj) == {"error"}, obj
    assert set(obj["error"]) == {"message", "type", "param", "code"}, obj
    return obj["error"]["message"], obj["error"]["code"]


def _stream_error(door: Door, body: bytes) -> tuple[str, str | None]:
    """The stream's last SSE event is an ``error`` (no ``[DONE]`` / ``message_stop``)."""
    assert b"[DONE]" not in body, body[-300:]
    assert b"message_stop" not in body, body[-300:]
    last = body.strip().split(b"\n\n")[-1]
    assert last.startswith(b"event: error\n"), last
    return _error(door, last.split(b"data: ", 1)[1])


class Servers:
    """Three simulators (prompt, stalled, dripping) and two gateways (``http_front`` lean and aiohttp) on their own
    event loop in a thread, shared by the module's tests."""

    def __init__(self, tmp: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="contract-servers", daemon=True)
        self._thread.start()
        self.sims = {
            "prompt": SimProvider(make_spec("instant", models=("up",))),
            "stalled": SimProvider(make_spec("instant", models=("up",), faults={"stall_headers_s": 30})),
            "dripping": SimProvider(make_spec("instant", models=("up",), faults={"slow_drip_s": 0.2})),
        }
        self.runners: list[web.AppRunner] = []
        self.gateways: list[Gateway] = []
        self.ports: dict[str, int] = {}
        self.call(self._start(tmp))

    def call(self, coro: Awaitable[T], timeout: float = 20) -> T:
        async def wrap() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(timeout=timeout)

    async def _start(self, tmp: Path) -> None:
        for sim in self.sims.values():
            await sim.start()
        for front in ("lean", "aiohttp"):
            data: dict[str, Any] = {
                "ledger": {"enabled": False, "path": str(tmp / f"{front}.db")},
                "max_body_bytes": MAX_BODY,
                "providers": {
                    name: {"base_url": sim.url, "api_keys": ["sk-up-0123456789"]} for name, sim in self.sims.items()
                },
                "models": {
                    alias: {"routes": [{"provider": name, "model": "up"}]}
                    for alias, name in (("m", "prompt"), ("stalled", "stalled"), ("dripping", "dripping"))
                },
                "routing": {"probes": {"enabled": False}},
                "server": {
                    "http_front": front,
                    "body_read_timeout": f"{BODY_READ_TIMEOUT_S}s",
                    "request_deadline": f"{DEADLINE_S}s",
                    "max_header_bytes": MAX_HEADER,
                },
            }
            config = validate_data(data, GatewayConfig, f"contract-{front}")
            gateway = Gateway(config, resolve_providers(config))
            await gateway.start()
            self.gateways.append(gateway)
            runner = web.AppRunner(
                gateway.app(),
                handler_cancellation=True,
                access_log=None,
                shutdown_timeout=5,
                **runner_kwargs(config.server),
            )
            await runner.setup()
            self.runners.append(runner)
            listening = site(runner, "127.0.0.1", 0, config.server)
            await listening.start()
            self.ports[front] = listening.port

    def close(self) -> None:
        async def stop() -> None:
            for runner in self.runners:
                await runner.cleanup()
            for gateway in self.gateways:
                await gateway.close()
            for sim in self.sims.values():
                await sim.stop()

        self.call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    s = Servers(tmp_path_factory.mktemp("contract"))
    yield s
    s.close()


CASES = [
    pytest.param(door, case, id=f"{door} | {case}")
    for door in DOORS
    for case in CONTRACT
    if expected(DOORS[door], case) is not None or case == "not JSON"  # an admin route's 415 checks it is not one
]


@pytest.mark.parametrize(("door_name", "case"), CASES)
async def test_status_code_contract(servers: Servers, door_name: str, case: str) -> None:
    """Each refusal has one status, code and connection fate at every door (``expected`` names the exceptions)."""
    door = DOORS[door_name]
    want = expected(door, case)
    reader, writer = await asyncio.open_connection("127.0.0.1", servers.ports[door.front])
    try:
        first, _ = request_for(door, case)
        if door.pipelined:  # a complete /v1 POST first, in the same write
            writer.write(_post(door.path, _body(door)) + first)
            served = await asyncio.wait_for(_read_answer(reader), 10)
            assert served.status == 200, served.body
        else:
            writer.write(first)
        answer = await asyncio.wait_for(_read_answer(reader), 10)
        if want is None:  # not a JSON path: the route judges the body itself (here: no admin key)
            assert answer.status != 415, answer.body
            return
        assert answer.status == want.status, (answer.status, answer.body[:300])
        if case == "deadline mid-stream":
            assert answer.headers["content-type"].startswith("text/event-stream")
            message, code = _stream_error(door, answer.body)
        else:
            message, code = _error(door, answer.body)
        assert message
        assert b"a" * 64 not in answer.body  # a refusal never quotes the request
        if door.api != "anthropic":
            assert code == want.code, answer.body
        if want.status == 405 and not door.pipelined:
            assert "POST" in answer.headers["allow"]
        if want.closes:
            assert await asyncio.wait_for(reader.read(), 5) == b""
        else:  # the connection serves its next request
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            health = await asyncio.wait_for(_read_answer(reader), 5)
            assert health.status == 200
    finally:
        writer.close()
