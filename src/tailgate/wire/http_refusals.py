"""The refusals of HTTP itself, written once for every server of tailgate (the gateway's lean front door, aiohttp
with its middleware, the simulator): what is refused, with which status, code and words.

Each refusal, when it is given, and what becomes of the connection:

- 400 ``bad_request`` (:func:`malformed`): the request line or a header is malformed; closed. Also
  (:func:`not_pipelinable`) a request the lean front door does not serve, pipelined behind one it does.
- 404 ``not_found`` (:func:`not_found`): no route for the path; kept.
- 405 ``method_not_allowed`` (:func:`method_not_allowed`): a route, not for this method, ``Allow`` says which; kept.
- 408 ``request_timeout`` (:func:`body_late`): the body did not arrive within ``body_read_timeout``; closed after
  lingering (what the client still sends is read and dropped for a moment, so it reads the answer).
- 413 ``request_too_large`` (:func:`before_body`, :func:`too_large`): a declared or received body over
  ``max_body_bytes``; closed after lingering.
- 415 ``unsupported_media_type`` (:func:`before_body`): a declared content type that is not JSON, on a JSON path;
  closed after lingering.
- 431 ``header_too_large`` (:func:`header_too_large`): a request line or header field over ``max_header_bytes``, or
  more than ``max_headers`` fields; closed.
- 503 ``overloaded`` (:func:`over_capacity`): more open connections than ``max_connections``; closed at once.
- 504 ``deadline_exceeded`` (:func:`deadline_exceeded`): the request passed ``request_deadline`` before its first
  byte; after it, the same error ends the stream as an SSE ``error`` event; kept.

A refusal's body is in the OpenAI error shape, or Anthropic's for a path under ``/v1/messages``; its text is
fixed per kind and never quotes the request (a header line may be a bearer token). Pure: no I/O, no server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tailgate.wire.errors import WireError
from tailgate.wire.errors import not_found as _not_found
from tailgate.wire.errors import timeout as _timeout

__all__ = [
    "LINGER_S",
    "BodyLimits",
    "before_body",
    "body_late",
    "deadline_exceeded",
    "header_too_large",
    "is_json_type",
    "malformed",
    "method_not_allowed",
    "not_found",
    "not_pipelinable",
    "over_capacity",
    "too_large",
]

_JSON_TYPES = frozenset(
    ("application/json", "text/plain", "application/x-www-form-urlencoded", "application/octet-stream", "")
)
"""Content types a JSON body may arrive with. ``text/plain`` and the form type are what ``curl -d`` and some
hand-written clients send, octet-stream what HTTP libraries label raw bytes with; the body is still parsed (and
refused) as JSON. Anything else (multipart, XML, ...) is a 415."""


LINGER_S = 2.0
"""After refusing a request whose body may still be on its way (408/413/415), how long what the client still sends
is read and dropped before the connection closes, so that it reads the answer instead of a reset. aiohttp's
default (10 s) held a connection slot per slow client."""


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


def is_json_type(mime: str) -> bool:
    """``mime`` (lower case, no parameters) may carry a JSON body."""
    return mime in _JSON_TYPES or mime.endswith("+json")


def before_body(
    limits: BodyLimits, path: str, content_type: str | None, content_length: int | None
) -> WireError | None:
    """The refusal a ``POST`` gets from its head alone, before any of its body is read: a declared content type that
    is not JSON on a JSON path (415), then a declared length over the limit (413). ``content_type`` is the header
    as sent (``None``: absent, which is never refused)."""
    if content_type is not None and path.startswith(limits.json_paths):
        mime = content_type.partition(";")[0].strip().lower()
        if mime not in _JSON_TYPES and not mime.endswith("+json"):  # is_json_type, inline: every POST asks
            return WireError(
                415,
                f"Unsupported content type {mime[:100]!r}: send 'application/json'.",
                type="invalid_request_error",
                param="Content-Type",
                code="unsupported_media_type",
            )
    if content_length is not None and content_length > limits.max_bytes:
        return too_large(limits.max_bytes)
    return None


def too_large(limit: int) -> WireError:
    """413: the body (declared, or as received) is over ``limit`` bytes."""
    return WireError(
        413,
        f"Request body too large: the limit is {limit} bytes.",
        type="invalid_request_error",
        code="request_too_large",
    )


def body_late(limits: BodyLimits) -> WireError:
    """408: the body did not arrive within ``body_read_timeout``."""
    return WireError(
        408,
        f"The request body did not arrive within {limits.read_timeout_s:g}s (limits.body_read_timeout).",
        type="invalid_request_error",
        code="request_timeout",
    )


def header_too_large(kind: Literal["line", "count"]) -> WireError:
    """431 (RFC 6585 §5): a request line or header field too long, or too many header fields."""
    return WireError(
        431,
        "A request line or header field is longer than the gateway accepts (server.max_header_bytes)."
        if kind == "line"
        else "The request has more header fields than the gateway accepts.",
        type="invalid_request_error",
        code="header_too_large",
    )


def malformed(kind: str = "BadRequest") -> WireError:
    """400: bytes that are not an HTTP/1.1 request; ``kind`` names the parser's complaint, never the bytes."""
    return WireError(400, f"Malformed HTTP request ({kind}).", type="invalid_request_error", code="bad_request")


def not_pipelinable() -> WireError:
    """400 from the lean front door: a request it does not serve, pipelined in the same read behind one it does, so
    it cannot be handed to aiohttp from its first byte."""
    return WireError(
        400,
        "Only /v1 POSTs may be pipelined behind a /v1 request: send this one on its own connection.",
        type="invalid_request_error",
        code="bad_request",
    )


def not_found(method: str, path: str) -> WireError:
    """404: no route for ``path``."""
    return _not_found(f"Invalid URL ({method} {path})")


def method_not_allowed(method: str, path: str, allowed: list[str]) -> WireError:
    """405: ``path`` has routes, none for ``method`` (the response's ``Allow`` lists ``allowed``)."""
    names = ", ".join(sorted(allowed))
    return WireError(
        405,
        f"Method {method} is not allowed for {path}" + (f" (allowed: {names})." if names else "."),
        type="invalid_request_error",
        code="method_not_allowed",
    )


def over_capacity(max_connections: int | None) -> WireError:
    """503: a connection over ``max_connections``; answered on connect, before any request is read."""
    return WireError(
        503,
        f"Too many open connections (limits.max_connections = {max_connections}). Retry shortly.",
        type="server_error",
        code="overloaded",
    )


def deadline_exceeded(deadline_s: float) -> WireError:
    """504: the request passed ``server.request_deadline`` (a stream that started ends with this as an SSE
    ``error`` event instead)."""
    err = _timeout(f"The request passed its deadline of {deadline_s:g}s (server.request_deadline).")
    err.code = "deadline_exceeded"
    return err
