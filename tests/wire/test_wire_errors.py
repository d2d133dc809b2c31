"""OpenAI error bodies: constructors, parsing of any upstream body, and how the SDK sees them."""

from __future__ import annotations

import msgspec
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sdk_stub import sdk_client

from tailgate.wire import WireError, chat_chunk_bytes, encode_event, parse_error_body
from tailgate.wire.errors import (
    MAX_ERROR_MESSAGE,
    authentication_error,
    bad_gateway,
    insufficient_quota,
    invalid_request,
    model_not_found,
    not_found,
    overloaded,
    permission_denied,
    rate_limited,
    server_error,
    timeout,
)


@pytest.mark.parametrize(
    ("error", "status", "type_", "code", "sdk_class"),
    [
        (invalid_request("bad", "n"), 400, "invalid_request_error", None, openai.BadRequestError),
        (authentication_error(), 401, "invalid_request_error", "invalid_api_key", openai.AuthenticationError),
        (permission_denied(), 403, "request_forbidden", None, openai.PermissionDeniedError),
        (not_found("Invalid URL (POST /v1/x)"), 404, "invalid_request_error", None, openai.NotFoundError),
        (model_not_found("gpt-x"), 404, "invalid_request_error", "model_not_found", openai.NotFoundError),
        (rate_limited(), 429, "requests", "rate_limit_exceeded", openai.RateLimitError),
        (rate_limited(limit="tokens"), 429, "tokens", "rate_limit_exceeded", openai.RateLimitError),
        (insufficient_quota(), 429, "insufficient_quota", "insufficient_quota", openai.RateLimitError),
        (server_error(), 500, "server_error", None, openai.InternalServerError),
        (bad_gateway(), 502, "server_error", "bad_gateway", openai.InternalServerError),
        (overloaded(), 503, "server_error", "overloaded", openai.InternalServerError),
        (timeout(), 504, "server_error", "timeout", openai.InternalServerError),
    ],
)
def test_constructors_raise_the_right_sdk_error(
    error: WireError,
    status: int,
    type_: str,
    code: str | None,
    sdk_class: type[openai.APIStatusError],
) -> None:
    """Each constructor's status/type/code reach an SDK client as the matching exception class."""
    assert (error.status, error.type, error.code) == (status, type_, code)
    with sdk_client(error.status, error.body()) as client, pytest.raises(sdk_class) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == status
    assert (info.value.type, info.value.code, info.value.param) == (type_, code, error.param)
    assert error.message in info.value.message


def test_body_always_has_four_keys() -> None:
    """The body has message, type, param and code, the last two as null when unset."""
    assert msgspec.json.decode(server_error("boom").body()) == {
        "error": {"message": "boom", "type": "server_error", "param": None, "code": None}
    }
    assert msgspec.json.decode(invalid_request("x", "n").body()) == invalid_request("x", "n").to_dict()


def test_model_not_found_uses_openai_wording() -> None:
    """The 404 for an unknown model quotes the model the way api.openai.com does."""
    assert model_not_found("gpt-x").message == "The model `gpt-x` does not exist or you do not have access to it."


def test_sse_error_frame_makes_the_sdk_raise() -> None:
    """A stream ending with sse_frame() raises APIError in the SDK after the chunks before it."""
    error = overloaded("shed")
    stream = encode_event(chat_chunk_bytes("c", 1, "m", "partial")) + error.sse_frame()
    assert error.sse_frame().startswith(b"event: error\ndata: {")
    received: list[str] = []
    with sdk_client(200, stream, "text/event-stream") as client:
        chunks = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
        with pytest.raises(openai.APIError) as info:
            received.extend(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert received == ["partial"]
    assert info.value.message == "shed"
    assert (info.value.type, info.value.code) == ("server_error", "overloaded")


@pytest.mark.parametrize(
    ("status", "body", "message", "type_", "code", "param"),
    [
        (
            400,
            b'{"error":{"message":"bad n","type":"invalid_request_error","param":"n","code":null}}',
            "bad n",
            "invalid_request_error",
            None,
            "n",
        ),
        (
            400,
            b'{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}',
            "too long",
            "BadRequestError",
            "400",
            None,
        ),
        (429, b'{"code":1302,"msg":"\xe8\xb6\x85\xe9\x99\x90"}', "超限", "requests", "1302", None),
        (500, b'{"error":"model crashed","type":"internal"}', "model crashed", "internal", None, None),
        (422, b'{"detail":"field required"}', "field required", "invalid_request_error", None, None),
        (
            429,
            b'[{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}]',
            "quota",
            "requests",
            "429",
            None,
        ),
        (
            502,
            b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
            "502 Bad Gateway",
            "server_error",
            None,
            None,
        ),
        (
            503,
            b"upstream connect error\n  or disconnect",
            "upstream connect error or disconnect",
            "server_error",
            None,
            None,
        ),
        (500, b"", "upstream returned HTTP 500", "server_error", None, None),
        (500, b"\xff\xfe oops", "\ufffd\ufffd oops", "server_error", None, None),
        (400, b'{"error":{"type":"x"}}', '{"error":{"type":"x"}}', "invalid_request_error", None, None),
        (500, b"42", "42", "server_error", None, None),
    ],
)
def test_parse_error_body_variants(
    status: int, body: bytes, message: str, type_: str, code: str | None, param: str | None
) -> None:
    """OpenAI, vLLM, Zhipu-style, TGI, FastAPI, Google, HTML and plain-text bodies all parse."""
    error = parse_error_body(status, body)
    assert (error.status, error.message, error.type, error.code, error.param) == (
        status,
        message,
        type_,
        code,
        param,
    )


def test_parse_error_body_clips_huge_bodies() -> None:
    """A huge body (JSON or not) yields a clipped message, never the whole body."""
    huge_json = msgspec.json.encode({"error": {"message": "x" * 5000}})
    assert len(parse_error_body(500, huge_json).message) == MAX_ERROR_MESSAGE
    huge_text = b"y" * 10_000_000
    assert len(parse_error_body(502, huge_text).message) == MAX_ERROR_MESSAGE


def test_parse_error_body_redacts_secrets() -> None:
    """A key echoed by the upstream is masked before the error can reach a client or a log."""
    body = b'{"error":{"message":"Incorrect API key provided: sk-live-123","code":"invalid_api_key"}}'
    error = parse_error_body(401, body, redact=("sk-live-123",))
    assert "sk-live-123" not in error.message
    assert error.message == "Incorrect API key provided: ***"


@given(status=st.integers(100, 599), body=st.binary(max_size=300) | st.text(max_size=100).map(str.encode))
def test_parse_error_body_never_raises(status: int, body: bytes) -> None:
    """Any status and any bytes give a WireError with that status and a non-empty message."""
    error = parse_error_body(status, body)
    assert error.status == status
    assert error.message


def test_redacted_secret_is_gone_from_every_rendering() -> None:
    """A key echoed by the upstream appears in neither message, str(), repr(), args nor the body."""
    from tailgate.wire.errors import parse_error_body

    canary = "sk-canary-0123456789"
    body = (
        '{"error": {"message": "bad key ' + canary + '", "type": "x", "param": "' + canary + '", "code": null}}'
    ).encode()
    err = parse_error_body(401, body, redact=(canary,))
    for text in (err.message, str(err), repr(err), str(err.args), err.body().decode(), err.param or ""):
        assert canary not in text
    assert "***" in err.message
