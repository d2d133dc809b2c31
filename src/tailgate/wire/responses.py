"""The Responses API (``POST /v1/responses``): its request type and its basic text shape. No I/O.

Newer OpenAI clients and agent frameworks call it, and several MaaS providers serve it. Only the basic
text shape is modelled: one ``message`` output item with one ``output_text`` part. A stream is a
sequence of typed events (``event: response.output_text.delta`` …) that ends with
``response.completed`` and no ``[DONE]``; the first ``response.output_text.delta`` is the first token.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from tailgate.wire.sse import encode_event

__all__ = [
    "FIRST_TOKEN_EVENTS",
    "TERMINAL_EVENTS",
    "ResponseRequest",
    "input_text",
    "response_object",
    "stream_event",
]

FIRST_TOKEN_EVENTS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
    }
)
"""Stream events that carry output: the first of them is the call's first token."""
ANSWER_EVENTS = frozenset(
    {"response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta"}
)
"""Output events that are answer (not reasoning): the first of them is the first answer token."""
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete"})
"""Events that end a successful stream (the Responses API sends no ``[DONE]``)."""
ERROR_EVENTS = frozenset({"error", "response.failed"})


class ResponseRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """POST /v1/responses body (the fields OpenAI documents; typed loosely where they nest)."""

    model: Annotated[str, Meta(min_length=1)]
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    max_output_tokens: Annotated[int, Meta(ge=1)] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: int | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    truncation: str | None = None
    store: bool | None = None
    background: bool | None = None
    metadata: dict[str, str] | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    include: list[str] | None = None
    user: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    client_metadata: dict[str, Any] | None = None
    """Codex CLI sends it (its installation id) on every turn; api.openai.com accepts it."""


def input_text(req: ResponseRequest) -> str:
    """The prompt text of a request: instructions plus every text part of the input items, a
    ``function_call_output``'s ``output`` included (a tool's result is prompt the model reads)."""
    parts: list[str] = [req.instructions] if req.instructions else []
    if isinstance(req.input, str):
        parts.append(req.input)
    elif req.input:
        for item in req.input:
            content = item.get("content", item.get("output"))
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


def _message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def response_object(
    req: ResponseRequest,
    response_id: str,
    created_at: int,
    *,
    status: str,
    text: str | None = None,
    input_tokens: int = 0,
    cached_tokens: int = 0,
    output_tokens: int = 0,
    reasoning_tokens: int = 0,
    incomplete: bool = False,
) -> dict[str, Any]:
    """A ``response`` object; ``text=None`` while in progress (no output yet, no usage)."""
    item_id = "msg_" + response_id.removeprefix("resp_")
    done = status in ("completed", "incomplete")
    out: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "completed_at": int(time.time()) if done else None,
        "status": status,
        "background": bool(req.background),
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "max_tool_calls": req.max_tool_calls,
        "model": req.model,
        "output": [_message_item(item_id, text, "incomplete" if incomplete else "completed")] if done else [],
        "parallel_tool_calls": req.parallel_tool_calls if req.parallel_tool_calls is not None else True,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": (req.reasoning or {}).get("effort"), "summary": None},
        "service_tier": "default",
        "store": req.store if req.store is not None else True,
        "temperature": req.temperature if req.temperature is not None else 1.0,
        "text": req.text or {"format": {"type": "text"}},
        "tool_choice": req.tool_choice or "auto",
        "tools": req.tools or [],
        "top_logprobs": req.top_logprobs or 0,
        "top_p": req.top_p if req.top_p is not None else 1.0,
        "truncation": req.truncation or "disabled",
        "metadata": req.metadata or {},
    }
    if done:  # an in-progress response has no usage yet (the key is left out: the schema has no null)
        out["usage"] = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": input_tokens + output_tokens,
        }
    if req.user is not None:
        out["user"] = req.user
    return out


_encoder = msgspec.json.Encoder()


def stream_event(kind: str, sequence_number: int, **fields: Any) -> bytes:
    """One SSE frame of a Responses stream: ``event: KIND`` and its JSON with ``type`` and ``sequence_number``."""
    return encode_event(_encoder.encode({"type": kind, "sequence_number": sequence_number, **fields}), event=kind)


def text_events(item_id: str, first_seq: int, text: str) -> list[bytes]:
    """The closing events of the one text part, from ``response.output_text.done`` on."""
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    return [
        stream_event("response.output_text.done", first_seq, **where, text=text, logprobs=[]),
        stream_event("response.content_part.done", first_seq + 1, **where, part=part),
        stream_event(
            "response.output_item.done", first_seq + 2, output_index=0, item=_message_item(item_id, text, "completed")
        ),
    ]


def opening_events(req: ResponseRequest, response_id: str, created_at: int) -> list[bytes]:
    """``response.created`` … ``response.content_part.added``: everything before the first delta."""
    item_id = "msg_" + response_id.removeprefix("resp_")
    pending = response_object(req, response_id, created_at, status="in_progress")
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    return [
        stream_event("response.created", 0, response=pending),
        stream_event("response.in_progress", 1, response=pending),
        stream_event("response.output_item.added", 2, output_index=0, item=_message_item(item_id, None, "in_progress")),
        stream_event("response.content_part.added", 3, item_id=item_id, output_index=0, content_index=0, part=part),
    ]


def delta_event(item_id: str, sequence_number: int, delta: str) -> bytes:
    return stream_event(
        "response.output_text.delta",
        sequence_number,
        item_id=item_id,
        output_index=0,
        content_index=0,
        delta=delta,
        logprobs=[],
    )
