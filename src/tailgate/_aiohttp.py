"""aiohttp pieces shared by the HTTP faces (simulator, gateway, dashboard), on aiohttp's public API only; no face
logic here.

Hostile input ends here as an OpenAI-shaped 4xx (docs/reliability.md; the statuses, codes and words are
``wire.http_refusals``'s): an unknown path (404), a wrong method (405, with ``Allow``), an oversized body (413), a
body that is not JSON by its content type (415), a body that trickles in slower than the read timeout (408). A
request aiohttp's parser refuses before any handler runs gets the same shape from ``_aiohttp_internals.HardenedSite``.
A bug that escapes a handler is a logged 500 in the same shape, never aiohttp's plain-text page.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from tailgate.wire import errors as wire_errors
from tailgate.wire import http_refusals
from tailgate.wire.anthropic import error_body as anthropic_error_body
from tailgate.wire.errors import WireError
from tailgate.wire.http_refusals import BodyLimits

__all__ = ["BODY_LIMITS_KEY", "error_response", "openai_shaped_errors"]

log = logging.getLogger("tailgate.http")


def error_response(err: WireError, headers: dict[str, str] | None = None, path: str | None = None) -> web.Response:
    """A WireError as an HTTP response in the OpenAI shape — Anthropic's for a ``path`` under ``/v1/messages``
    (the gateway's Messages API) — plus any headers the error carries."""
    merged = {**(err.headers or {}), **(headers or {})}
    body = anthropic_error_body(err) if path is not None and path.startswith("/v1/messages") else err.body()
    return web.Response(status=err.status, body=body, content_type="application/json", headers=merged or None)


BODY_LIMITS_KEY: web.AppKey[BodyLimits] = web.AppKey("tailgate_body_limits", BodyLimits)


async def _read_body(request: web.Request, limits: BodyLimits) -> WireError | None:
    """Read (and cache, aiohttp keeps it for ``request.read()``) the body within the limits."""
    try:
        if request.content.is_eof():  # the usual case: the body came with the headers, no wait, no timer
            await request.read()
        else:
            async with asyncio.timeout(limits.read_timeout_s):
                await request.read()
    except TimeoutError:
        return http_refusals.body_late(limits)
    except web.HTTPRequestEntityTooLarge:
        return http_refusals.too_large(limits.max_bytes)
    return None


@web.middleware
async def openai_shaped_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown routes, wrong methods, bad bodies and escaped bugs get OpenAI's error shape, not aiohttp's text.

    With :data:`BODY_LIMITS_KEY` set on the app, ``POST`` bodies are read here first (size, time, type),
    so every handler behind it sees a complete body or never runs.
    """
    try:
        limits = request.app.get(BODY_LIMITS_KEY)
        if limits is not None and request.method == "POST" and request.path not in limits.raw_paths:
            refused = http_refusals.before_body(
                limits, request.path, request.headers.get("Content-Type"), request.content_length
            ) or await _read_body(request, limits)
            if refused is not None:
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
        return http_refusals.not_found(request.method, request.path)
    if exc.status == 405:
        return http_refusals.method_not_allowed(
            request.method, request.path, list(getattr(exc, "allowed_methods", ()) or ())
        )
    if exc.status == 413:
        return http_refusals.too_large(request.client_max_size)
    return WireError(exc.status, exc.reason or "Request refused.", type="invalid_request_error")


def _allow(exc: web.HTTPException) -> dict[str, str] | None:
    allow = exc.headers.get("Allow")
    return {"Allow": allow} if allow else None
