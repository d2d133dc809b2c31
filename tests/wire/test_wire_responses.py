"""Response shapes: what we encode is what the official openai SDK parses, byte for byte where it matters."""

from __future__ import annotations

from typing import Any

import msgspec
import openai.types
import openai.types.chat
import pytest
from sdk_stub import sdk_client

from tailgate.wire import (
    DONE_FRAME,
    KEEPALIVE_FRAME,
    ChatCompletion,
    ChatCompletionChunk,
    Completion,
    EmbeddingResponse,
    Model,
    ModelList,
    Usage,
    chat_chunk_bytes,
    completion_chunk_bytes,
    encode,
    encode_event,
)
from tailgate.wire.types import (
    ChatMessage,
    Choice,
    ChunkChoice,
    CompletionChoice,
    CompletionTokensDetails,
    Delta,
    Embedding,
    EmbeddingUsage,
    PromptTokensDetails,
)

USAGE = Usage(
    prompt_tokens=12,
    completion_tokens=3,
    total_tokens=15,
    prompt_tokens_details=PromptTokensDetails(cached_tokens=8),
    completion_tokens_details=CompletionTokensDetails(reasoning_tokens=1),
)
ChunkArgs = dict[str, Any]
CHUNKS: list[tuple[str | None, ChunkArgs, ChatCompletionChunk]] = [
    (
        "",
        {"role": "assistant"},
        ChatCompletionChunk(
            id="c", created=1, model="m", choices=[ChunkChoice(delta=Delta(role="assistant", content=""))]
        ),
    ),
    (
        'héllo "€"\n',
        {},
        ChatCompletionChunk(id="c", created=1, model="m", choices=[ChunkChoice(delta=Delta(content='héllo "€"\n'))]),
    ),
    (
        None,
        {"reasoning_content": "hmm", "index": 1},
        ChatCompletionChunk(
            id="c", created=1, model="m", choices=[ChunkChoice(index=1, delta=Delta(reasoning_content="hmm"))]
        ),
    ),
    (
        None,
        {"finish_reason": "stop"},
        ChatCompletionChunk(id="c", created=1, model="m", choices=[ChunkChoice(delta=Delta(), finish_reason="stop")]),
    ),
    (None, {"usage": USAGE}, ChatCompletionChunk(id="c", created=1, model="m", choices=[], usage=USAGE)),
    (
        None,
        {"finish_reason": "length", "usage": USAGE},
        ChatCompletionChunk(
            id="c",
            created=1,
            model="m",
            choices=[ChunkChoice(delta=Delta(), finish_reason="length")],
            usage=USAGE,
        ),
    ),
]


@pytest.mark.parametrize(("content", "kwargs", "struct"), CHUNKS)
def test_chat_chunk_bytes_matches_struct_and_sdk(
    content: str | None, kwargs: ChunkArgs, struct: ChatCompletionChunk
) -> None:
    """chat_chunk_bytes equals encoding the Struct, and the SDK's ChatCompletionChunk parses it."""
    raw = chat_chunk_bytes("c", 1, "m", content, **kwargs)
    assert raw == encode(struct)
    parsed = openai.types.chat.ChatCompletionChunk.model_validate_json(raw)
    assert parsed.object == "chat.completion.chunk"
    assert msgspec.json.decode(raw, type=ChatCompletionChunk) == struct


def test_usage_chunk_has_empty_choices_and_usage() -> None:
    """The final usage chunk carries `choices: []` and the usage, as OpenAI sends it."""
    parsed = openai.types.chat.ChatCompletionChunk.model_validate_json(chat_chunk_bytes("c", 1, "m", None, usage=USAGE))
    assert parsed.choices == []
    assert parsed.usage is not None
    assert (parsed.usage.completion_tokens, parsed.usage.total_tokens) == (3, 15)
    assert parsed.usage.prompt_tokens_details is not None
    assert parsed.usage.prompt_tokens_details.cached_tokens == 8


def test_always_present_nulls_are_sent() -> None:
    """finish_reason and logprobs are present as null (clients index them), usage is absent."""
    obj = msgspec.json.decode(chat_chunk_bytes("c", 1, "m", "x"))
    assert obj["choices"][0]["finish_reason"] is None
    assert obj["choices"][0]["logprobs"] is None
    assert "usage" not in obj
    assert obj["choices"][0]["delta"] == {"content": "x"}


