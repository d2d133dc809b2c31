"""The gateway's listening site and its resource limits toward its clients (``server:`` in the config;
docs/reliability.md): the runner's parser limits, the listening site (connection cap, the lean front door for the
``/v1`` POSTs), the body limits. The request deadline is ``aiohttp_exchange.deadline_middleware`` and
``lean_connection``'s; the upstream attempt cap the providers' own (``providers.check_upstream_capacity``), the
per-address lockout the access guard's (``access/lockout.py``).

Every limit refuses in the OpenAI shape (``wire.http_refusals``) and never queues without bound:

| limit | default | beyond it |
|---|---|---|
| ``max_header_bytes`` / ``max_headers`` | 8190 B / 128 | 431 (a request or header line too long, too many fields) |
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
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tailgate._aiohttp_internals import HardenedSite, SiteLink
from tailgate.config.schema import GatewayConfig, ServerConfig
from tailgate.gateway.http.exchange import Handle
from tailgate.gateway.http.lean_connection import LeanConnection, LeanRoutes
from tailgate.gateway.http.lean_reply import WriteBatch
from tailgate.wire.http_refusals import LINGER_S, BodyLimits

__all__ = ["body_limits", "runner_kwargs", "site", "use_lean_front"]

_LEAN_ROUTES: web.AppKey[LeanRoutes] = web.AppKey("tailgate_lean_routes", LeanRoutes)


def body_limits(config: GatewayConfig) -> BodyLimits:
    return BodyLimits(
        max_bytes=config.max_body_bytes,
        read_timeout_s=config.server.body_read_timeout,
        raw_paths=("/v1/files",),  # uploads: read by gateway/batch/batch_api.py within batch.max_file_bytes
    )


def use_lean_front(
    app: web.Application, routes: Mapping[str, Handle], limits: BodyLimits, server: ServerConfig
) -> None:
    """The sites :func:`site` makes for ``app`` serve ``POST`` to ``routes`` with the lean front door (the same
    handlers are aiohttp routes too: a connection handed to aiohttp keeps them)."""
    app[_LEAN_ROUTES] = LeanRoutes(routes, limits, server)


def runner_kwargs(server: ServerConfig) -> dict[str, Any]:
    """``web.AppRunner`` keyword arguments: keep-alive and header limits (aiohttp's request parser)."""
    return {
        "keepalive_timeout": server.keepalive_timeout,
        "max_line_size": server.max_header_bytes,
        "max_field_size": server.max_header_bytes,
        "max_headers": server.max_headers,
        "lingering_time": LINGER_S,  # after a refused body, as the lean front door (wire.http_refusals)
    }


def site(runner: web.BaseRunner, host: str | None, port: int, server: ServerConfig, **kwargs: Any) -> HardenedSite:
    """The listening site with the connection cap and OpenAI-shaped parse errors; an app given
    :func:`use_lean_front` (``server.http_front: lean``) gets the lean front door for its ``/v1`` POSTs."""
    app = runner.app if isinstance(runner, web.AppRunner) else None
    routes = app.get(_LEAN_ROUTES) if app is not None else None
    if routes is None:
        return HardenedSite(runner, host, port, max_connections=server.max_connections, **kwargs)
    lean = routes
    batches: dict[asyncio.AbstractEventLoop, WriteBatch] = {}  # one per loop: the site's connections share it

    def front(link: SiteLink, loop: asyncio.AbstractEventLoop) -> asyncio.Protocol:
        batch = batches.get(loop)
        if batch is None:
            batch = batches[loop] = WriteBatch(loop)
        return LeanConnection(lean, link=link, loop=loop, batch=batch)

    return HardenedSite(runner, host, port, max_connections=server.max_connections, front=front, **kwargs)
