"""The proxy's ``/v1`` handlers on aiohttp (``server.http_front: aiohttp``, and any app served without the lean front
door): :func:`aiohttp_route` carries an :class:`~tailgate.gateway.http.exchange.Exchange` on an aiohttp request,
and :func:`deadline_middleware` bounds the request by ``server.request_deadline`` as the lean front door does (both
with ``exchange.Deadline`` and ``exchange.end_at_deadline``). aiohttp's public API only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from tailgate._aiohttp import error_response
from tailgate._aiohttp_internals import sse_response
from tailgate.gateway.http.exchange import SSE_HEADERS, Deadline, Handle, Reply, Stream, end_at_deadline

__all__ = ["aiohttp_route", "deadline_middleware"]

_DEADLINE: web.RequestKey[Deadline] = web.RequestKey("tailgate_deadline", Deadline)
"""The request's deadline (``deadline_middleware``): the exchange reads whether it was hit."""
_STREAM: web.RequestKey[web.StreamResponse] = web.RequestKey("tailgate_stream", web.StreamResponse)
"""Set when a stream's headers are sent: the deadline ends that stream with an error event."""


class _AiohttpExchange:
    __slots__ = ("body", "headers", "request")

    def __init__(self, request: web.Request, body: bytes) -> None:
        self.request = request
        self.headers = request.headers
        self.body = body

    @property
    def deadline_hit(self) -> bool:
        deadline = self.request.get(_DEADLINE)
        return deadline is not None and deadline.hit

    def send(self, reply: Reply) -> None:
        """aiohttp sends the handler's returned response: nothing to do before."""

    def detach(self) -> asyncio.Task[Any] | None:
        """aiohttp serves a connection's next request once the handler has returned."""
        return None

    async def open_stream(self, headers: dict[str, str], first: bytes) -> Stream:
        resp = sse_response({**SSE_HEADERS, **headers})
        self.request[_STREAM] = resp  # the request deadline ends it with an error event
        await resp.prepare(self.request)
        await resp.write(first)
        return resp


def aiohttp_route(handle: Handle) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An aiohttp handler around ``handle`` (the body was already read by ``_aiohttp.openai_shaped_errors``)."""

    async def route(request: web.Request) -> web.StreamResponse:
        out = await handle(_AiohttpExchange(request, await request.read()))
        if isinstance(out, Reply):
            return web.Response(status=out.status, body=out.body, headers=out.headers, content_type=out.content_type)
        assert isinstance(out, web.StreamResponse)
        return out

    return route


def deadline_middleware(deadline_s: float | None, prefix: str = "/v1/") -> Callable[..., Any]:
    """Bound a whole ``/v1`` request (``server.request_deadline``): 504 before the first byte, else an SSE ``error``
    event and the end of the stream — never a silent cut."""

    @web.middleware
    async def deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
        if deadline_s is None or not request.path.startswith(prefix):
            return await handler(request)
        task = asyncio.current_task()
        assert task is not None
        timer = request[_DEADLINE] = Deadline(deadline_s, task, asyncio.get_running_loop())
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except asyncio.CancelledError:
            if not timer.hit:
                raise  # the client went away, or the server is stopping
            task.uncancel()
            stream: web.StreamResponse | None = request.get(_STREAM)
            started = stream if stream is not None and stream.prepared else None
            err = await end_at_deadline(deadline_s, started, request.path)
            if err is not None:
                return error_response(err, path=request.path)
            assert started is not None
            return started
        finally:
            timer.cancel()

    return deadline
