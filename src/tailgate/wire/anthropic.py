"""Anthropic's Messages API (``POST /v1/messages``): request, response and stream event types. No I/O.

Coding agents (Claude Code and its kin) speak this protocol. The shapes follow Anthropic's API reference
(https://docs.anthropic.com/en/api/messages, .../messages-streaming, .../errors) and the official Python
SDK's types (``anthropic`` 2.10, ``anthropic/types/``), which the tests run against.

Requests decode once at the edge into Structs with 400s that name the field (the same decoder as the
OpenAI types: ``'max_tokens' is a required property``, ``Invalid value for 'messages.0.content.1.type'``).
Content blocks are a tagged union on ``type``: a block type this module does not know is a 400 naming
the block, because a translation that silently dropped it would answer a different question. A gateway
that passes a request through to a native Anthropic endpoint does not need the typed body: it reads only
the head (:func:`decode_head`) and forwards the bytes, so new block types pass untouched.

A stream is a sequence of named SSE events (``event: message_start`` + ``data: {"type": "message_start",
...}``); the SDK skips an event without a name, so every frame carries both (:func:`event_frame`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from tailgate.wire._decode import RequestDecoder, json_error, nested_too_deeply, validation_error
from tailgate.wire.errors import WireError, invalid_request

__all__ = [
    "ANSWER_DELTAS",
    "API_VERSION",
    "BLOCK_TYPES",
    "TOKEN_DELTAS",
    "ContentBlockDeltaEvent",
    "ContentBlockStartEvent",
    "ContentBlockStopEvent",
    "CountTokensRequest",
    "DocumentBlock",
    "ErrorEvent",
    "ErrorObject",
    "ImageBlock",
    "InputJsonDelta",
    "Message",
    "MessageDelta",
    "MessageDeltaEvent",
    "MessageDeltaUsage",
    "MessageResponse",
    "MessageStartEvent",
    "MessageStopEvent",
    "MessagesHead",
    "MessagesRequest",
    "Metadata",
    "PingEvent",
    "RedactedThinkingBlock",
    "SignatureDelta",
    "StreamEvent",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingConfig",
    "ThinkingDelta",
    "Tool",
    "ToolChoice",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "decode_count_tokens",
    "decode_event",
    "decode_head",
    "decode_messages",
    "error_body",
    "error_event",
    "error_type",
    "event_frame",
    "from_chat_body",
    "head_of",
]

API_VERSION = "2023-06-01"
"""The ``anthropic-version`` header every current SDK sends (the API's only stable version)."""
TOKEN_DELTAS = frozenset({"text_delta", "thinking_delta", "input_json_delta"})
"""``content_block_delta`` types that carry output tokens (a ``signature_delta`` carries none)."""
ANSWER_DELTAS = frozenset({"text_delta", "input_json_delta"})
"""Of those, the answer's (not thinking): the first of them is the first answer token."""

# ---- content blocks (requests and responses) -----------------------------------------------------


class TextBlock(msgspec.Struct, tag="text", kw_only=True, omit_defaults=True, tag_field="type"):
    """``{"type": "text", "text"}``; ``cache_control`` and ``citations`` ride along where given."""

    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[dict[str, Any]] | None = None


class ImageBlock(msgspec.Struct, tag="image", kw_only=True, omit_defaults=True, tag_field="type"):
    """``source`` is ``{"type": "base64", "media_type", "data"}``, ``{"type": "url", "url"}`` or a file id."""

    source: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class DocumentBlock(msgspec.Struct, tag="document", kw_only=True, omit_defaults=True, tag_field="type"):
    """A PDF or text document; known so that a translation can refuse it by name."""

    source: dict[str, Any] | None = None
    title: str | None = None
    context: str | None = None
    cache_control: dict[str, Any] | None = None


class ToolUseBlock(msgspec.Struct, tag="tool_use", kw_only=True, omit_defaults=True, tag_field="type"):
    """The model calls a tool: ``id`` (``toolu_…``), ``name``, ``input`` (a JSON object)."""

    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolResultBlock(msgspec.Struct, tag="tool_result", kw_only=True, omit_defaults=True, tag_field="type"):
    """A user turn's answer to a tool call; ``content`` is text or text / image / document blocks."""

    tool_use_id: str
    content: str | list[TextBlock | ImageBlock | DocumentBlock] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None


class ThinkingBlock(msgspec.Struct, tag="thinking", kw_only=True, omit_defaults=True, tag_field="type"):
    """Extended thinking; ``signature`` is opaque and goes back to the API exactly as received."""

    thinking: str
    signature: str


class RedactedThinkingBlock(
    msgspec.Struct, tag="redacted_thinking", kw_only=True, omit_defaults=True, tag_field="type"
):
    """Thinking the API encrypted (``data``): only the model that wrote it can read it."""

    data: str


ContentBlock = (
    TextBlock | ImageBlock | DocumentBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock
)
OutputBlock = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock
"""What a response's ``content`` holds (server-tool blocks are not modelled)."""


# ---- requests ------------------------------------------------------------------------------------


class Message(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One turn of ``messages``: a string or a list of content blocks. ``system`` turns (text only) are
    newer: the SDK's ``SystemMessageParam`` (anthropic 2.17), which recent Claude Code versions send."""

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class Tool(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A client tool (``name``, ``description``, ``input_schema``) or, with a versioned ``type`` such as
    ``web_search_20250305``, a server tool the API runs itself."""

    name: Annotated[str, Meta(min_length=1)]
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None


class ToolChoice(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``auto`` (default), ``any`` (some tool), ``tool`` (the one ``name``d) or ``none``."""

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``{"type": "enabled", "budget_tokens": N}``, ``{"type": "disabled"}``, ``{"type": "adaptive"}`` or
    ``{"type": "between_tools"}`` (anthropic 2.17: think between tool calls); all but ``disabled`` turn it on."""

    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: Annotated[int, Meta(ge=1)] | None = None
    display: str | None = None


class Metadata(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``metadata.user_id``: an opaque end-user id (a hash, never a name or an e-mail)."""

    user_id: str | None = None


class _MessagesBase(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Fields shared by ``/v1/messages`` and ``/v1/messages/count_tokens``."""

    model: Annotated[str, Meta(min_length=1)]
    messages: list[Message]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    # Newer fields the current SDK sends; typed loosely, they are passed through or refused by name.
    mcp_servers: list[dict[str, Any]] | None = None
    container: str | dict[str, Any] | None = None
    context_management: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    output_format: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None


class MessagesRequest(_MessagesBase, kw_only=True, omit_defaults=True):
    """POST /v1/messages body. ``temperature``, ``top_p`` and ``top_k`` are still sent by older SDKs and
    Claude Code; the API documents temperature in [0, 1]."""

    max_tokens: Annotated[int, Meta(ge=1)]
    stream: bool = False
    stop_sequences: list[str] | None = None
    temperature: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    metadata: Metadata | None = None
    service_tier: str | None = None
    inference_geo: str | None = None
    speed: str | None = None
    diagnostics: dict[str, Any] | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


class CountTokensRequest(_MessagesBase, kw_only=True, omit_defaults=True):
    """POST /v1/messages/count_tokens body (no ``max_tokens``, no ``stream``)."""


class MessagesHead(msgspec.Struct, kw_only=True):
    """What a passthrough needs of a request (routing, pacing, ledger); the rest stays raw bytes."""

    model: Annotated[str, Meta(min_length=1)]
    max_tokens: Annotated[int, Meta(ge=1)]
    stream: bool = False
    metadata: dict[str, Any] | None = None


# ---- responses -----------------------------------------------------------------------------------


class Usage(msgspec.Struct, kw_only=True):
    """A message's token counts. ``input_tokens`` excludes cached input: Anthropic bills cache reads and
    cache writes apart, so the three add up to the prompt."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class MessageResponse(msgspec.Struct, kw_only=True):
    """A whole ``message`` (the non-streamed answer, and ``message_start``'s ``message`` with no content)."""

    id: str
    type: str = "message"
    role: str = "assistant"
    model: str
    content: list[OutputBlock]
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: Usage


# ---- stream events -------------------------------------------------------------------------------


class TextDelta(msgspec.Struct, tag="text_delta", kw_only=True, tag_field="type"):
    text: str


class ThinkingDelta(msgspec.Struct, tag="thinking_delta", kw_only=True, tag_field="type"):
    thinking: str


class SignatureDelta(msgspec.Struct, tag="signature_delta", kw_only=True, tag_field="type"):
    signature: str


class InputJsonDelta(msgspec.Struct, tag="input_json_delta", kw_only=True, tag_field="type"):
    partial_json: str


Delta = TextDelta | ThinkingDelta | SignatureDelta | InputJsonDelta


class MessageDelta(msgspec.Struct, kw_only=True):
    stop_reason: str | None = None
    stop_sequence: str | None = None


class MessageDeltaUsage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Cumulative counts; the SDK keeps ``message_start``'s value for any field left out."""

    output_tokens: int
    input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class MessageStartEvent(msgspec.Struct, tag="message_start", kw_only=True, tag_field="type"):
    message: MessageResponse


class ContentBlockStartEvent(msgspec.Struct, tag="content_block_start", kw_only=True, tag_field="type"):
    index: int
    content_block: OutputBlock


class ContentBlockDeltaEvent(msgspec.Struct, tag="content_block_delta", kw_only=True, tag_field="type"):
    index: int
    delta: Delta


class ContentBlockStopEvent(msgspec.Struct, tag="content_block_stop", kw_only=True, tag_field="type"):
    index: int


class MessageDeltaEvent(msgspec.Struct, tag="message_delta", kw_only=True, tag_field="type"):
    delta: MessageDelta
    usage: MessageDeltaUsage


class MessageStopEvent(msgspec.Struct, tag="message_stop", kw_only=True, tag_field="type"):
    pass


class PingEvent(msgspec.Struct, tag="ping", kw_only=True, tag_field="type"):
    pass


class ErrorObject(msgspec.Struct, kw_only=True):
    type: str
    message: str


class ErrorEvent(msgspec.Struct, tag="error", kw_only=True, tag_field="type"):
    """A failure after the stream began (and the body of every error response)."""

    error: ErrorObject


StreamEvent = (
    MessageStartEvent
    | ContentBlockStartEvent
    | ContentBlockDeltaEvent
    | ContentBlockStopEvent
    | MessageDeltaEvent
    | MessageStopEvent
    | PingEvent
    | ErrorEvent
)

_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(StreamEvent)


def event_frame(event: StreamEvent) -> bytes:
    """One SSE frame: ``event: <type>`` and the event's JSON (the SDK ignores frames without a name)."""
    tag = type(event).__struct_config__.tag
    return b"event: " + str(tag).encode() + b"\ndata: " + _encoder.encode(event) + b"\n\n"


def decode_event(data: str | bytes) -> StreamEvent:
    """One event's ``data`` JSON as its Struct; raises ``msgspec.ValidationError`` for an unknown shape."""
    event: StreamEvent = _event_decoder.decode(data)
    return event


# ---- errors --------------------------------------------------------------------------------------

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int, openai_type: str | None = None) -> str:
    """Anthropic's ``error.type`` for a status, per https://docs.anthropic.com/en/api/errors: other 4xx
    are ``invalid_request_error`` (as the page says), 503 (our shedding, an upstream's overload) is
    ``overloaded_error`` and other 5xx ``api_error``. OpenAI's ``insufficient_quota`` (a 429 that waiting
    does not fix) becomes ``billing_error``; the status is kept, so the SDK's retry rules still apply."""
    if openai_type == "insufficient_quota":
        return "billing_error"
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    if status == 503:
        return "overloaded_error"
    return "api_error" if status >= 500 else "invalid_request_error"


def _error_object(err: WireError) -> ErrorObject:
    message, param = err.message, err.param
    if param is not None and param not in message and f"'{param.rsplit('.', 1)[0]}'" not in message:
        message = f"{param}: {message}"
    return ErrorObject(type=error_type(err.status, err.type), message=message)


def error_body(err: WireError, request_id: str | None = None) -> bytes:
    """``{"type": "error", "error": {"type", "message"}, "request_id"}`` for an error response. The field
    an OpenAI-shaped error names in ``param`` is put in front of the message (Anthropic has no ``param``)."""
    body: dict[str, Any] = {"type": "error", "error": _error_object(err)}
    if request_id is not None:
        body["request_id"] = request_id
    return _encoder.encode(body)


def error_event(err: WireError) -> bytes:
    """The ``event: error`` frame that ends a stream failing after its first byte (no ``message_stop``)."""
    return event_frame(ErrorEvent(error=_error_object(err)))


# ---- decoding ------------------------------------------------------------------------------------

_ENUMS = {"role": ("user", "assistant", "system")}
_MESSAGES: RequestDecoder[MessagesRequest] = RequestDecoder(MessagesRequest, _ENUMS)
_COUNT: RequestDecoder[CountTokensRequest] = RequestDecoder(CountTokensRequest, _ENUMS)
_HEAD = msgspec.json.Decoder(MessagesHead)


BLOCK_TYPES = ("text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking")
"""Content block types a request may carry here (a translation refuses ``document`` by name)."""
_BLOCK_TAG = re.compile(r"Invalid value for '(?P<param>[^']*\.type)': Invalid value (?P<value>.+)\.")


def _block_type_error(exc: WireError) -> WireError:
    """msgspec's words for an unknown tag (``Invalid value 'x'``) said as what they mean here."""
    found = _BLOCK_TAG.fullmatch(exc.message)
    if found is None or (".content." not in found["param"] and not found["param"].startswith("system.")):
        return exc
    return invalid_request(
        f"Invalid value for '{found['param']}': {found['value']} content blocks are not supported "
        f"(supported: {', '.join(BLOCK_TYPES)}).",
        found["param"],
    )


def decode_messages(body: bytes, *, strict: bool) -> MessagesRequest:
    """Decode and validate a ``/v1/messages`` body; every failure is a 400 ``WireError`` naming the field.

    ``strict`` refuses unknown top-level fields, as the API does (it answers ``Extra inputs are not
    permitted``); the gateway decodes leniently and gives every field one fate on a translated route
    (``wire.anthropic_fates``: carried, mapped, dropped or refused).
    """
    try:
        return _MESSAGES.decode(body, strict=strict)
    except WireError as exc:
        raise _block_type_error(exc) from exc


def decode_count_tokens(body: bytes, *, strict: bool) -> CountTokensRequest:
    """Decode a ``/v1/messages/count_tokens`` body."""
    try:
        return _COUNT.decode(body, strict=strict)
    except WireError as exc:
        raise _block_type_error(exc) from exc


def decode_head(body: bytes) -> MessagesHead:
    """The head of a ``/v1/messages`` body (model, max_tokens, stream, metadata), everything else skipped
    unparsed: what a passthrough reads before it forwards the bytes."""
    try:
        return _HEAD.decode(body)
    except msgspec.ValidationError as exc:
        raise validation_error(exc, body, _ENUMS) from exc
    except msgspec.DecodeError as exc:
        raise json_error(exc, body) from exc
    except RecursionError:
        raise nested_too_deeply() from None


def head_of(obj: dict[str, Any], body: bytes) -> MessagesHead:
    """:func:`decode_head` of a body already parsed to ``obj`` (the same 400s): the body is not read twice."""
    try:
        return msgspec.convert(obj, MessagesHead)
    except msgspec.ValidationError as exc:
        raise validation_error(exc, body, _ENUMS) from exc


def from_chat_body(chat: dict[str, Any]) -> dict[str, Any]:
    """A workload's or a probe's simple chat body (bench, monitor) said in Anthropic's Messages API: system
    messages → ``system``, the turns as they are (text content), ``max_tokens`` (required there; the
    workload's, else 1024), ``stream``, ``temperature``. Nothing else a workload sets has a place there."""
    system = [m["content"] for m in chat.get("messages", ()) if m.get("role") == "system"]
    messages = [
        {"role": m["role"], "content": m["content"]} for m in chat.get("messages", ()) if m.get("role") != "system"
    ]
    body: dict[str, Any] = {
        "model": chat["model"],
        "max_tokens": chat.get("max_tokens") or chat.get("max_completion_tokens") or 1024,
        "messages": messages,
    }
    if system:
        body["system"] = "\n".join(str(s) for s in system)
    for name in ("stream", "temperature"):
        if chat.get(name) is not None:
            body[name] = chat[name]
    return body
