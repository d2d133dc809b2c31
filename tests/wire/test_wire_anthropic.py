"""Anthropic's Messages API types: decoding with errors that name the field, events, errors, SDK shapes."""

from __future__ import annotations

from typing import Any

import anthropic
import msgspec
import pytest

from tailgate.wire import anthropic as wa
from tailgate.wire.errors import WireError, invalid_request, overloaded, rate_limited

FULL = {
    "model": "claude-sonnet",
    "max_tokens": 512,
    "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "need the weather", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}},
            ],
        },
    ],
    "tools": [{"name": "weather", "description": "Weather now", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "metadata": {"user_id": "u-hash"},
    "stop_sequences": ["END"],
    "stream": True,
    "temperature": 0.5,
    "top_k": 20,
}


def _decode(body: dict[str, Any], strict: bool = True) -> wa.MessagesRequest:
    return wa.decode_messages(msgspec.json.encode(body), strict=strict)


def _error(body: dict[str, Any] | bytes, strict: bool = True) -> WireError:
    raw = body if isinstance(body, bytes) else msgspec.json.encode(body)
    with pytest.raises(WireError) as info:
        wa.decode_messages(raw, strict=strict)
    return info.value


def test_a_full_request_decodes_every_block_type() -> None:
    """Every documented request block type decodes into its Struct; fields keep their values."""
    req = _decode(FULL)
    assert req.max_tokens == 512
    assert req.stream
    assert req.top_k == 20
    assert isinstance(req.system, list)
    assert req.system[0].cache_control == {"type": "ephemeral"}
    kinds = [type(b).__name__ for m in req.messages if isinstance(m.content, list) for b in m.content]
    assert kinds == [
        "TextBlock",
        "ImageBlock",
        "ThinkingBlock",
        "RedactedThinkingBlock",
        "ToolUseBlock",
        "ToolResultBlock",
        "DocumentBlock",
    ]
    assert req.thinking == wa.ThinkingConfig(type="enabled", budget_tokens=1024)
    assert req.tool_choice == wa.ToolChoice(type="auto", disable_parallel_tool_use=True)
    assert req.metadata == wa.Metadata(user_id="u-hash")


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"model": "m", "messages": []}, "max_tokens", "'max_tokens' is a required property"),
        ({"model": "m", "max_tokens": 0, "messages": []}, "max_tokens", "less than the minimum of 1"),
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "tool", "content": "x"}]},
            "messages.0.role",
            "'user', 'assistant', 'system'",
        ),
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "search_result"}]}]},
            "messages.0.content.0.type",
            "'search_result' content blocks are not supported",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t"}]}],
            },
            "messages.0.content.0.name",
            "'name' is a required property",
        ),
        ({"model": "m", "max_tokens": 1, "messages": [], "temperature": 1.5}, "temperature", "maximum of 1"),
        ({"model": "m", "max_tokens": 1, "messages": [], "thinking": {"type": "on"}}, "thinking.type", "'on'"),
        ({"model": "m", "max_tokens": 1, "messages": [], "extra": 1}, "extra", "Unrecognized request argument"),
    ],
)
def test_bad_requests_are_400s_naming_the_field(body: dict[str, Any], param: str, words: str) -> None:
    """Each malformed body is a 400 whose param is the field's path and whose message says what is wrong."""
    err = _error(body)
    assert err.status == 400
    assert err.param == param
    assert words in err.message


def test_lenient_mode_ignores_unknown_top_level_fields() -> None:
    """strict=False skips an unknown field (a passthrough forwards the bytes anyway)."""
    req = _decode({"model": "m", "max_tokens": 1, "messages": [], "future_field": {"x": 1}}, strict=False)
    assert req.model == "m"


def test_not_json_is_a_400_saying_where() -> None:
    """A body that is not JSON says where parsing stopped."""
    err = _error(b'{"model": ')
    assert err.status == 400
    assert "not valid JSON" in err.message


def test_the_head_decoder_skips_blocks_it_does_not_know() -> None:
    """decode_head reads model/max_tokens/stream and leaves unknown block types alone (passthrough)."""
    body = {"model": "m", "max_tokens": 9, "stream": True, "messages": [{"role": "user", "content": [{"type": "new"}]}]}
    head = wa.decode_head(msgspec.json.encode(body))
    assert (head.model, head.max_tokens, head.stream) == ("m", 9, True)
    with pytest.raises(WireError) as info:
        wa.decode_head(b'{"model": "m"}')
    assert info.value.param == "max_tokens"


