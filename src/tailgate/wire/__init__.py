"""OpenAI wire format: request/response types, SSE framing and error bodies. No I/O.

The names below are the layer's public face; the error constructors live in
:mod:`tailgate.wire.errors` and every struct in :mod:`tailgate.wire.types`.
"""

from tailgate.wire._decode import parse_json
from tailgate.wire.errors import WireError, parse_error_body
from tailgate.wire.sse import (
    DONE_FRAME,
    KEEPALIVE_FRAME,
    SSEDecoder,
    SSEEvent,
    SSEProtocolError,
    encode_event,
)
from tailgate.wire.types import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    Completion,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResponse,
    Model,
    ModelList,
    Usage,
    chat_chunk_bytes,
    completion_chunk_bytes,
    decode_request,
    encode,
)

__all__ = [
    "DONE_FRAME",
    "KEEPALIVE_FRAME",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatMessage",
    "Completion",
    "CompletionRequest",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "Model",
    "ModelList",
    "SSEDecoder",
    "SSEEvent",
    "SSEProtocolError",
    "Usage",
    "WireError",
    "chat_chunk_bytes",
    "completion_chunk_bytes",
    "decode_request",
    "encode",
    "encode_event",
    "parse_error_body",
    "parse_json",
]
