"""What a call sends and how it classifies a failure: the request body (the usage chunk asked for on the
client's behalf), the HTTP status's error class, and the two ways a call ends early (a deadline, a failure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from tailgate.upstream.events import ErrorClass
from tailgate.wire.errors import WireError

_encode = msgspec.json.encode


def _prepare(
    body: bytes | Mapping[str, Any], stream: bool, wants_usage: bool | None, *, inject: bool = True
) -> tuple[bytes, bool]:
    """The body to send, and whether the client itself asked for the usage chunk.

    For streams we ask the upstream for ``stream_options.include_usage`` (the exact token count) when
    the client did not; the usage-only chunk that then arrives is dropped from what is forwarded.
    A body the client already asked usage with is sent byte for byte. ``inject=False`` (the Responses
    API, whose ``response.completed`` always carries usage) sends the body as it is.
    """
    if not stream or not inject:
        return (body if isinstance(body, bytes) else _encode(body)), True
    obj: Any
    if isinstance(body, bytes):
        try:
            obj = msgspec.json.decode(body)
        except msgspec.DecodeError:
            return body, True  # not JSON: the upstream will say so; nothing to inject into
        if not isinstance(obj, dict):
            return body, True
    else:
        obj = body
    options = obj.get("stream_options")
    asked = isinstance(options, dict) and options.get("include_usage") is True
    if wants_usage is None:
        wants_usage = asked
    if asked:
        return (body if isinstance(body, bytes) else _encode(body)), wants_usage
    new_options = dict(options) if isinstance(options, dict) else {}
    new_options["include_usage"] = True
    # vLLM's continuous_usage_stats only applies with include_usage: a client that did not ask usage
    # must not start getting it on every chunk because we asked on its behalf.
    new_options.pop("continuous_usage_stats", None)
    return _encode({**obj, "stream_options": new_options}), wants_usage


MAX_RESPONSE_BODY = 64 * 1024 * 1024
"""A non-streamed answer larger than this is refused as ``malformed`` (docs/reliability.md)."""


def _status_class(status: int, error: WireError | None) -> ErrorClass:
    if status == 429:
        if error is not None and "insufficient_quota" in (error.code, error.type):
            return "insufficient_quota"
        return "rate_limited"
    if 400 <= status < 500:
        return "http_4xx"
    if 500 <= status < 600:
        return "http_5xx"
    return "http_other"


def _min(*deadlines: float | None) -> float | None:
    present = [d for d in deadlines if d is not None]
    return min(present) if present else None


class _Expired(Exception):
    """A phase deadline passed; carries the error class to report."""

    def __init__(self, error_class: ErrorClass) -> None:
        super().__init__(error_class)
        self.error_class = error_class


class _Failed(Exception):
    def __init__(self, error_class: ErrorClass, detail: str) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail
