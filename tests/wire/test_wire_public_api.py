"""The wire layer's public face changes only on purpose."""

from __future__ import annotations

import tailgate.wire


def test_public_names() -> None:
    """`tailgate.wire.__all__` is exactly this list, and every name in it exists."""
    assert sorted(tailgate.wire.__all__) == [
        "ChatCompletion",
        "ChatCompletionChunk",
        "ChatCompletionRequest",
        "ChatMessage",
        "Completion",
        "CompletionRequest",
        "DONE_FRAME",
        "EmbeddingRequest",
        "EmbeddingResponse",
        "KEEPALIVE_FRAME",
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
    for name in tailgate.wire.__all__:
        assert hasattr(tailgate.wire, name)