def test_count_tokens_needs_no_max_tokens() -> None:
    """/v1/messages/count_tokens bodies have no max_tokens, and refuse unknown blocks the same way."""
    req = wa.decode_count_tokens(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}', strict=True)
    assert req.messages[0].content == "hi"
    with pytest.raises(WireError) as info:
        wa.decode_count_tokens(b'{"model":"m","messages":[{"role":"user","content":[{"type":"x"}]}]}', strict=True)
    assert info.value.param == "messages.0.content.0.type"


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (invalid_request("bad"), 400, "invalid_request_error"),
        (WireError(401, "no key"), 401, "authentication_error"),
        (WireError(402, "pay"), 402, "billing_error"),
        (WireError(403, "no"), 403, "permission_error"),
        (WireError(404, "none"), 404, "not_found_error"),
        (WireError(408, "slow"), 408, "invalid_request_error"),
        (WireError(413, "big"), 413, "request_too_large"),
        (rate_limited(), 429, "rate_limit_error"),
        (WireError(429, "quota", type="insufficient_quota"), 429, "billing_error"),
        (WireError(500, "bug"), 500, "api_error"),
        (WireError(502, "upstream"), 502, "api_error"),
        (overloaded(), 503, "overloaded_error"),
        (WireError(504, "late"), 504, "timeout_error"),
        (WireError(529, "busy"), 529, "overloaded_error"),
    ],
)
def test_error_types_follow_anthropics_status_table(error: WireError, status: int, kind: str) -> None:
    """error.type follows https://docs.anthropic.com/en/api/errors, and the status is kept."""
    assert error.status == status
    body = msgspec.json.decode(wa.error_body(error, request_id="req_1"))
    assert body == {"type": "error", "error": {"type": kind, "message": error.message}, "request_id": "req_1"}


def test_an_error_names_its_field_in_the_message() -> None:
    """Anthropic's error has no param: the field goes in front of the message when it is not already there."""
    body = msgspec.json.decode(wa.error_body(invalid_request("not supported here.", "tools.0.type")))
    assert body["error"]["message"] == "tools.0.type: not supported here."
    body = msgspec.json.decode(wa.error_body(invalid_request("'max_tokens' is a required property", "max_tokens")))
    assert body["error"]["message"] == "'max_tokens' is a required property"


def test_the_error_event_is_named_and_parses_as_the_sdk_error() -> None:
    """error_event is `event: error` with the error body the SDK raises from."""
    frame = wa.error_event(overloaded("busy"))
    assert frame.startswith(b"event: error\ndata: ")
    assert frame.endswith(b"\n\n")
    data = msgspec.json.decode(frame.split(b"data: ", 1)[1])
    assert data == {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}


def test_event_frames_name_their_type_and_round_trip() -> None:
    """Every event frame's `event:` name is its JSON type, and decode_event reads it back."""
    events: list[wa.StreamEvent] = [
        wa.ContentBlockStartEvent(index=0, content_block=wa.ToolUseBlock(id="t", name="f", input={})),
        wa.ContentBlockDeltaEvent(index=0, delta=wa.InputJsonDelta(partial_json='{"a"')),
        wa.ContentBlockStopEvent(index=0),
        wa.MessageDeltaEvent(
            delta=wa.MessageDelta(stop_reason="tool_use"), usage=wa.MessageDeltaUsage(output_tokens=3)
        ),
        wa.MessageStopEvent(),
        wa.PingEvent(),
    ]
    for event in events:
        frame = wa.event_frame(event)
        name, data = frame.removesuffix(b"\n\n").split(b"\n")
        assert name == b"event: " + msgspec.json.decode(data.removeprefix(b"data: "))["type"].encode()
        assert wa.decode_event(data.removeprefix(b"data: ")) == event


def test_a_message_response_is_what_the_sdk_parses() -> None:
    """A MessageResponse validates as the official SDK's Message model, blocks and usage included."""
    resp = wa.MessageResponse(
        id="msg_1",
        model="m",
        content=[
            wa.ThinkingBlock(thinking="hmm", signature=""),
            wa.TextBlock(text="Hi"),
            wa.ToolUseBlock(id="toolu_1", name="f", input={"a": 1}),
        ],
        stop_reason="tool_use",
        usage=wa.Usage(input_tokens=5, output_tokens=7, cache_read_input_tokens=3),
    )
    parsed = anthropic.types.Message.model_validate(msgspec.json.decode(msgspec.json.encode(resp)))
    assert [b.type for b in parsed.content] == ["thinking", "text", "tool_use"]
    assert parsed.stop_reason == "tool_use"
    assert parsed.usage.cache_read_input_tokens == 3


def test_public_names_exist() -> None:
    """Every name the three Anthropic modules export exists."""
    from tailgate.wire import anthropic_stream, anthropic_translate

    for module in (wa, anthropic_translate, anthropic_stream):
        for name in module.__all__:
            assert hasattr(module, name), name
