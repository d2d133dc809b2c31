"""Request decoding: strict/lenient modes and OpenAI-style 400s that name the field."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tailgate.wire import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    WireError,
    decode_request,
)
from tailgate.wire.types import ChatMessage, RequestKind

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def body(**extra: Any) -> bytes:
    return msgspec.json.encode(CHAT | extra)


def fail(kind: RequestKind, raw: bytes, *, strict: bool = True) -> WireError:
    with pytest.raises(WireError) as info:
        decode_request(kind, raw, strict=strict)
    error = info.value
    assert error.status == 400
    assert error.type == "invalid_request_error"
    assert error.code is None
    return error


def test_minimal_chat_request() -> None:
    """A minimal body decodes to the exact public class with defaults in place."""
    request = decode_request("chat", body(), strict=True)
    assert type(request) is ChatCompletionRequest
    assert request.messages == [ChatMessage(role="user", content="hi")]
    assert request.stream is False
    assert request.max_tokens is None


def test_full_chat_request_with_vendor_fields_passes_strict() -> None:
    """OpenAI parameters and common vendor extensions are accepted even in strict mode."""
    raw = body(
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
        stop=["\n"],
        temperature=0.2,
        top_p=1,
        n=1,
        seed=7,
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        tool_choice="auto",
        response_format={"type": "json_object"},
        reasoning_effort="low",
        enable_thinking=False,
        thinking={"type": "disabled"},
        chat_template_kwargs={"enable_thinking": False},
        top_k=20,
        repetition_penalty=1.05,
        min_p=0.05,
        logit_bias={"50256": -100},
    )
    request = decode_request("chat", raw, strict=True)
    assert request.stream_options is not None
    assert request.stream_options.include_usage
    assert request.enable_thinking is False
    assert request.top_k == 20


def test_unknown_field_strict_is_refused_like_openai() -> None:
    """Strict mode refuses an unknown top-level field with OpenAI's message and param."""
    error = fail("chat", body(foo=1))
    assert error.message == "Unrecognized request argument supplied: foo"
    assert error.param == "foo"


def test_unknown_field_lenient_is_ignored() -> None:
    """Lenient mode ignores unknown fields: the result equals the decode without them."""
    assert decode_request("chat", body(foo=1, bar={"x": 2}), strict=False) == decode_request(
        "chat", body(), strict=True
    )


def test_unknown_nested_field_is_accepted_in_strict() -> None:
    """Vendor fields inside a message (DeepSeek `prefix`) do not trip strict mode."""
    raw = msgspec.json.encode({"model": "m", "messages": [{"role": "assistant", "content": "x", "prefix": True}]})
    assert decode_request("chat", raw, strict=True).messages[0].content == "x"


@pytest.mark.parametrize(
    ("raw", "param", "message"),
    [
        (b'{"messages": [{"role": "user"}]}', "model", "'model' is a required property"),
        (b'{"model": "m"}', "messages", "'messages' is a required property"),
        (body(messages=[]), "messages", "Invalid 'messages': empty array."),
        (body(messages=[{}]), "messages.0.role", "'role' is a required property - 'messages.0'"),
        (
            body(messages=[{"role": "robot"}]),
            "messages.0.role",
            "Invalid value for 'messages.0.role': 'robot'.",
        ),
        (
            body(messages=[{"role": "user", "content": 5}]),
            "messages.0.content",
            "'messages.0.content': expected a string or an array, but got an integer instead.",
        ),
        (
            body(max_tokens="5"),
            "max_tokens",
            "Invalid type for 'max_tokens': expected an integer, but got a string instead.",
        ),
        (body(n=-1), "n", "-1 is less than the minimum of 1 - 'n'"),
        (body(n=129), "n", "129 is greater than the maximum of 128 - 'n'"),
        (body(temperature=2.5), "temperature", "2.5 is greater than the maximum of 2 - 'temperature'"),
        (body(top_p=-0.1), "top_p", "-0.1 is less than the minimum of 0 - 'top_p'"),
        (body(presence_penalty=3), "presence_penalty", "3 is greater than the maximum of 2"),
        (body(stream="yes"), "stream", "expected a boolean, but got a string"),
        (body(stream_options={"include_usage": 1}), "stream_options.include_usage", "expected a boolean"),
        (body(stop=5), "stop", "expected a string or an array, but got an integer"),
        (body(logit_bias={"1": "x"}), "logit_bias", "expected a number, but got a string"),
        (body(model=""), "model", "Invalid 'model': empty string."),
    ],
)
def test_invalid_chat_bodies_name_the_field(raw: bytes, param: str, message: str) -> None:
    """Each validation failure is a 400 whose param is the dotted field path and message names it."""
    for strict in (True, False):
        error = fail("chat", raw, strict=strict)
        assert error.param == param
        assert message in error.message
        assert f"'{param.rsplit('.', 1)[0]}'" in error.message or param in error.message


