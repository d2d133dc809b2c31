"""Anthropic Messages → OpenAI chat and back: requests, whole answers and the stream translator."""

from __future__ import annotations

from typing import Any

import anthropic
import msgspec
import pytest

from tailgate.wire import anthropic as wa
from tailgate.wire.anthropic_stream import StreamTranslator
from tailgate.wire.anthropic_translate import stop_reason, to_chat_request, to_message
from tailgate.wire.errors import WireError
from tailgate.wire.types import decode_request, encode


def _req(**fields: Any) -> wa.MessagesRequest:
    body = {"model": "claude", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], **fields}
    return wa.decode_messages(msgspec.json.encode(body), strict=True)


def _chat(req: wa.MessagesRequest, **options: Any) -> dict[str, Any]:
    """The translated request as the JSON the upstream gets, after proving it is a valid chat request."""
    body = encode(to_chat_request(req, **options))
    decode_request("chat", body, strict=False)
    out: dict[str, Any] = msgspec.json.decode(body)
    return out


def _refusal(req: wa.MessagesRequest) -> WireError:
    with pytest.raises(WireError) as info:
        to_chat_request(req)
    assert info.value.status == 400
    return info.value


def test_system_messages_and_sampling_fields_translate() -> None:
    """system, max_tokens, stop_sequences, temperature, top_p, top_k, metadata.user_id map to chat."""
    req = _req(
        system=[{"type": "text", "text": "Be terse."}, {"type": "text", "text": "Be kind."}],
        stop_sequences=["END", "STOP"],
        temperature=0.3,
        top_p=0.9,
        top_k=40,
        metadata={"user_id": "u-1"},
    )
    chat = _chat(req, model="upstream-id")
    assert chat["model"] == "upstream-id"
    assert chat["messages"] == [
        {"role": "system", "content": "Be terse.\n\nBe kind."},
        {"role": "user", "content": "hi"},
    ]
    assert (chat["max_tokens"], chat["stop"], chat["temperature"], chat["top_p"], chat["top_k"]) == (
        100,
        ["END", "STOP"],
        0.3,
        0.9,
        40,
    )
    assert chat["user"] == "u-1"
    assert "stream" not in chat


def test_a_stream_asks_for_usage() -> None:
    """A streamed request asks include_usage: message_delta carries the usage."""
    chat = _chat(_req(stream=True))
    assert chat["stream"] is True
    assert chat["stream_options"] == {"include_usage": True}


def test_tool_round_trip_turns_translate_in_openai_order() -> None:
    """tool_use → assistant tool_calls (+ thinking as reasoning_content); tool_result → tool messages first,
    the turn's other blocks after them, a tool result's image moved to that user message, is_error said."""
    image = {"type": "base64", "media_type": "image/png", "data": "AAAA"}
    req = _req(
        messages=[
            {"role": "user", "content": "weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "two calls", "signature": "s"},
                    {"type": "redacted_thinking", "data": "x"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Rome"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "here:"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "sunny"}, {"type": "image", "source": image}],
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no data", "is_error": True},
                ],
            },
        ]
    )
    messages = _chat(req)["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": "Checking.",
        "reasoning_content": "two calls",
        "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
            {"id": "toolu_2", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Rome"}'}},
        ],
    }
    assert messages[2] == {"role": "tool", "content": "sunny", "tool_call_id": "toolu_1"}
    assert messages[3] == {"role": "tool", "content": "Error: no data", "tool_call_id": "toolu_2"}
    assert messages[4] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "here:"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
    }


def test_images_translate_by_source() -> None:
    """base64 images become data URLs, url images their URL; a file id is refused naming the field."""
    req = _req(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
                    {"type": "text", "text": "what is it?"},
                ],
            }
        ]
    )
    parts = _chat(req)["messages"][0]["content"]
    assert parts[0] == {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}
    bad = _req(messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}])
    assert _refusal(bad).param == "messages.0.content.0.source.type"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}
                ]
            },
            "messages.0.content.0.type",
        ),
        ({"tools": [{"name": "web_search", "type": "web_search_20250305"}]}, "tools.0.type"),
        ({"mcp_servers": [{"type": "url", "url": "https://mcp.test", "name": "m"}]}, "mcp_servers"),
        ({"container": "c_1"}, "container"),
        ({"output_config": {"format": {"type": "json_schema"}}}, "output_config.format"),
        ({"tool_choice": {"type": "tool"}, "tools": [{"name": "f", "input_schema": {}}]}, "tool_choice.name"),
        (
            {"messages": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]},
            "messages.0.content.0.type",
        ),
    ],
)
def test_what_cannot_be_translated_is_a_400_naming_the_field(fields: dict[str, Any], param: str) -> None:
    """Documents, server tools, MCP servers, containers, structured output … are refused by name."""
    err = _refusal(_req(**fields))
    assert err.param == param
    assert msgspec.json.decode(wa.error_body(err))["error"]["message"].startswith(param)


