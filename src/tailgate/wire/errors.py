"""OpenAI error bodies: ``{"error": {"message", "type", "param", "code"}}``.

Types and codes follow what api.openai.com sends (quoted in each constructor), because clients and
SDKs branch on them: the openai SDK maps the *status* to an exception class and copies ``type``,
``param`` and ``code`` onto it.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

__all__ = [
    "WireError",
    "authentication_error",
    "bad_gateway",
    "insufficient_quota",
    "invalid_request",
    "model_not_found",
    "not_found",
    "overloaded",
    "parse_error_body",
    "permission_denied",
    "rate_limited",
    "server_error",
    "timeout",
]


class _ErrorObject(msgspec.Struct):
    # No omit_defaults: OpenAI always sends all four keys, `param` and `code` as null when unset.
    message: str
    type: str
    param: str | None
    code: str | None


class _ErrorBody(msgspec.Struct):
    error: _ErrorObject


_encoder = msgspec.json.Encoder()


class WireError(Exception):
    """An error with its HTTP status and OpenAI error object; raise it anywhere, render it at the edge."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # shadows the builtin: the wire field is called `type`
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers
        """Response headers that belong with this error (e.g. ``Retry-After`` on a 429)."""
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def __repr__(self) -> str:
        return (
            f"WireError(status={self.status}, message={self.message!r}, type={self.type!r}, "
            f"param={self.param!r}, code={self.code!r})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The error as a plain dict, shaped like the JSON body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def body(self) -> bytes:
        """The JSON response body."""
        return _encoder.encode(_ErrorBody(_ErrorObject(self.message, self.type, self.param, self.code)))

    def sse_frame(self) -> bytes:
        """The error as the last SSE event of a stream that fails after its first byte.

        Emitted as ``event: error`` + ``data: {"error": {...}}``. The openai Python SDK (openai/_streaming.py,
        ``Stream.__stream__``) raises ``APIError`` for any event whose JSON data has a truthy ``"error"``
        key, whatever the event name, and older 1.x releases raise only on ``event: error`` with that
        data; openai-node does the same. Sending both the name and the ``error`` key therefore makes
        every SDK generation raise, lets plain line readers see the error object on the ``data:`` line,
        and is the "SSE error event" docs/gateway.md promises. No ``[DONE]`` follows: the stream failed.
        """
        return b"event: error\ndata: " + self.body() + b"\n\n"


# ---- constructors ------------------------------------------------------------------------------


def invalid_request(message: str, param: str | None = None, code: str | None = None) -> WireError:
    """400 ``invalid_request_error``: the client sent something wrong."""
    return WireError(400, message, type="invalid_request_error", param=param, code=code)


def authentication_error(message: str = "Incorrect API key provided.") -> WireError:
    """401; OpenAI sends type ``invalid_request_error``, code ``invalid_api_key``. Never echo the key."""
    return WireError(401, message, type="invalid_request_error", code="invalid_api_key")


def permission_denied(
    message: str = "You are not allowed to perform this request.", code: str | None = None
) -> WireError:
    """403; OpenAI sends type ``request_forbidden`` (e.g. code ``unsupported_country_region_territory``)."""
    return WireError(403, message, type="request_forbidden", code=code)


def not_found(message: str) -> WireError:
    """404 for an unknown route; OpenAI: ``Invalid URL (POST /v1/x)``, type invalid_request_error."""
    return WireError(404, message, type="invalid_request_error")


def model_not_found(model: str) -> WireError:
    """404 with OpenAI's exact wording and code ``model_not_found``."""
    return WireError(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        type="invalid_request_error",
        code="model_not_found",
    )


def rate_limited(
    message: str = "Rate limit reached. Please try again later.",
    *,
    limit: Literal["requests", "tokens"] = "requests",
) -> WireError:
    """429; OpenAI sets type to the exhausted limit (``requests``/``tokens``), code rate_limit_exceeded."""
    return WireError(429, message, type=limit, code="rate_limit_exceeded")


def insufficient_quota(
    message: str = "You exceeded your current quota, please check your plan and billing details.",
) -> WireError:
    """429 that retrying cannot fix; OpenAI uses ``insufficient_quota`` as both type and code."""
    return WireError(429, message, type="insufficient_quota", code="insufficient_quota")


def server_error(message: str = "The server had an error while processing your request.") -> WireError:
    """500 ``server_error``, code null, as OpenAI sends it."""
    return WireError(500, message, type="server_error")


def bad_gateway(message: str = "The upstream provider returned an invalid response.") -> WireError:
    """502: an upstream answered badly; ``server_error`` so clients treat it as transient."""
    return WireError(502, message, type="server_error", code="bad_gateway")


def overloaded(message: str = "The server is currently overloaded, please try again later.") -> WireError:
    """503. OpenAI sends type ``server_error`` with code null; we keep the type (clients retry on it)
    and add code ``overloaded`` so a client can tell shedding from a crash without parsing the text."""
    return WireError(503, message, type="server_error", code="overloaded")


def timeout(message: str = "The upstream provider did not respond in time.") -> WireError:
    """504 ``server_error``, code ``timeout``."""
    return WireError(504, message, type="server_error", code="timeout")


# ---- parsing upstream error bodies -------------------------------------------------------------

MAX_ERROR_BODY = 64 * 1024  # bytes parsed; an HTML error page or a runaway body is cut here
MAX_ERROR_MESSAGE = 1000  # characters kept in the message

_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_TAGS = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


def _default_type(status: int) -> str:
    if status == 429:  # OpenAI names the exhausted limit; requests is by far the common one
        return "requests"
    return "server_error" if status >= 500 or status < 400 else "invalid_request_error"


def _text(value: object) -> str | None:
    """A scalar as text (providers send numeric codes like 1301); containers and empties become None."""
    if value is None or isinstance(value, dict | list) or value == "":
        return None
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _clip(message: str) -> str:
    message = _SPACE.sub(" ", message).strip()
    return message if len(message) <= MAX_ERROR_MESSAGE else message[: MAX_ERROR_MESSAGE - 1] + "…"


def _from_mapping(status: int, obj: dict[str, Any]) -> WireError | None:
    inner = obj.get("error")
    if isinstance(inner, dict):  # OpenAI, vLLM >= 0.6, OpenRouter, DeepSeek, ...
        fields = inner
    elif isinstance(inner, str) and inner:  # {"error": "text"}: TGI, some proxies
        fields = {"message": inner, "type": obj.get("type"), "code": obj.get("code")}
    else:  # flat: older vLLM {"object": "error", "message", ...}, Zhipu/Baidu {"code", "msg"}, FastAPI
        fields = obj
    message = next(
        (
            text
            for key in ("message", "msg", "error_msg", "detail", "errorMessage")
            if (text := _text(fields.get(key))) is not None
        ),
        None,
    )
    if message is None:
        return None
    code = next((text for key in ("code", "error_code") if (text := _text(fields.get(key))) is not None), None)
    return WireError(
        status,
        _clip(message),
        type=_text(fields.get("type")) or _default_type(status),
        param=_text(fields.get("param")),
        code=code,
    )


def parse_error_body(status: int, body: bytes, *, redact: tuple[str, ...] = ()) -> WireError:
    """Turn any upstream error response into a WireError with the same status; never raises.

    Understands the OpenAI shape and the common variants; anything else (plain text, an HTML error
    page from a load balancer, bytes that are not UTF-8) becomes the message, clipped. ``redact``
    lists secrets (the upstream key) that must not reach the client even if the upstream echoes them.
    """
    try:
        head = body[:MAX_ERROR_BODY]
        error: WireError | None = None
        if len(body) <= MAX_ERROR_BODY:  # a clipped JSON body cannot parse; fall through to text
            try:
                obj = msgspec.json.decode(head)
            except msgspec.DecodeError:
                obj = None
            if isinstance(obj, list) and obj:  # Google's OpenAI-compatible endpoint wraps it in a list
                obj = obj[0]
            if isinstance(obj, dict):
                error = _from_mapping(status, obj)
        if error is None:
            title = _TITLE.search(head)
            raw = title.group(1) if title else head
            text = _clip(_TAGS.sub(" ", raw.decode("utf-8", "replace")))
            error = WireError(status, text or f"upstream returned HTTP {status}", type=_default_type(status))
        secrets = [s for s in redact if s]
        if secrets:
            message, kind, param, code = error.message, error.type, error.param, error.code
            for secret in secrets:
                message = message.replace(secret, "***")
                kind = kind.replace(secret, "***")
                param = param.replace(secret, "***") if param is not None else None
                code = code.replace(secret, "***") if code is not None else None
            # Rebuilt, not patched: Exception.args keeps the original text, and str(error) reads it.
            error = WireError(status, message, type=kind, param=param, code=code)
        return error
    # The contract is "never raises": a bug in parsing an odd body must not hide the upstream error.
    except Exception:
        return WireError(status, f"upstream returned HTTP {status}", type=_default_type(status))
