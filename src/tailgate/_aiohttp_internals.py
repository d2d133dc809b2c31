"""The one module of tailgate that reads or writes aiohttp's private attributes; every other module uses its
public API. An aiohttp upgrade is checked here (``tests/gateway/test_http_contract.py`` runs every path of both
servers; ``tests/gateway/test_http_internals.py`` holds the rule that no other module reaches inside aiohttp).

What needs aiohttp's inside, and why:

- :class:`HardenedSite`: a ``TCPSite`` whose protocol factory is ours (``TCPSite.start`` passes aiohttp's server
  as the factory), to cap open connections (a 503 on connect) and to put the gateway's lean front door before
  aiohttp's connection handler. It builds that handler as ``web.Server.__call__`` does, from the server's
  private loop and keyword arguments.
- the handler's ``handle_error`` (aiohttp's hook for a request its parser refused): the refusal in the OpenAI
  shape (400/431), never aiohttp's text page that quotes the offending bytes.
- :class:`SiteLink`: a lean connection joins aiohttp's server's map of connections (so a graceful stop —
  ``pre_shutdown``, ``shutdown`` — reaches it like any other), leaves it, and hands its transport to aiohttp's
  handler mid-connection.
- :func:`sse_response`: a ``StreamResponse`` whose head leaves with its first write (a class switch aiohttp's
  own ``web.Response`` sets): one system call fewer per stream.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from tailgate._aiohttp import error_response
from tailgate.wire import errors as wire_errors
from tailgate.wire import http_refusals

__all__ = ["FrontFactory", "GracefulConnection", "HardenedSite", "SiteLink", "sse_response"]

log = logging.getLogger("tailgate.http")

_REQUEST_LINE = re.compile(rb"[A-Z]{3,10} (/[!->@-~]{0,200})")
"""The start of a request (method and path, no query): a refusal's shape follows its path."""

_OVER_CAPACITY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
)


class GracefulConnection(Protocol):
    """What aiohttp's graceful stop calls on every connection its server knows."""

    def close(self) -> None:
        """``web.Server.pre_shutdown``: take no new request; close once the one in flight is answered."""

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109  # aiohttp's signature
        """``web.Server.shutdown``: wait up to ``timeout`` for the request in flight, then cancel it and close."""


class SiteLink:
    """A lean front-door connection's link to its site and to aiohttp's server (one per connection): counted in
    ``site.connections`` from its making until :meth:`leave`; reached by the graceful stop once :meth:`join`\\ ed;
    :meth:`hand_over` gives the transport to aiohttp's own handler, which serves the connection from then on."""

    __slots__ = ("_counted", "_make_handler", "_server", "_site")

    def __init__(self, site: HardenedSite, server: web.Server, make_handler: Callable[[], asyncio.Protocol]) -> None:
        self._site = site
        self._server = server
        self._make_handler = make_handler
        self._counted = True
        site.connections += 1

    def join(self, conn: GracefulConnection, transport: asyncio.BaseTransport) -> None:
        """``conn`` is open: a graceful stop calls its ``close`` and ``shutdown``."""
        self._server.connection_made(conn, transport)  # type: ignore[arg-type]  # duck-typed by aiohttp

    def leave(self, conn: GracefulConnection) -> None:
        """``conn`` is done with the connection (closed, or handed over); idempotent."""
        if self._counted:
            self._counted = False
            self._site.connections -= 1
        self._server._connections.pop(conn, None)  # type: ignore[call-overload]

    def hand_over(
        self, conn: GracefulConnection, transport: asyncio.Transport, *, write_paused: bool
    ) -> asyncio.Protocol:
        """aiohttp's handler takes ``transport`` from ``conn`` (which touches it no more) and counts itself; the
        caller feeds it the bytes of the request in progress (``data_received``)."""
        self.leave(conn)
        handler = self._make_handler()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if write_paused:
            handler.pause_writing()
        return handler


FrontFactory = Callable[[SiteLink, asyncio.AbstractEventLoop], asyncio.Protocol]
"""Builds a connection's protocol in front of aiohttp's handler (the gateway's lean front door)."""


