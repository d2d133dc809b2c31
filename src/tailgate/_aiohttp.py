"""aiohttp pieces shared by the HTTP faces (simulator, gateway); no face logic here."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError


def error_response(err: WireError, headers: dict[str, str] | None = None) -> web.Response:
    """A WireError as an HTTP response in the OpenAI shape (plus any headers the error carries)."""
    merged = {**(err.headers or {}), **(headers or {})}
    return web.Response(status=err.status, body=err.body(), content_type="application/json", headers=merged or None)


@web.middleware
async def openai_shaped_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown routes, wrong methods and oversized bodies get OpenAI's error shape, not aiohttp's text."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        if exc.status == 404:
            err = wire_errors.not_found(f"Invalid URL ({request.method} {request.path})")
        else:
            err = WireError(exc.status, exc.reason or "Request refused.", type="invalid_request_error")
        return error_response(err)