@pytest.mark.parametrize(
    ("text", "kwargs", "choices"),
    [
        ("Hello", {"finish_reason": "stop"}, 1),
        (None, {"finish_reason": "length", "index": 2}, 1),
        (None, {"usage": USAGE}, 0),
    ],
)
def test_completion_chunk_bytes_parses_as_sdk_completion(text: str | None, kwargs: ChunkArgs, choices: int) -> None:
    """Legacy text_completion chunks validate as the SDK's Completion; the usage chunk has no choices.

    Only chunks with a finish_reason are validated strictly: the SDK's Completion model types it as
    non-null, yet OpenAI streams send null mid-stream, which the SDK's stream reader accepts (next test).
    """
    raw = completion_chunk_bytes("x", 1, "m", text, **kwargs)
    parsed = openai.types.Completion.model_validate_json(raw)
    assert raw == encode(msgspec.json.decode(raw, type=Completion))
    assert parsed.object == "text_completion"
    assert len(parsed.choices) == choices
    if choices:
        assert parsed.choices[0].text == (text or "")


def test_sdk_streams_legacy_completions_end_to_end() -> None:
    """The SDK's legacy completions stream reads our text_completion chunks, null finish included."""
    frames = [
        completion_chunk_bytes("x", 1, "m", "Hel"),
        completion_chunk_bytes("x", 1, "m", "lo", finish_reason="stop"),
        completion_chunk_bytes("x", 1, "m", None, usage=USAGE),
    ]
    stream = b"".join(encode_event(f) for f in frames) + DONE_FRAME
    with sdk_client(200, stream, "text/event-stream") as client:
        chunks = list(client.completions.create(model="m", prompt="x", stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Hello"
    assert chunks[1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None


def test_non_streamed_responses_parse_in_the_sdk() -> None:
    """ChatCompletion, Completion, EmbeddingResponse and Model encode to shapes the SDK validates."""
    chat = ChatCompletion(
        id="c",
        created=1,
        model="m",
        choices=[Choice(message=ChatMessage(role="assistant", content="hi"), finish_reason="stop")],
        usage=USAGE,
    )
    parsed = openai.types.chat.ChatCompletion.model_validate_json(encode(chat))
    assert parsed.choices[0].message.content == "hi"
    legacy = Completion(id="x", created=1, model="m", choices=[CompletionChoice(text="t", finish_reason="stop")])
    assert openai.types.Completion.model_validate_json(encode(legacy)).choices[0].text == "t"
    embeddings = EmbeddingResponse(
        data=[Embedding(index=0, embedding=[0.5, -1.0])],
        model="e",
        usage=EmbeddingUsage(prompt_tokens=2, total_tokens=2),
    )
    assert openai.types.CreateEmbeddingResponse.model_validate_json(encode(embeddings)).data[0].embedding == [
        0.5,
        -1.0,
    ]
    models = ModelList(data=[Model(id="m", created=0, owned_by="tailgate")])
    listed = msgspec.json.decode(encode(models))
    assert listed["object"] == "list"
    assert openai.types.Model.model_validate(listed["data"][0]).owned_by == "tailgate"


def test_sdk_streams_our_frames_end_to_end() -> None:
    """The SDK's streaming client reads our SSE frames, keep-alives included, into chunks and usage."""
    frames = [
        chat_chunk_bytes("c", 1, "m", "", role="assistant"),
        chat_chunk_bytes("c", 1, "m", "Hel"),
        chat_chunk_bytes("c", 1, "m", "lo"),
        chat_chunk_bytes("c", 1, "m", None, finish_reason="stop"),
        chat_chunk_bytes("c", 1, "m", None, usage=USAGE),
    ]
    stream = KEEPALIVE_FRAME + b"".join(encode_event(f) for f in frames) + DONE_FRAME
    with sdk_client(200, stream, "text/event-stream") as client:
        chunks = list(
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "x"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 15


def test_decoding_upstream_chunks_tolerates_extra_and_missing_fields() -> None:
    """An upstream chunk with vendor fields and no logprobs still decodes into our Struct."""
    raw = (
        b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","extra":1,'
        b'"choices":[{"index":0,"delta":{"content":"x","reasoning_content":null},"finish_reason":null}],'
        b'"usage":null}'
    )
    chunk = msgspec.json.decode(raw, type=ChatCompletionChunk)
    assert chunk.choices[0].delta.content == "x"
    assert chunk.usage is None