class _Refuse(asyncio.Protocol):
    """A connection over the cap: one OpenAI-shaped 503 with ``Retry-After``, then close. No request is read."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(_OVER_CAPACITY % (len(self._body), self._body))
        transport.close()


class HardenedSite(web.TCPSite):
    """A ``TCPSite`` that caps open client connections and renders parser errors in the OpenAI shape.

    ``max_connections``: connections beyond it are answered ``503`` + ``Retry-After: 1`` and closed at once (no
    queue, no unbounded memory); ``None`` lifts the cap. ``connections`` counts those open now, ``refused`` those
    turned away. ``front``: each connection's protocol, in front of aiohttp's handler (:data:`FrontFactory`).
    """

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str | None,
        port: int,
        *,
        max_connections: int | None = None,
        front: FrontFactory | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.max_connections = max_connections
        self.front = front
        self.connections = 0
        self.refused = 0
        self._refusal = http_refusals.over_capacity(max_connections).body()

    def _factory(self) -> Callable[[], asyncio.BaseProtocol]:
        server = self._runner.server
        assert server is not None
        # web.Server.__call__ builds a RequestHandler from these; we build our subclass from the same.
        loop, kwargs = server._loop, server._kwargs

        def handler() -> asyncio.Protocol:
            return _Handler(self, server, loop=loop, **kwargs)

        def make() -> asyncio.BaseProtocol:
            if self.max_connections is not None and self.connections >= self.max_connections:
                self.refused += 1
                return _Refuse(self._refusal)
            if self.front is not None:
                return self.front(SiteLink(self, server, handler), loop)
            return handler()

        return make

    async def start(self) -> None:
        # TCPSite.start with the protocol factory wrapped (same arguments otherwise).
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._factory(),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = getattr(self._server, "sockets", None)
        self._bound_port = int(sockets[0].getsockname()[1]) if sockets else self._port


class _Handler(web.RequestHandler):
    """aiohttp's connection handler, counted by its site, with parse errors in the OpenAI shape."""

    def __init__(self, site: HardenedSite, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._site = site
        self._path: str | None = None  # the path of the request being read, if its start was seen
        site.connections += 1

    def connection_lost(self, exc: BaseException | None) -> None:
        self._site.connections -= 1
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if (start := _REQUEST_LINE.match(data)) is not None:
            self._path = start.group(1).decode("ascii")
        super().data_received(data)

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # aiohttp's hook for a request its parser refused (bad request line, a header over the limit, a
        # line break in a value) and for a handler's escaped bug. Its own log of a refused request is a
        # traceback whose exception quotes the raw header bytes (a key): one line of ours instead, naming
        # the kind, never the bytes. A bug keeps aiohttp's traceback.
        if isinstance(exc, HttpProcessingError):
            remote = request.remote if request is not None else None
            log.warning("refused a malformed HTTP request from %s: %s (%d)", remote, type(exc).__name__, status)
            if request.writer.output_size > 0:
                raise ConnectionError("the response had started; the connection is closed instead")
        else:
            super().handle_error(request, status, exc, message)
        return _parse_error_response(status, exc, getattr(self, "_path", None))


def _parse_error_response(status: int, exc: BaseException | None, path: str | None = None) -> web.Response:
    """What aiohttp's ``RequestHandler.handle_error`` sends, in the shape of ``path``'s API (always closes)."""
    if status >= 500:
        err = wire_errors.server_error()
    elif isinstance(exc, LineTooLong):
        err = http_refusals.header_too_large("line")
    elif _too_many_headers(exc):
        err = http_refusals.header_too_large("count")
    else:
        err = http_refusals.malformed(type(exc).__name__ if exc is not None else "BadRequest")
    response = error_response(err, path=path)
    response.force_close()
    return response


def _too_many_headers(exc: BaseException | None) -> bool:
    """aiohttp refuses more than ``max_headers`` fields with a plain 400; RFC 6585 §5 makes it a 431."""
    return isinstance(exc, HttpProcessingError) and "Too many headers" in str(getattr(exc, "message", ""))


class _HeadWithFirstWrite(web.StreamResponse):
    """A stream response whose head leaves with its first write (aiohttp's ``web.Response`` sets the same class
    switch; a ``StreamResponse`` sends its head at ``prepare``)."""

    _send_headers_immediately = False


def sse_response(headers: Mapping[str, str]) -> web.StreamResponse:
    """A 200 stream response whose head goes out with the first ``write`` after ``prepare`` (one system call)."""
    return _HeadWithFirstWrite(status=200, headers=headers)
