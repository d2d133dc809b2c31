"""The gateway's Responses API route (``POST /v1/responses``): what differs from chat, in one place.

It is routed like chat (same aliases, same policies, retries before the first output event, the same
measurement core: the first ``response.output_text.delta`` is the first token and ``response.completed``
ends the stream, since the Responses API sends no ``[DONE]``). What differs:

* no ``stream_options.include_usage`` is injected (``response.completed`` always carries usage, and a
  strict upstream would refuse the field): :mod:`tailgate.upstream.call` leaves a ``/responses`` body as is;
* a failure after output began ends the stream with a Responses-shaped ``error`` event (:func:`error_frame`);
* the output budget is ``max_output_tokens`` (for TPM pacing).

The request's token estimate (prompt bound, output budget × answers) lives here too: every endpoint's
reservation and pacing read it.
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


_DENSE = b"0123456789" + bytes(c for c in range(0x21, 0x7F) if not chr(c).isalnum()) + bytes(range(0x80, 0x100))
_NOT_DENSE = bytes(c for c in range(0x100) if c not in _DENSE)


def prompt_bound(body: bytes) -> float:
    """An upper bound of the prompt's tokens in ``body`` for any script, cheap enough for every request (one
    C-speed ``translate`` pass): one token per *dense* byte — an ASCII digit or punctuation mark, or any byte of a
    non-ASCII character — plus a quarter token per other byte (ASCII letters and whitespace: words). A byte-level
    BPE tokenizer spends at most one token per byte, and DeepSeek's and Qwen's reach it for every non-ASCII block
    (a rare CJK character alone is 3 tokens, an emoji up to 4, a Cyrillic letter 2) and for digits (Qwen: one per
    digit); English, code and JSON come to 1.3–1.5 × what they tokenize to. Bytes / 4, the earlier estimate,
    reserved ~1,517 tokens for 1,991 Chinese characters (which take ~2,000 or more). Not bounded: long random letter
    runs (base64, hex digests: up to 0.75 token per letter) — docs/keys.md, "The prompt bound"."""
    dense = len(body.translate(None, _NOT_DENSE))
    return float(dense + -(-(len(body) - dense) // 4))  # whole tokens, rounded up: a cut stream is charged this


def output_multiplier(obj: Mapping[str, Any]) -> int:
    """How many answers one request asks for: ``n`` (chat, completions), or ``best_of`` where larger (completions:
    the provider generates, and bills, ``best_of`` candidates). Each may use the whole output budget, so a
    reservation multiplies by this (without it, ``n: 40`` reserved ``max_tokens`` once)."""
    n = obj.get("n")
    best = obj.get("best_of")
    m = n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1
    if isinstance(best, int) and not isinstance(best, bool) and best > m:
        m = best
    return m


def token_estimate(obj: Mapping[str, Any], body: bytes, endpoint: str, default_max_tokens: int) -> tuple[float, float]:
    """(prompt, output) tokens a request may use, for TPM pacing and key reservations alike: the prompt's upper
    bound (:func:`prompt_bound`); the output is the request's budget (:func:`output_budget`), else
    ``default_max_tokens`` (``routing.pacing.default_max_tokens``), times the answers it asks for
    (:func:`output_multiplier`); none for embeddings."""
    prompt = prompt_bound(body)
    if endpoint == "embeddings":
        return prompt, 0.0
    out = output_budget(obj)
    per_answer = out if isinstance(out, int) and out > 0 else default_max_tokens
    return prompt, float(per_answer * output_multiplier(obj))