@pytest.mark.parametrize(
    ("choice", "openai_choice", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}, None),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
    ],
)
def test_tools_and_tool_choice(choice: dict[str, Any], openai_choice: Any, parallel: bool | None) -> None:
    """Client tools become functions (input_schema → parameters); tool_choice maps as documented."""
    chat = _chat(
        _req(tools=[{"name": "f", "description": "d", "input_schema": {"type": "object"}}], tool_choice=choice)
    )
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
    ]
    assert chat["tool_choice"] == openai_choice
    assert chat.get("parallel_tool_calls") == parallel


@pytest.mark.parametrize(
    ("switch", "on", "off"),
    [
        ("thinking", {"thinking": {"type": "enabled", "budget_tokens": 2048}}, {"thinking": {"type": "disabled"}}),
        ("enable_thinking", {"enable_thinking": True, "thinking_budget": 2048}, {"enable_thinking": False}),
        (
            "chat_template_kwargs",
            {"chat_template_kwargs": {"enable_thinking": True}},
            {"chat_template_kwargs": {"enable_thinking": False}},
        ),
        ("reasoning_effort", {"reasoning_effort": "medium"}, {"reasoning_effort": "none"}),
        ("none", {}, {}),
    ],
)
def test_thinking_switches_the_providers_own_field(switch: Any, on: dict[str, Any], off: dict[str, Any]) -> None:
    """thinking enabled/disabled becomes the upstream's own switch; without `thinking` nothing is sent."""
    keys = ("thinking", "enable_thinking", "thinking_budget", "chat_template_kwargs", "reasoning_effort")

    def picked(chat: dict[str, Any]) -> dict[str, Any]:
        return {k: chat[k] for k in keys if k in chat}

    assert picked(_chat(_req(thinking={"type": "enabled", "budget_tokens": 2048}), thinking_switch=switch)) == on
    assert picked(_chat(_req(thinking={"type": "disabled"}), thinking_switch=switch)) == off
    on_without_budget = {k: v for k, v in on.items() if k != "thinking_budget"}
    if "thinking" in on_without_budget:
        on_without_budget["thinking"] = {"type": "enabled"}
    for kind in ("adaptive", "between_tools"):
        assert picked(_chat(_req(thinking={"type": kind}), thinking_switch=switch)) == on_without_budget
    assert picked(_chat(_req(), thinking_switch=switch)) == {}


# ---- whole answers -------------------------------------------------------------------------------


def _completion(message: dict[str, Any], finish: str = "stop", **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 1,
        "model": "up",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish, **extra}],
        "usage": {
            "prompt_tokens": 50,
            "completion_tokens": 9,
            "total_tokens": 59,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    }


def test_a_completion_becomes_a_message_the_sdk_parses() -> None:
    """reasoning_content → thinking, content → text, tool_calls → tool_use; usage splits out cache reads."""
    body = _completion(
        {
            "content": "Let me check.",
            "reasoning_content": "I should call weather.",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "w", "arguments": '{"c":"P"}'}}],
        },
        finish="tool_calls",
    )
    msg = to_message(body, model="claude")
    parsed = anthropic.types.Message.model_validate(msgspec.json.decode(msgspec.json.encode(msg)))
    assert parsed.id == "msg_abc"
    assert parsed.model == "claude"
    assert [b.type for b in parsed.content] == ["thinking", "text", "tool_use"]
    assert parsed.content[2].type == "tool_use"
    assert parsed.content[2].input == {"c": "P"}
    assert parsed.stop_reason == "tool_use"
    assert (parsed.usage.input_tokens, parsed.usage.cache_read_input_tokens, parsed.usage.output_tokens) == (18, 32, 9)


def test_deepseeks_cache_hit_field_counts_as_cache_read() -> None:
    """DeepSeek's prompt_cache_hit_tokens is read when prompt_tokens_details is absent."""
    body = _completion({"content": "x"})
    body["usage"] = {"prompt_tokens": 40, "completion_tokens": 1, "total_tokens": 41, "prompt_cache_hit_tokens": 30}
    assert to_message(body, model="m").usage == wa.Usage(input_tokens=10, output_tokens=1, cache_read_input_tokens=30)


@pytest.mark.parametrize(
    ("finish", "matched", "expected"),
    [
        ("stop", None, ("end_turn", None)),
        ("stop", "END", ("stop_sequence", "END")),
        ("stop", "OTHER", ("end_turn", None)),
        ("length", None, ("max_tokens", None)),
        ("tool_calls", None, ("tool_use", None)),
        ("function_call", None, ("tool_use", None)),
        ("content_filter", None, ("refusal", None)),
        (None, None, ("end_turn", None)),
    ],
)
def test_stop_reasons(finish: str | None, matched: str | None, expected: tuple[str, str | None]) -> None:
    """finish_reason maps to stop_reason; vLLM's stop_reason names the matched stop sequence."""
    assert stop_reason(finish, matched, ["END"]) == expected
    body = _completion({"content": "x"}, finish=finish or "stop", stop_reason=matched)
    msg = to_message(body, model="m", stop_sequences=["END"])
    assert (msg.stop_reason, msg.stop_sequence) == (expected if finish else ("end_turn", None))


