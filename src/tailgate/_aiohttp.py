"""aiohttp pieces shared by the HTTP faces (simulator, gateway); no face logic here.

Hostile input ends here as an OpenAI-shaped 4xx (docs/reliability.md): an unknown path (404), a wrong
method (405, with ``Allow``), an oversized body (413), a body that is not JSON by its content type
(415), a body that trickles in slower than the read timeout (408), and even a request aiohttp's
parser refuses before any handler runs (a header line over the size limit, a broken request line: 4xx
in the same shape, via :class:`HardenedSite`). A bug that escapes a handler is a logged 500 in the
same shape, never aiohttp's plain-text page.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.typedefs import Handler

from tailgate.wire import errors as wire_errors
from tailgate.wire.anthropic import error_body as anthropic_error_body
from tailgate.wire.errors import WireError

log = logging.getLogger("tailgate.http")

_JSON_TYPES = (
    "application/json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "application/octet-stream",
    "",
)
"""Content types a JSON body may arrive with. ``text/plain`` and the form type are what ``curl -d``
and some hand-written clients send, octet-stream what HTTP libraries label raw bytes with; the body is
still parsed (and refused) as JSON. Anything else (multipart, XML, ...) is a 415."""


def error_response(err: WireError, headers: dict[str, str] | None = None, path: str | None = None) -> web.Response:
    """A WireError as an HTTP response in the OpenAI shape — Anthropic's for a ``path`` under ``/v1/messages``
    (the gateway's Messages API) — plus any headers the error carries."""
    merged = {**(err.headers or {}), **(headers or {})}
    body = anthropic_error_body(err) if path is not None and path.startswith("/v1/messages") else err.body()
    return web.Response(status=err.status, body=body, content_type="application/json", headers=merged or None)


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """How much body, how fast, on which content types (``POST`` only)."""

    max_bytes: int = 8 * 1024 * 1024
    read_timeout_s: float = 30.0
    """The whole body must arrive within this; a client that sends half and stops gets a 408."""
    json_paths: tuple[str, ...] = ("/v1/",)
    """Path prefixes whose POST bodies must be JSON (415 for any other declared content type)."""
    raw_paths: tuple[str, ...] = ()
    """Paths whose POST bodies their handler reads itself, within its own limit (uploads: ``/v1/files``)."""


BODY_LIMITS_KEY: web.AppKey[BodyLimits] = web.AppKey("tailgate_body_limits", BodyLimits)


def is_json_type(content_type: str) -> bool:
    return content_type in _JSON_TYPES or content_type.endswith("+json")


async def _read_body(request: web.Request, limits: BodyLimits) -> WireError | None:
    """Read (and cache, aiohttp keeps it for ``request.read()``) the body within the limits."""
    if request.content_length is not None and request.content_length > limits.max_bytes:
        return too_large(limits.max_bytes)
    try:
        if request.content.is_eof():  # the usual case: the body came with the headers, no wait, no timer
            await request.read()
        else:
            async with asyncio.timeout(limits.read_timeout_s):
                await request.read()
    except TimeoutError:
        return WireError(
            408,
            f"The request body did not arrive within {limits.read_timeout_s:g}s (limits.body_read_timeout).",
            type="invalid_request_error",
            code="request_timeout",
        )
    except web.HTTPRequestEntityTooLarge:
        return too_large(limits.max_bytes)
    return None


def too_large(limit: int) -> WireError:
    return WireError(
        413,
        f"Request body too large: the limit is {limit} bytes.",
        type="invalid_request_error",
        code="request_too_large",
    )


@web.middleware
async def openai_shaped_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown routes, wrong methods, bad bodies and escaped bugs get OpenAI's error shape, not aiohttp's text.

    With :data:`BODY_LIMITS_KEY` set on the app, ``POST`` bodies are read here first (size, time, type),
    so every handler behind it sees a complete body or never runs.
    """
    try:
        limits = request.app.get(BODY_LIMITS_KEY)
        if limits is not None and request.method == "POST" and request.path not in limits.raw_paths:
            declared = "Content-Type" in request.headers  # aiohttp reads a missing one as octet-stream
            if declared and request.path.startswith(limits.json_paths) and not is_json_type(request.content_type):
                response = error_response(
                    WireError(
                        415,
                        f"Unsupported content type {request.content_type[:100]!r}: send 'application/json'.",
                        type="invalid_request_error",
                        param="Content-Type",
                        code="unsupported_media_type",
                    ),
                    path=request.path,
                )
                response.force_close()  # its body stays unread
                return response
            if (refused := await _read_body(request, limits)) is not None:
                response = error_response(refused, path=request.path)
                response.force_close()  # the rest of an unread body would be parsed as the next request
                return response
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        return error_response(_from_http_exception(request, exc), _allow(exc), request.path)
    except WireError as err:
        return error_response(err, path=request.path)
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(wire_errors.server_error(), path=request.path)


def _from_http_exception(request: web.Request, exc: web.HTTPException) -> WireError:
    if exc.status == 404:
        return wire_errors.not_found(f"Invalid URL ({request.method} {request.path})")
    if exc.status == 405:
        allowed = ", ".join(sorted(getattr(exc, "allowed_methods", ()) or ()))
        return WireError(
            405,
            f"Method {request.method} is not allowed for {request.path}"
            + (f" (allowed: {allowed})." if allowed else "."),
            type="invalid_request_error",
            code="method_not_allowed",
        )
    if exc.status == 413:
        return too_large(request.client_max_size)
    return WireError(exc.status, exc.reason or "Request refused.", type="invalid_request_error")


def _allow(exc: web.HTTPException) -> dict[str, str] | None:
    allow = exc.headers.get("Allow")
    return {"Allow": allow} if allow else None


# ---- the connection level: parse errors and a cap on open connections -----------------------------


def _parse_error_response(status: int, exc: BaseException | None, path: str | None = None) -> web.Response:
    """What aiohttp's ``RequestHandler.handle_error`` sends, in the OpenAI shape — Anthropic's for a ``path``
    under ``/v1/messages`` — (always closes).

    The parser's own message quotes the offending bytes (a header line may be a bearer token), so the
    text here is fixed per kind and never echoes the request.
    """
    if status >= 500:
        err = wire_errors.server_error()
    elif isinstance(exc, LineTooLong) or _too_many_headers(exc):
        err = WireError(
            431,
            "A request line or header field is longer than the gateway accepts (server.max_header_bytes)."
            if isinstance(exc, LineTooLong)
            else "The request has more header fields than the gateway accepts.",
            type="invalid_request_error",
            code="header_too_large",
        )
    else:
        kind = type(exc).__name__ if exc is not None else "BadRequest"
        err = WireError(status, f"Malformed HTTP request ({kind}).", type="invalid_request_error", code="bad_request")
    response = error_response(err, path=path)
    response.force_close()
    return response


def _too_many_headers(exc: BaseException | None) -> bool:
    """aiohttp refuses more than ``max_headers`` fields with a plain 400; RFC 6585 §5 makes it a 431."""
    return isinstance(exc, HttpProcessingError) and "Too many headers" in str(getattr(exc, "message", ""))


_REQUEST_LINE = re.compile(rb"[A-Z]{3,10} (/[!->@-~]{0,200})")
"""The start of a request (method and path, no query): a refusal's shape follows its path."""


_OVER_CAPACITY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
)


