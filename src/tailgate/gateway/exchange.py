"""One ``/v1`` request and its answer as the proxy sees them, whichever HTTP server carried it.

The proxy (proxy.py) reads ``headers`` and ``body`` of an :class:`Exchange` and answers either with a
:class:`Reply` (sent whole once the handler returns) or by opening a stream on the exchange and writing
to it. Two servers carry exchanges: the gateway's own front door (front.py, the hot path) and aiohttp
(every other route, and any app served without the front door); ``aiohttp_route`` adapts the second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from tailgate.wire.anthropic import error_body as anthropic_error_body
from tailgate.wire.anthropic import error_event as anthropic_error_event
from tailgate.wire.errors import WireError

__all__ = [
    "DEADLINE_HIT",
    "STREAM_RESPONSE",
    "Exchange",
    "HasHeaders",
    "Reply",
    "Stream",
    "aiohttp_route",
    "error_reply",
]

STREAM_RESPONSE: web.RequestKey[web.StreamResponse] = web.RequestKey("tailgate_stream", web.StreamResponse)
"""Set when a stream's headers are sent (aiohttp): the deadline ends that stream with an error event."""
DEADLINE_HIT: web.RequestKey[bool] = web.RequestKey("tailgate_deadline_hit", bool)
"""Set when ``request_deadline`` cancelled the handler (the ledger then says ``deadline``, not 499)."""

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(slots=True)
class Reply:
    """A complete answer: status, headers and body, sent in one write."""

    status: int
    headers: dict[str, str]
    body: bytes
    content_type: str = "application/json"


def error_reply(err: WireError, headers: Mapping[str, str] | None = None, path: str | None = None) -> Reply:
    """``err`` in the OpenAI shape — Anthropic's for a ``path`` under ``/v1/messages`` — with the headers it
    carries (``Retry-After``) and ``headers`` on top."""
    return Reply(err.status, {**(err.headers or {}), **(headers or {})}, error_body(err, path))


ANTHROPIC_PATH = "/v1/messages"
"""Requests under it speak Anthropic's Messages API: every error they get is in its shape (gateway/apis/messages.py)."""


def error_body(err: WireError, path: str | None) -> bytes:
    """An error response's body in the shape of the API ``path`` belongs to."""
    return anthropic_error_body(err) if path is not None and path.startswith(ANTHROPIC_PATH) else err.body()


def error_frame(err: WireError, path: str | None) -> bytes:
    """The SSE ``error`` event that ends a stream of ``path``'s API after its first byte."""
    return anthropic_error_event(err) if path is not None and path.startswith(ANTHROPIC_PATH) else err.sse_frame()


class Stream(Protocol):
    """An answer whose headers are sent and whose body follows in pieces (an SSE stream)."""

    async def write(self, data: bytes) -> None: ...

    async def write_eof(self, data: bytes = b"") -> None: ...


class HasHeaders(Protocol):
    @property
    def headers(self) -> Mapping[str, str]:
        """Case-insensitive."""
        ...


class Exchange(HasHeaders, Protocol):
    @property
    def body(self) -> bytes:
        """The whole request body, read within ``max_body_bytes`` and ``body_read_timeout``."""
        ...

    @property
    def deadline_hit(self) -> bool:
        """``server.request_deadline`` cancelled this request (the ledger says ``deadline``, not 499)."""
        ...

    async def open_stream(self, headers: dict[str, str], first: bytes) -> Stream:
        """Send a 200 ``text/event-stream`` head with ``headers`` and ``first`` in one write."""
        ...

    def send(self, reply: Reply) -> None:
        """Send ``reply`` now if the server can (the handler returns it too; it is not sent twice). The
        proxy's work after it is off the client's path."""
        ...

    def detach(self) -> asyncio.Task[Any] | None:
        """The answer is out (``send``, or a stream's end): let the connection serve its next request while the
        handler finishes; returns the handler's task, now on its own. None where the server cannot (then the
        handler's end comes first, as before)."""
        ...


Handle = Callable[[Exchange], Awaitable[Reply | Stream]]


class _SSEResponse(web.StreamResponse):
    """A stream response whose headers leave with its first write: one system call fewer per stream.

    ``open_stream`` writes right after ``prepare()``, so nothing reaches the client later than before.
    (aiohttp's ``web.Response`` sets the same class switch; a StreamResponse sends headers at once.)
    """

    _send_headers_immediately = False


class _AiohttpExchange:
    __slots__ = ("body", "headers", "request")

    def __init__(self, request: web.Request, body: bytes) -> None:
        self.request = request
        self.headers: Mapping[str, str] = request.headers
        self.body = body

    @property
    def deadline_hit(self) -> bool:
        return bool(self.request.get(DEADLINE_HIT))

    def send(self, reply: Reply) -> None:
        """aiohttp sends the handler's returned response: nothing to do before."""

    def detach(self) -> asyncio.Task[Any] | None:
        """aiohttp serves a connection's next request once the handler has returned."""
        return None

    async def open_stream(self, headers: dict[str, str], first: bytes) -> Stream:
        resp = _SSEResponse(status=200, headers={**SSE_HEADERS, **headers})
        self.request[STREAM_RESPONSE] = resp  # the request deadline ends it with an error event (site.py)
        await resp.prepare(self.request)
        await resp.write(first)
        return resp


def aiohttp_route(handle: Handle) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp handler around ``handle`` (the body was already read by ``openai_shaped_errors``)."""

    async def route(request: web.Request) -> web.StreamResponse:
        out = await handle(_AiohttpExchange(request, await request.read()))
        if isinstance(out, Reply):
            return web.Response(status=out.status, body=out.body, headers=out.headers, content_type=out.content_type)
        assert isinstance(out, web.StreamResponse)
        return out

    return route