@pytest.mark.parametrize(
    "body",
    [
        {"choices": []},
        {"choices": [{"message": "text"}]},
        _completion({"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{not json"}}]}),
        _completion({"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}]}),
        _completion({"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}),
    ],
)
def test_an_untranslatable_answer_is_a_502(body: dict[str, Any]) -> None:
    """An answer with no message, or tool arguments that are not a JSON object, is the upstream's fault: 502."""
    with pytest.raises(WireError) as info:
        to_message(body, model="m")
    assert info.value.status == 502


# ---- the stream translator (its sequence is checked in tests/conformance) ------------------------


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": choices,
        **extra,
    }


def _events(frames: list[bytes]) -> list[dict[str, Any]]:
    return [msgspec.json.decode(f.split(b"data: ", 1)[1]) for f in frames]


def test_without_upstream_usage_output_tokens_are_counted() -> None:
    """An upstream that sends no usage chunk: message_delta counts the token-carrying chunks."""
    t = StreamTranslator(model="m")
    frames = t.feed(_chunk({"role": "assistant", "content": ""}))
    for word in ("a", " b", " c"):
        frames += t.feed(_chunk({"content": word}))
    frames += t.feed(_chunk({}, finish="length")) + t.finish()
    delta = [e for e in _events(frames) if e["type"] == "message_delta"]
    assert delta == [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {"output_tokens": 3},
        }
    ]


def test_nothing_follows_the_end() -> None:
    """After finish() or fail() the translator emits nothing more."""
    t = StreamTranslator(model="m")
    t.feed(_chunk({"content": "x"}))
    assert t.finish()
    assert t.feed(_chunk({"content": "late"})) == []
    assert t.finish() == []
    assert t.fail(WireError(500, "x")) == []


def test_an_upstream_error_chunk_ends_the_stream_with_an_error_event() -> None:
    """vLLM's mid-stream {"error": {...}} chunk becomes Anthropic's error event, status kept in the type."""
    t = StreamTranslator(model="m")
    t.feed(_chunk({"content": "x"}))
    events = _events(t.feed({"error": {"message": "KV cache full", "type": "ServerError", "code": 503}}))
    assert events == [{"type": "error", "error": {"type": "overloaded_error", "message": "KV cache full"}}]
    assert t.ended


def test_interleaved_tool_arguments_end_the_stream_with_an_error() -> None:
    """Going back to an earlier (closed) tool call cannot be said in Anthropic's sequence: a 502 error event."""
    t = StreamTranslator(model="m")
    t.feed(_chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{"}}]}))
    t.feed(_chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]}))
    events = _events(t.feed(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]})))
    assert events[-1]["type"] == "error"
    assert events[-1]["error"]["type"] == "api_error"
    assert "interleaved" in events[-1]["error"]["message"]


def test_prompt_text_reads_everything_the_model_reads() -> None:
    """prompt_text (token estimates) holds system, text, tool inputs and results and tool definitions."""
    from tailgate.wire.anthropic_translate import prompt_text

    req = _req(
        system="SYS",
        tools=[{"name": "weather", "description": "DESC", "input_schema": {"type": "object"}}],
        messages=[
            {"role": "user", "content": "Q1"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "weather", "input": {"c": "IN"}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "OUT"}]}],
            },
        ],
    )
    text = prompt_text(req)
    for part in ("SYS", "Q1", '{"c":"IN"}', "OUT", "weather DESC"):
        assert part in text
    assert text.index("SYS") < text.index("Q1") < text.index("OUT")


def test_several_text_blocks_become_one_string() -> None:
    """A turn's text blocks (Claude Code sends reminders and the prompt apart) join by a newline into a string."""
    req = _req(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    assert _chat(req)["messages"] == [{"role": "user", "content": "a\nb"}]


def test_the_hot_path_delta_frames_equal_the_struct_encoding() -> None:
    """The stream translator's byte-built delta frames are exactly event_frame of the Structs (no drift)."""
    from tailgate.wire import anthropic_stream as at

    value = 'a "quoted" \\ line\nwith ünïcode'
    pairs: list[tuple[bytes, wa.TextDelta | wa.ThinkingDelta | wa.InputJsonDelta]] = [
        (at._TEXT_DELTA, wa.TextDelta(text=value)),
        (at._THINKING_DELTA, wa.ThinkingDelta(thinking=value)),
        (at._JSON_DELTA, wa.InputJsonDelta(partial_json=value)),
    ]
    for head, delta in pairs:
        for index in (0, 7, 12):
            assert at.delta_frame(index, head, value) == wa.event_frame(
                wa.ContentBlockDeltaEvent(index=index, delta=delta)
            )


def test_a_system_turn_in_the_conversation_stays_a_system_message() -> None:
    """Newer clients (the SDK's SystemMessageParam) put system turns among the messages: kept in place, text only."""
    req = _req(
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "be brief"}, {"type": "text", "text": "now"}]},
            {"role": "user", "content": "go"},
        ]
    )
    assert _chat(req)["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "be brief\nnow"},
        {"role": "user", "content": "go"},
    ]
    bad = _req(messages=[{"role": "system", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}])
    assert _refusal(bad).param == "messages.0.content.0.type"