class _Refuse(asyncio.Protocol):
    """A connection over the cap: one OpenAI-shaped 503 with ``Retry-After``, then close. No request is read."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(_OVER_CAPACITY % (len(self._body), self._body))
        transport.close()


FrontFactory = Callable[
    ["HardenedSite", web.Server, Callable[[], asyncio.Protocol], asyncio.AbstractEventLoop], asyncio.Protocol
]
"""Builds a connection's protocol in front of aiohttp's handler (the gateway's front door, gateway/front.py):
``(site, server, make_aiohttp_handler, loop)``. It counts itself in ``site.connections`` while it holds the
connection, and may hand the connection to the handler it makes."""


class HardenedSite(web.TCPSite):
    """A ``TCPSite`` that caps open client connections and renders parser errors in the OpenAI shape.

    ``max_connections``: connections beyond it are answered ``503`` + ``Retry-After: 1`` and closed at
    once (no queue, no unbounded memory); ``None`` lifts the cap. ``connections`` counts those open now.
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
        self._refusal = WireError(
            503,
            f"Too many open connections (limits.max_connections = {max_connections}). Retry shortly.",
            type="server_error",
            code="overloaded",
        ).body()

    def _factory(self) -> Callable[[], asyncio.BaseProtocol]:
        server = self._runner.server
        assert server is not None
        # web.Server.__call__ builds a RequestHandler from these; we build our subclass from the same.
        loop, kwargs = server._loop, server._kwargs

        def make() -> asyncio.BaseProtocol:
            if self.max_connections is not None and self.connections >= self.max_connections:
                self.refused += 1
                return _Refuse(self._refusal)
            if self.front is not None:
                return self.front(self, server, lambda: _Handler(self, server, loop=loop, **kwargs), loop)
            return _Handler(self, server, loop=loop, **kwargs)

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
