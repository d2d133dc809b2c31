"""The gateway's Responses API route (``POST /v1/responses``): what differs from chat, in one place.

It is routed like chat (same aliases, same policies, retries before the first output event, the same
measurement core: the first ``response.output_text.delta`` is the first token and ``response.completed``
ends the stream, since the Responses API sends no ``[DONE]``). What differs:

* no ``stream_options.include_usage`` is injected (``response.completed`` always carries usage, and a
  strict upstream would refuse the field): its dialect, ``upstream.RESPONSES``, sends the body as it is and
  reads the stream's events;
* a failure after output began ends the stream with a Responses-shaped ``error`` event (:func:`error_frame`);
* the output budget is ``max_output_tokens`` (for TPM pacing: estimate.output_budget).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from tailgate.gateway.api_handler import Translator, register
from tailgate.gateway.apis.openai_family import OpenAIApi
from tailgate.upstream import RESPONSES
from tailgate.wire.errors import WireError

if TYPE_CHECKING:
    from tailgate.upstream import CallResult

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


class ResponsesApi(OpenAIApi):
    """Chat's handler, with the Responses API's dialect and error event."""

    def error_frame(self, err: WireError, result: CallResult, translated: Translator | None) -> bytes:
        return error_frame(err)


API = register(ResponsesApi("responses", PATH, "responses", dialect=RESPONSES))
