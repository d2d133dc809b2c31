"""The gateway's Responses API route (``POST /v1/responses``): what differs from chat, in one place.

It is routed like chat (same aliases, same policies, retries before the first output event, the same
measurement core: the first ``response.output_text.delta`` is the first token and ``response.completed``
ends the stream, since the Responses API sends no ``[DONE]``). What differs:

* no ``stream_options.include_usage`` is injected (``response.completed`` always carries usage, and a
  strict upstream would refuse the field): :mod:`tailgate.upstream.call` leaves a ``/responses`` body as is;
* a failure after output began ends the stream with a Responses-shaped ``error`` event (:func:`error_frame`);
* the output budget is ``max_output_tokens`` (for TPM pacing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from tailgate.wire.errors import WireError

PATH = "/responses"


def error_frame(err: WireError) -> bytes:
    """``event: error`` in the Responses API's shape (``type``, ``code``, ``message``, ``param``), plus the
    ``error`` object every OpenAI SDK generation raises ``APIError`` on (see ``WireError.sse_frame``)."""
    body = msgspec.json.decode(err.body())
    inner = body.get("error", {}) if isinstance(body, dict) else {}
    event = {
        "type": "error",
        "sequence_number": 0,
        "code": inner.get("code") or inner.get("type"),
        "message": inner.get("message", ""),
        "param": inner.get("param"),
        "error": inner,
    }
    return b"event: error\ndata: " + msgspec.json.encode(event) + b"\n\n"


def output_budget(obj: Mapping[str, Any]) -> Any:
    """The request's output token budget, whatever the endpoint calls it."""
    return obj.get("max_completion_tokens") or obj.get("max_tokens") or obj.get("max_output_tokens")


def token_estimate(
    obj: Mapping[str, Any], body_bytes: int, endpoint: str, default_max_tokens: int
) -> tuple[float, float]:
    """(prompt, output) tokens a request may use, for TPM pacing and key reservations alike: the prompt ≈ body
    bytes / 4; the output is the request's budget (:func:`output_budget`), else ``default_max_tokens``
    (``routing.pacing.default_max_tokens``); none for embeddings."""
    if endpoint == "embeddings":
        return body_bytes / 4, 0.0
    out = output_budget(obj)
    return body_bytes / 4, float(out if isinstance(out, int) and out > 0 else default_max_tokens)
