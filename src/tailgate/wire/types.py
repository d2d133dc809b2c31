"""OpenAI wire types: requests, responses and streamed chunks as msgspec Structs.

Requests use ``omit_defaults=True`` so a re-encoded request carries only what the client set.
Responses model OpenAI's distinction between *absent* and *null*: fields OpenAI always sends
(``finish_reason``, ``logprobs``, ``object``) default to a value that is always encoded, and fields it
sends only sometimes (``usage``, ``system_fingerprint``) default to ``msgspec.UNSET`` and are omitted
until set. Hand-written clients index ``chunk["choices"][0]["finish_reason"]`` directly, so dropping a
null there (which ``omit_defaults`` would do) breaks them.

``decode_request`` validates a request body once at the edge; ``chat_chunk_bytes`` and
``completion_chunk_bytes`` are the simulator's per-token hot path.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args, overload

import msgspec
from msgspec import UNSET, Meta, UnsetType

from tailgate.wire._decode import RequestDecoder
from tailgate.wire.responses import ResponseRequest

__all__ = [
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatMessage",
    "Choice",
    "ChunkChoice",
    "Completion",
    "CompletionChoice",
    "CompletionRequest",
    "CompletionTokensDetails",
    "Delta",
    "Embedding",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "EmbeddingUsage",
    "FunctionCall",
    "Model",
    "ModelList",
    "PromptTokensDetails",
    "Request",
    "RequestKind",
    "Role",
    "StreamOptions",
    "ToolCall",
    "Usage",
    "chat_chunk_bytes",
    "completion_chunk_bytes",
    "decode_request",
    "encode",
    "request_decoder",
]

# OpenAI's documented ranges; msgspec checks them while decoding, so a bad value costs nothing extra.
_Temperature = Annotated[float, Meta(ge=0, le=2)]
_TopP = Annotated[float, Meta(ge=0, le=1)]
_Penalty = Annotated[float, Meta(ge=-2, le=2)]
_PositiveInt = Annotated[int, Meta(ge=1)]
_NonNegativeInt = Annotated[int, Meta(ge=0)]
_ModelName = Annotated[str, Meta(min_length=1)]

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]

# Content parts stay plain dicts: providers add part types OpenAI lacks (DashScope's `video_url`,
# `cache_control` on OpenRouter), and a tagged union would refuse them. Readers use part.get("text").
ContentPart = dict[str, Any]

# A prompt or embedding input: a string, strings, a token list, or token lists. msgspec allows one
# array-like member per union, so the list is typed loosely and decode_request checks it is homogeneous.
PromptInput = str | list[str | int | list[int]]


class FunctionCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A tool call's function; in stream deltas either field may be missing."""

    name: str | None = None
    arguments: str | None = None


class ToolCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A tool call in a message (``id``, ``type``, ``function``) or a delta (plus ``index``)."""

    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: FunctionCall | None = None


class ChatMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One chat message, in a request or as a response choice's ``message``."""

    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    refusal: str | None = None