def test_role_error_lists_supported_values() -> None:
    """A bad enum value lists what is allowed, so the client can fix it without the docs."""
    error = fail("chat", body(messages=[{"role": "robot"}]))
    assert "'developer'" in error.message


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (b'{"model": "m",\n  "messages": [}', "invalid character at line 2 column 16 (byte 30)"),
        (b'{"model": "m"', "unexpected end of input at line 1 column 14 (byte 13)"),
        (b'{"model": "m"} trailing', "trailing characters at line 1"),
        (b"\xff", "(byte 0)"),
    ],
)
def test_invalid_json_says_where(raw: bytes, where: str) -> None:
    """A body that is not JSON is a 400 saying so and where parsing stopped."""
    error = fail("chat", raw)
    assert error.message.startswith("The request body is not valid JSON")
    assert where in error.message
    assert error.param is None


def test_empty_body() -> None:
    """An empty body is a 400 saying a JSON object was expected."""
    assert "empty" in fail("chat", b"  ").message


def test_non_object_body() -> None:
    """A JSON array body is a 400 about the body itself, with no param."""
    error = fail("chat", b"[]", strict=True)
    assert error.message == "Invalid type for the request body: expected an object, but got an array instead."
    assert error.param is None
    assert fail("chat", b"[]", strict=False).message == error.message


@pytest.mark.parametrize("prompt", ["hi", ["a", "b"], [1, 2, 3], [[1, 2], [3]]])
def test_completion_prompt_shapes(prompt: object) -> None:
    """The legacy prompt may be a string, strings, tokens, or token lists."""
    raw = msgspec.json.encode({"model": "m", "prompt": prompt, "echo": True, "logprobs": 2, "best_of": 1})
    request = decode_request("completions", raw, strict=True)
    assert type(request) is CompletionRequest
    assert request.prompt == prompt


@pytest.mark.parametrize(
    ("prompt", "param", "message"),
    [
        (["a", 1], "prompt.1", "Invalid type for 'prompt.1': expected a string, but got an integer instead."),
        ([[1], 2], "prompt.1", "expected an array, but got an integer"),
        ([], "prompt", "Invalid 'prompt': empty array."),
        ([[1], []], "prompt.1", "empty array of tokens"),
        (True, "prompt", "Invalid type for 'prompt'"),
    ],
)
def test_completion_prompt_must_be_homogeneous(prompt: object, param: str, message: str) -> None:
    """Mixed or empty prompt lists are refused with the element's path, as OpenAI does."""
    error = fail("completions", msgspec.json.encode({"model": "m", "prompt": prompt}))
    assert error.param == param
    assert message in error.message


def test_completion_logprobs_is_an_integer() -> None:
    """Legacy logprobs is a count (0..5), unlike chat's boolean."""
    error = fail("completions", msgspec.json.encode({"model": "m", "prompt": "x", "logprobs": 6}))
    assert error.param == "logprobs"


def test_embedding_request() -> None:
    """Embedding requests decode; encoding_format is checked against its two values."""
    raw = msgspec.json.encode({"model": "e", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 8})
    request = decode_request("embeddings", raw, strict=True)
    assert type(request) is EmbeddingRequest
    assert request.input == ["a", "b"]
    error = fail("embeddings", msgspec.json.encode({"model": "e", "input": "x", "encoding_format": "hex"}))
    assert error.param == "encoding_format"
    assert "'float', 'base64'" in error.message
    assert fail("embeddings", msgspec.json.encode({"model": "e", "input": [1, "a"]})).param == "input.1"


def test_error_body_is_openai_shaped() -> None:
    """The raised error renders as the OpenAI error object with all four keys."""
    error = fail("chat", body(n=0))
    assert msgspec.json.decode(error.body()) == {
        "error": {
            "message": "0 is less than the minimum of 1 - 'n'",
            "type": "invalid_request_error",
            "param": "n",
            "code": None,
        }
    }


def test_reencoding_keeps_only_what_the_client_sent() -> None:
    """omit_defaults: a decoded request re-encodes to the fields the client set."""
    from tailgate.wire import encode

    request = decode_request("chat", body(temperature=0.5), strict=True)
    assert msgspec.json.decode(encode(request)) == CHAT | {"temperature": 0.5}
