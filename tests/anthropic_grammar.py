"""A checker for Anthropic's streamed event sequence (a test helper, not product code).

The grammar, from https://docs.anthropic.com/en/docs/build-with-claude/streaming ("Event types"):

    stream   := message_start block* message_delta+ message_stop  |  <any prefix of that> error
    block    := content_block_start content_block_delta+ content_block_stop
    ping     may appear anywhere after message_start

and what the page and the API reference add, each checked here:

* every frame names its event (``event: X``) and its JSON ``type`` is the same X (the SDK skips unnamed frames);
* ``message_start``'s message has empty ``content``, a null ``stop_reason`` and ``usage``;
* block indices count 0, 1, 2 … in order, "corresponding to its index in the final Message content array";
  one block is open at a time (what the API does; the SDK's accumulator indexes ``content[index]``);
* a delta's type fits its block: text ← ``text_delta`` / ``citations_delta``, thinking ←
  ``thinking_delta`` then exactly one ``signature_delta`` last, tool_use ← ``input_json_delta`` whose
  concatenated ``partial_json`` is a JSON object (or empty);
* every block is closed before ``message_delta``; ``message_delta`` has a non-null ``stop_reason`` and
  ``usage.output_tokens``;
* nothing follows ``message_stop`` or ``error``, and the stream ends with one of them: never a silent cut.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tailgate.wire.sse import SSEDecoder

_DELTAS = {
    "text": {"text_delta", "citations_delta"},
    "thinking": {"thinking_delta", "signature_delta"},
    "redacted_thinking": set(),
    "tool_use": {"input_json_delta"},
}


class GrammarError(AssertionError):
    """The stream breaks the grammar; the message says which event (1-based) and why."""


@dataclass
class Block:
    """One content block as the stream built it."""

    index: int
    type: str
    text: str = ""
    signature: str | None = None
    input_json: str = ""
    start: dict[str, Any] = field(default_factory=dict)
    deltas: int = 0


@dataclass
class Checked:
    """What a well-formed stream said."""

    events: list[str]
    message: dict[str, Any]
    blocks: list[Block]
    stop_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None


def check_stream(body: bytes, *, tool_json: bool = True) -> Checked:
    """Parse an SSE body and check it against the grammar; raise :class:`GrammarError` at the first break.
    ``tool_json=False`` skips the one rule about content (a tool input's JSON), for generated streams."""
    decoder = SSEDecoder()
    frames = decoder.feed(body)
    decoder.close()
    events: list[dict[str, Any]] = []
    for n, frame in enumerate(frames, 1):
        data = json.loads(frame.data)
        if frame.event is None:
            raise GrammarError(f"event {n}: frame has no `event:` name (the SDK would skip it): {frame.data}")
        if not isinstance(data, dict) or data.get("type") != frame.event:
            raise GrammarError(f"event {n}: `event: {frame.event}` carries data of type {data.get('type')!r}")
        events.append(data)
    return check_events(events, tool_json=tool_json)


def check_events(events: list[dict[str, Any]], *, tool_json: bool = True) -> Checked:
    """Check parsed event objects in order (see the module docstring)."""
    if not events:
        raise GrammarError("empty stream: no message_start")
    out = Checked(events=[e["type"] for e in events], message={}, blocks=[])
    open_block: Block | None = None
    deltas_seen = False
    ended = False
    for n, event in enumerate(events, 1):
        kind = event["type"]
        where = f"event {n} ({kind})"
        if ended:
            raise GrammarError(f"{where}: comes after the stream ended with {out.events[n - 2]}")
        if kind == "error":
            error = event.get("error")
            if not isinstance(error, dict) or not isinstance(error.get("type"), str) or "message" not in error:
                raise GrammarError(f"{where}: error needs error.type and error.message")
            out.error = error
            ended = True
            continue
        if n == 1:
            if kind != "message_start":
                raise GrammarError(f"{where}: the stream must open with message_start")
            message = event.get("message") or {}
            if message.get("content") != [] or message.get("stop_reason") is not None:
                raise GrammarError(f"{where}: message_start's message must have empty content and no stop_reason")
            if not isinstance(message.get("usage"), dict):
                raise GrammarError(f"{where}: message_start's message has no usage")
            out.message = message
            continue
        if kind == "message_start":
            raise GrammarError(f"{where}: a second message_start")
        if kind == "ping":
            continue
        if kind == "content_block_start":
            if open_block is not None:
                raise GrammarError(f"{where}: block {open_block.index} is still open")
            if deltas_seen:
                raise GrammarError(f"{where}: a block starts after message_delta")
            index, block = event.get("index"), event.get("content_block") or {}
            if index != len(out.blocks):
                raise GrammarError(f"{where}: index {index}, expected {len(out.blocks)}")
            if block.get("type") not in _DELTAS:
                raise GrammarError(f"{where}: unknown block type {block.get('type')!r}")
            open_block = Block(index=index, type=block["type"], start=block)
            out.blocks.append(open_block)
            continue
        if kind in ("content_block_delta", "content_block_stop"):
            if open_block is None or event.get("index") != open_block.index:
                open_index = None if open_block is None else open_block.index
                raise GrammarError(f"{where}: index {event.get('index')} but the open block is {open_index}")
            if kind == "content_block_stop":
                if open_block.deltas == 0:
                    raise GrammarError(f"{where}: block {open_block.index} closed without a delta")
                if open_block.type == "thinking" and open_block.signature is None:
                    raise GrammarError(f"{where}: thinking block {open_block.index} closed without signature_delta")
                if tool_json and open_block.type == "tool_use" and open_block.input_json:
                    try:
                        parsed = json.loads(open_block.input_json)
                    except ValueError as exc:
                        raise GrammarError(f"{where}: tool input is not JSON: {exc}") from None
                    if not isinstance(parsed, dict):
                        raise GrammarError(f"{where}: tool input is not a JSON object")
                open_block = None
                continue
            delta = event.get("delta") or {}
            dtype = delta.get("type")
            if dtype not in _DELTAS[open_block.type]:
                raise GrammarError(f"{where}: {dtype} in a {open_block.type} block")
            if open_block.signature is not None:
                raise GrammarError(f"{where}: {dtype} after the thinking block's signature_delta")
            open_block.deltas += 1
            if dtype == "text_delta":
                open_block.text += delta["text"]
            elif dtype == "thinking_delta":
                open_block.text += delta["thinking"]
            elif dtype == "signature_delta":
                open_block.signature = delta["signature"]
            elif dtype == "input_json_delta":
                open_block.input_json += delta["partial_json"]
            continue
        if kind == "message_delta":
            if open_block is not None:
                raise GrammarError(f"{where}: block {open_block.index} is still open")
            usage = event.get("usage")
            if not isinstance(usage, dict) or not isinstance(usage.get("output_tokens"), int):
                raise GrammarError(f"{where}: message_delta needs usage.output_tokens")
            reason = (event.get("delta") or {}).get("stop_reason")
            if reason is None:
                raise GrammarError(f"{where}: message_delta needs a stop_reason")
            out.stop_reason, out.usage = reason, usage
            deltas_seen = True
            continue
        if kind == "message_stop":
            if not deltas_seen:
                raise GrammarError(f"{where}: message_stop before any message_delta")
            ended = True
            continue
        raise GrammarError(f"{where}: unknown event type")
    if not ended:
        raise GrammarError(f"the stream ended after {out.events[-1]} without message_stop or error (a silent cut)")
    return out