class StreamOptions(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``stream_options``: the gateway and bench set include_usage to read exact token counts."""

    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None
    """vLLM / SGLang: usage (running totals) on every chunk, not only on the final one."""


class _Sampling(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Fields shared by /v1/chat/completions and /v1/completions."""

    model: _ModelName
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    temperature: _Temperature | None = None
    top_p: _TopP | None = None
    n: Annotated[int, Meta(ge=1, le=128)] | None = None
    seed: int | None = None
    user: str | None = None
    presence_penalty: _Penalty | None = None
    frequency_penalty: _Penalty | None = None
    logit_bias: dict[str, Annotated[float, Meta(ge=-100, le=100)]] | None = None
    # Vendor extensions accepted by vLLM, SGLang and Chinese MaaS providers (DashScope, Volcengine,
    # SiliconFlow, ...). Declared so strict mode does not refuse a real client that sends them.
    top_k: int | None = None
    repetition_penalty: Annotated[float, Meta(gt=0)] | None = None
    min_p: _TopP | None = None
    ignore_eos: bool | None = None
    """vLLM / SGLang: never stop early; decode exactly ``max_tokens`` (load testers send it)."""
    min_tokens: _NonNegativeInt | None = None
    """vLLM / SGLang: do not stop (EOS or stop string) before this many tokens."""


class ChatCompletionRequest(_Sampling, kw_only=True, omit_defaults=True):
    """POST /v1/chat/completions body."""

    messages: Annotated[list[ChatMessage], Meta(min_length=1)]
    max_tokens: _PositiveInt | None = None
    max_completion_tokens: _PositiveInt | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    reasoning_effort: str | None = None
    service_tier: str | None = None
    # Newer or deprecated OpenAI parameters the official SDKs still send; typed loosely on purpose.
    modalities: list[str] | None = None
    audio: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None
    web_search_options: dict[str, Any] | None = None
    verbosity: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    # Thinking switches: DashScope/SiliconFlow `enable_thinking` + `thinking_budget`, Volcengine/Zhipu
    # `thinking: {"type": "enabled"}`, vLLM/SGLang `chat_template_kwargs: {"enable_thinking": false}`.
    enable_thinking: bool | None = None
    thinking_budget: _PositiveInt | None = None
    thinking: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class CompletionRequest(_Sampling, kw_only=True, omit_defaults=True):
    """POST /v1/completions (legacy) body."""

    prompt: PromptInput
    max_tokens: _NonNegativeInt | None = None
    echo: bool | None = None
    logprobs: Annotated[int, Meta(ge=0, le=5)] | None = None
    suffix: str | None = None
    best_of: _PositiveInt | None = None


class EmbeddingRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """POST /v1/embeddings body."""

    model: _ModelName
    input: PromptInput
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: _PositiveInt | None = None
    user: str | None = None


# ---- responses ---------------------------------------------------------------------------------


class PromptTokensDetails(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``usage.prompt_tokens_details``."""

    cached_tokens: int | None = None
    audio_tokens: int | None = None


class CompletionTokensDetails(msgspec.Struct, kw_only=True, omit_defaults=True):
    """``usage.completion_tokens_details``."""

    reasoning_tokens: int | None = None
    audio_tokens: int | None = None
    accepted_prediction_tokens: int | None = None
    rejected_prediction_tokens: int | None = None


class Usage(msgspec.Struct, kw_only=True):
    """Token counts the server reports; the source of truth for output tokens (docs/metrics.md)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | UnsetType | None = UNSET
    completion_tokens_details: CompletionTokensDetails | UnsetType | None = UNSET
    # DeepSeek's own names for the cached and uncached parts of prompt_tokens (its context cache).
    prompt_cache_hit_tokens: int | UnsetType = UNSET
    prompt_cache_miss_tokens: int | UnsetType = UNSET


class Choice(msgspec.Struct, kw_only=True):
    """One choice of a non-streamed chat completion."""

    index: int = 0
    message: ChatMessage
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None = None


class ChatCompletion(msgspec.Struct, kw_only=True):
    """Non-streamed chat completion."""

    id: str
    object: str = "chat.completion"
    created: int
    model: str
    system_fingerprint: str | UnsetType | None = UNSET
    choices: list[Choice]
    usage: Usage | UnsetType | None = UNSET
    service_tier: str | UnsetType | None = UNSET


class Delta(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The incremental message of a stream chunk; absent fields are left out, as OpenAI does."""

    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    refusal: str | None = None


class ChunkChoice(msgspec.Struct, kw_only=True):
    """One choice of a ``chat.completion.chunk``."""

    index: int = 0
    delta: Delta
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(msgspec.Struct, kw_only=True):
    """One streamed ``chat.completion.chunk``; the usage-only final chunk has ``choices == []``."""

    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | UnsetType | None = UNSET
    choices: list[ChunkChoice]
    usage: Usage | UnsetType | None = UNSET


class CompletionChoice(msgspec.Struct, kw_only=True):
    """One choice of a legacy ``text_completion`` (streamed or not)."""

    text: str
    index: int = 0
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None = None


class Completion(msgspec.Struct, kw_only=True):
    """Legacy ``text_completion`` response or stream chunk."""

    id: str
    object: str = "text_completion"
    created: int
    model: str
    system_fingerprint: str | UnsetType | None = UNSET
    choices: list[CompletionChoice]
    usage: Usage | UnsetType | None = UNSET


class Embedding(msgspec.Struct, kw_only=True):
    """One embedding vector (a float list, or base64 of little-endian float32 when asked)."""

    object: str = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingUsage(msgspec.Struct, kw_only=True):
    """Embeddings report input tokens only."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(msgspec.Struct, kw_only=True):
    """POST /v1/embeddings response."""

    object: str = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class Model(msgspec.Struct, kw_only=True):
    """One entry of GET /v1/models."""

    id: str
    object: str = "model"
    created: int = 0
    owned_by: str


class ModelList(msgspec.Struct, kw_only=True):
    """GET /v1/models response."""

    object: str = "list"
    data: list[Model]


# ---- decoding ----------------------------------------------------------------------------------

RequestKind = Literal["chat", "completions", "embeddings", "responses"]
Request = ChatCompletionRequest | CompletionRequest | EmbeddingRequest | ResponseRequest

_ENUMS = {"role": get_args(Role), "encoding_format": ("float", "base64")}
_DECODERS: dict[str, RequestDecoder[Any]] = {
    "chat": RequestDecoder(ChatCompletionRequest, _ENUMS),
    "completions": RequestDecoder(CompletionRequest, _ENUMS, prompt_field="prompt"),
    "embeddings": RequestDecoder(EmbeddingRequest, _ENUMS, prompt_field="input"),
    "responses": RequestDecoder(ResponseRequest, _ENUMS),
}


def request_decoder(kind: RequestKind) -> RequestDecoder[Any]:
    """The decoder :func:`decode_request` uses for ``kind`` (its ``decode(body, strict=...)``), for a caller that
    decodes one kind many times."""
    return _DECODERS[kind]


@overload
def decode_request(kind: Literal["chat"], body: bytes, *, strict: bool) -> ChatCompletionRequest: ...
@overload
def decode_request(kind: Literal["completions"], body: bytes, *, strict: bool) -> CompletionRequest: ...
@overload
def decode_request(kind: Literal["embeddings"], body: bytes, *, strict: bool) -> EmbeddingRequest: ...
@overload
def decode_request(kind: Literal["responses"], body: bytes, *, strict: bool) -> ResponseRequest: ...
def decode_request(kind: RequestKind, body: bytes, *, strict: bool) -> Request:
    """Decode and validate a request body; every failure is a 400 ``WireError`` naming the field.

    ``strict=True`` refuses unknown top-level fields as OpenAI does (``Unrecognized request argument
    supplied: x``); ``strict=False`` ignores them, for a gateway that forwards vendor fields as they
    came. Nested objects (messages, tool calls) are always lenient: real clients put vendor fields
    there (DeepSeek's ``prefix``, Moonshot's ``partial``) and OpenAI's own message is top-level only.
    Unknown fields are not kept on the returned struct; forward the original body to pass them on.
    """
    request: Request = _DECODERS[kind].decode(body, strict=strict)
    return request


# ---- encoding ----------------------------------------------------------------------------------

_encoder = msgspec.json.Encoder()


def encode(obj: object) -> bytes:
    """JSON-encode a wire struct (or any msgspec-encodable value)."""
    return _encoder.encode(obj)


def chat_chunk_bytes(
    id: str,  # shadows the builtin: the wire field is called `id`
    created: int,
    model: str,
    content: str | None,
    *,
    role: str | None = None,
    finish_reason: str | None = None,
    usage: Usage | None = None,
    index: int = 0,
    reasoning_content: str | None = None,
    tool_calls: list[ToolCall] | None = None,
) -> bytes:
    """One ``chat.completion.chunk`` as JSON: the simulator's per-token hot path (~0.4 µs).

    With ``usage`` and no content, role, reasoning or finish, ``choices`` is ``[]``: OpenAI's final
    usage chunk. Building the Structs measured faster than concatenating pre-escaped bytes.
    """
    if (
        usage is not None
        and content is None
        and role is None
        and reasoning_content is None
        and finish_reason is None
        and tool_calls is None
    ):
        return _encoder.encode(ChatCompletionChunk(id=id, created=created, model=model, choices=[], usage=usage))
    if tool_calls is None:
        delta = Delta(role=role, content=content, reasoning_content=reasoning_content)
    else:
        delta = Delta(role=role, content=content, reasoning_content=reasoning_content, tool_calls=tool_calls)
    choice = ChunkChoice(index=index, delta=delta, finish_reason=finish_reason)
    chunk = ChatCompletionChunk(id=id, created=created, model=model, choices=[choice])
    if usage is not None:
        chunk.usage = usage
    return _encoder.encode(chunk)


def completion_chunk_bytes(
    id: str,  # shadows the builtin: the wire field is called `id`
    created: int,
    model: str,
    text: str | None,
    *,
    finish_reason: str | None = None,
    usage: Usage | None = None,
    index: int = 0,
) -> bytes:
    """One legacy ``text_completion`` stream chunk as JSON.

    ``text=None`` with ``usage`` and no finish gives the usage-only chunk (``choices == []``);
    otherwise a missing text is sent as ``""`` because the SDK requires the field.
    """
    if usage is not None and text is None and finish_reason is None:
        return _encoder.encode(Completion(id=id, created=created, model=model, choices=[], usage=usage))
    choice = CompletionChoice(text=text or "", index=index, finish_reason=finish_reason)
    chunk = Completion(id=id, created=created, model=model, choices=[choice])
    if usage is not None:
        chunk.usage = usage
    return _encoder.encode(chunk)
