"""The gateway's HTTP site and its resource limits toward its clients (``server:`` in the config;
docs/reliability.md): the runner's parser limits, the listening site (connection cap, the front door), the
body limits and the request deadline middleware. The upstream attempt cap is the providers' own
(``providers.check_upstream_capacity``), the per-address lockout the access guard's (``lockout.py``).

Every limit refuses in the OpenAI shape and never queues without bound:

| limit | default | beyond it |
|---|---|---|
| ``max_header_bytes`` / ``max_headers`` | 8190 bytes / 128 | 400 (a header line or request line too long) |
| ``max_body_bytes`` (top level) | 8 MiB | 413 |
| ``body_read_timeout`` | 30 s | 408, connection closed (half a body never holds a slot) |
| ``keepalive_timeout`` | 75 s | an idle connection, or one that never finishes its headers, is closed |
| ``max_connections`` | 4096 | 503 + ``Retry-After: 1`` on connect, closed at once |
| ``max_upstream_in_flight`` | 1024 | 503 + ``Retry-After`` (attempts across providers, hedges included) |
| ``request_deadline`` | 900 s | 504, or an SSE ``error`` event when the stream already started |
| ``admin_max_failures`` per ``admin_failure_window`` | 10 / 60 s | 429 + ``Retry-After`` for that client address |
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from tailgate._aiohttp import BodyLimits, HardenedSite, error_response
from tailgate.config.schema import GatewayConfig, ServerConfig
from tailgate.gateway.exchange import DEADLINE_HIT, STREAM_RESPONSE, error_frame
from tailgate.gateway.front import FRONT_KEY, Front
from tailgate.gateway.front_reply import WriteBatch
from tailgate.wire import errors as wire_errors

if TYPE_CHECKING:
    pass

__all__ = [
    "DEADLINE_HIT",
    "STREAM_RESPONSE",
    "body_limits",
    "deadline_middleware",
    "runner_kwargs",
    "site",
]


def body_limits(config: GatewayConfig) -> BodyLimits:
    return BodyLimits(
        max_bytes=config.max_body_bytes,
        read_timeout_s=config.server.body_read_timeout,
        raw_paths=("/v1/files",),  # uploads: read by gateway/batch_api.py within batch.max_file_bytes
    )


def runner_kwargs(server: ServerConfig) -> dict[str, Any]:
    """``web.AppRunner`` keyword arguments: keep-alive and header limits (aiohttp's request parser)."""
    return {
        "keepalive_timeout": server.keepalive_timeout,
        "max_line_size": server.max_header_bytes,
        "max_field_size": server.max_header_bytes,
        "max_headers": server.max_headers,
        # After refusing a body (408/413) aiohttp keeps reading what the client still sends for this long
        # before it closes, so the client can read the answer; 10 s by default held a slot per slow client.
        "lingering_time": 2.0,
    }


def site(runner: web.BaseRunner, host: str | None, port: int, server: ServerConfig, **kwargs: Any) -> HardenedSite:
    """The listening site with the connection cap and OpenAI-shaped parse errors; an app that set
    ``FRONT_KEY`` (``server.http_front: lean``) gets the gateway's front door for its ``/v1`` POSTs."""
    app = runner.app if isinstance(runner, web.AppRunner) else None
    routes = app.get(FRONT_KEY) if app is not None else None

    batches: dict[asyncio.AbstractEventLoop, WriteBatch] = {}  # one per loop: the site's connections share it

    def front(
        site: HardenedSite,
        manager: web.Server,
        fallback: Callable[[], asyncio.Protocol],
        loop: asyncio.AbstractEventLoop,
    ) -> asyncio.Protocol:
        assert routes is not None
        batch = batches.get(loop)
        if batch is None:
            batch = batches[loop] = WriteBatch(loop)
        return Front(routes, site=site, manager=manager, fallback=fallback, loop=loop, batch=batch)

    return HardenedSite(
        runner, host, port, max_connections=server.max_connections, front=front if routes else None, **kwargs
    )


def deadline_middleware(deadline_s: float | None, prefix: str = "/v1/") -> Callable[..., Any]:
    """Bound a whole ``/v1`` request (``server.request_deadline``): 504 before the first byte, else an
    SSE ``error`` event and the end of the stream — never a silent cut."""

    @web.middleware
    async def deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
        if deadline_s is None or not request.path.startswith(prefix):
            return await handler(request)
        task = asyncio.current_task()
        assert task is not None

        def fire() -> None:
            request[DEADLINE_HIT] = True
            task.cancel()

        timer = asyncio.get_running_loop().call_later(deadline_s, fire)
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except asyncio.CancelledError:
            if not request.get(DEADLINE_HIT):
                raise  # the client went away, or the server is stopping
            task.uncancel()
            err = wire_errors.timeout(f"The request passed its deadline of {deadline_s:g}s (server.request_deadline).")
            err.code = "deadline_exceeded"
            stream: web.StreamResponse | None = request.get(STREAM_RESPONSE)
            if stream is None or not stream.prepared:
                return error_response(err, path=request.path)
            with contextlib.suppress(ConnectionError, aiohttp.ClientConnectionResetError, RuntimeError):
                await stream.write(error_frame(err, request.path))
                await stream.write_eof()
            return stream
        finally:
            timer.cancel()

    return deadline
