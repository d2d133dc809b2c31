"""The client's headers the gateway reads or forwards upstream: an allow-list, each checked once on arrival.

Nothing a client sends is copied upstream except what is listed here, and each value is checked before the
request goes anywhere: a header that fails is a 400 naming it (``param``), in the request's own API shape,
so that what a client sends never becomes a provider's failure (an upstream client that cannot encode a
value would otherwise fail the attempt as the provider's). The values kept are printable ASCII (RFC 9110
§5.5: field values SHOULD be limited to it; obs-text, CR, LF and NUL are refused), so they encode to
Latin-1 on the upstream connection, to UTF-8 in the ledger and the trace, and as Prometheus label values.

=====================  ========================================  ==========================================
header                 where it goes                             a value that fails
=====================  ========================================  ==========================================
``x-request-id``       upstream, reply, ledger                   400; over 128 characters: cut to 128
``anthropic-version``  upstream (passthrough ``/v1/messages``)   400; sent twice, different: 400
``anthropic-beta``     upstream (passthrough ``/v1/messages``)   400; sent twice: joined with ``,``
``x-tailgate-class``   routing, ledger, trace                    400
=====================  ========================================  ==========================================

Every other client header stays at the gateway (``Authorization`` / ``x-api-key`` are read by the key
check, ``x-session-id`` by affinity as a hash, ``Content-Type`` / ``Content-Length`` by the server).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tailgate.wire.errors import WireError

__all__ = ["FORWARDED", "MAX_REQUEST_ID", "anthropic_forward", "request_id", "traffic_class", "unsendable"]

MAX_REQUEST_ID = 128
"""Longer client request ids are cut to this many characters (they are a correlation id, not a payload)."""
FORWARDED = ("x-request-id", "anthropic-version", "anthropic-beta")
"""The client headers an upstream request may carry (its other headers come from the provider's config)."""

_PRINTABLE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")
"""Visible ASCII with inner spaces: what an HTTP/1.1 field value is without obs-text or control bytes."""
_LIMITS = {"x-request-id": 8192, "anthropic-version": 64, "anthropic-beta": 1024, "x-tailgate-class": 64}
"""The longest value accepted (an x-request-id is accepted up to the server's field size, then cut)."""


def _refuse(name: str, why: str) -> WireError:
    message = f"The header '{name}' {why}."
    return WireError(400, message, type="invalid_request_error", param=name, code="invalid_header")


def _values(headers: Mapping[str, str], name: str) -> list[str]:
    getall = getattr(headers, "getall", None)  # a multidict keeps every copy of a repeated header
    if getall is not None:
        return list(getall(name, ()))
    value = headers.get(name)
    return [] if value is None else [value]


def _checked(name: str, value: str) -> str:
    if len(value) > _LIMITS[name]:
        raise _refuse(name, f"is longer than {_LIMITS[name]} characters")
    if _PRINTABLE.fullmatch(value) is None:
        raise _refuse(name, "must be printable ASCII (no control characters, line breaks or non-ASCII bytes)")
    return value


def _single(headers: Mapping[str, str], name: str) -> str | None:
    values = [v for v in _values(headers, name) if v]
    if not values:
        return None
    if len(values) > 1 and len(set(values)) > 1:
        raise _refuse(name, "is sent more than once with different values")
    return _checked(name, values[0])


def unsendable(name: str) -> WireError:
    """An upstream request that could not be written for its header ``name``: a 400 naming it when the client's
    (an allow-listed header), else the gateway's own 500 (a provider's configured header is checked at load)."""
    if name.lower() in FORWARDED:
        return _refuse(name.lower(), "cannot be sent upstream")
    return WireError(500, "The gateway could not build the upstream request.", type="server_error", code="internal")


def request_id(headers: Mapping[str, str]) -> str | None:
    """The client's ``x-request-id`` cut to :data:`MAX_REQUEST_ID` characters, or None; a 400 if it fails."""
    value = _single(headers, "x-request-id")
    return None if value is None else value[:MAX_REQUEST_ID]


def traffic_class(headers: Mapping[str, str]) -> str | None:
    """The client's ``x-tailgate-class``, or None; a 400 if it fails."""
    return _single(headers, "x-tailgate-class")


def anthropic_forward(headers: Mapping[str, str], default_version: str) -> dict[str, str]:
    """``anthropic-version`` (else ``default_version``) and ``anthropic-beta`` for a native endpoint."""
    out = {"anthropic-version": _single(headers, "anthropic-version") or default_version}
    betas = [v for v in _values(headers, "anthropic-beta") if v]
    if betas:
        out["anthropic-beta"] = _checked("anthropic-beta", ",".join(betas))
    return out
