"""Each quality signal on a good and a bad answer: the pure functions the request path will call."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tailgate.quality.signals import (
    SIGNALS,
    Observation,
    assemble_chat_stream,
    check_chat,
    content_filtered,
    empty_answer,
    hits,
    json_invalid,
    reasoning_missing,
    thinking_requested,
    tool_call_problems,
)

JSON = dict[str, Any]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def answer(
    content: str | None = "ok",
    *,
    finish: str | None = "stop",
    calls: list[tuple[str, str]] | None = None,
    reasoning: str | None = None,
    reasoning_tokens: int | None = None,
) -> JSON:
    message: JSON = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    body: JSON = {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if reasoning_tokens is not None:
        body["usage"] = {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}}
    return body


def tool_hits(args: str, name: str = "get_weather") -> dict[str, bool]:
    obs = tool_call_problems({"tools": [WEATHER]}, answer(None, finish="tool_calls", calls=[(name, args)]))
    return {o.signal: o.hit for o in obs}


def test_a_valid_tool_call_hits_nothing_but_is_checked() -> None:
    got = tool_hits('{"city": "Paris", "unit": "celsius", "days": 2}')
    assert got == {"tool_args_invalid_json": False, "tool_args_schema_mismatch": False, "tool_unknown_name": False}


@pytest.mark.parametrize("args", ['{"city": "Paris"', "not json", '["Paris"]', ""])
def test_arguments_that_are_not_a_json_object(args: str) -> None:
    got = tool_hits(args)
    assert got["tool_args_invalid_json"]
    assert not got["tool_args_schema_mismatch"]


@pytest.mark.parametrize(
    "args",
    [
        "{}",  # required city missing
        '{"city": 3}',  # wrong type
        '{"city": "Paris", "unit": "kelvin"}',  # not in the enum
        '{"city": "Paris", "days": 0}',  # below the minimum
        '{"city": "Paris", "mood": "sunny"}',  # additionalProperties: false
    ],
)
def test_arguments_that_do_not_match_the_schema(args: str) -> None:
    got = tool_hits(args)
    assert got["tool_args_schema_mismatch"]
    assert not got["tool_args_invalid_json"]


def test_an_unknown_tool_name() -> None:
    got = tool_hits('{"city": "Paris"}', name="get_wether")
    assert got["tool_unknown_name"]
    assert not got["tool_args_schema_mismatch"]
    # A tool call to a request that declared no tools names an unknown function too.
    obs = tool_call_problems({}, answer(None, calls=[("get_weather", "{}")]))
    assert "tool_unknown_name" in hits(obs)


def test_the_detail_names_the_path_not_the_values() -> None:
    bad = answer(None, calls=[("get_weather", '{"city": "Paris", "days": 0}')])
    obs = tool_call_problems({"tools": [WEATHER]}, bad)
    (mismatch,) = [o for o in obs if o.hit]
    assert mismatch.detail.startswith("get_weather: days: minimum")


def test_an_invalid_schema_is_not_judged() -> None:
    broken = {"type": "function", "function": {"name": "f", "parameters": {"type": "no-such-type"}}}
    obs = tool_call_problems({"tools": [broken]}, answer(None, calls=[("f", '{"a": 1}')]))
    assert hits(obs) == []


def test_no_tool_calls_no_tool_signals() -> None:
    assert tool_call_problems({"tools": [WEATHER]}, answer("It is sunny.")) == []


@pytest.mark.parametrize("reason", ["content_filter", "sensitive"])
def test_content_filtered_with_no_output(reason: str) -> None:
    assert content_filtered(answer("", finish=reason)).hit
    assert content_filtered(answer(None, finish=reason)).hit
    # Filtered after some output: the client got something; not this signal.
    assert not content_filtered(answer("Here is part", finish=reason)).hit
    assert not content_filtered(answer("fine")).hit


def test_empty_answer() -> None:
    assert empty_answer(answer("")).hit  # type: ignore[union-attr]
    assert empty_answer(answer("  \n")).hit  # type: ignore[union-attr]
    assert empty_answer(answer(None, reasoning="thought a lot")).hit  # type: ignore[union-attr]
    assert not empty_answer(answer("4")).hit  # type: ignore[union-attr]
    assert not empty_answer(answer(None, finish="tool_calls", calls=[("f", "{}")])).hit  # type: ignore[union-attr]
    # Cut by the client's max_tokens, or filtered: not judged as empty.
    assert empty_answer(answer("", finish="length")) is None
    assert empty_answer(answer("", finish="content_filter")) is None


def test_json_object_answers_must_parse() -> None:
    asked = {"response_format": {"type": "json_object"}}
    assert not json_invalid(asked, answer('{"a": 1}')).hit  # type: ignore[union-attr]
    assert json_invalid(asked, answer('{"a": 1')).hit  # type: ignore[union-attr]
    assert json_invalid(asked, answer("Sure! {}")).hit  # type: ignore[union-attr]
    assert json_invalid({"response_format": {"type": "json_schema", "json_schema": {}}}, answer("x")).hit  # type: ignore[union-attr]
    assert json_invalid({}, answer("not json")) is None
    assert json_invalid({"response_format": {"type": "text"}}, answer("not json")) is None
    assert json_invalid(asked, answer('{"a": ', finish="length")) is None


@pytest.mark.parametrize(
    ("request_body", "asked"),
    [
        ({"reasoning_effort": "high"}, True),
        ({"reasoning_effort": "minimal"}, False),
        ({"reasoning_effort": "none"}, False),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, True),
        ({"thinking": {"type": "disabled"}}, False),
        ({"enable_thinking": True}, True),
        ({"chat_template_kwargs": {"enable_thinking": True}}, True),
        ({"chat_template_kwargs": {"thinking": False}}, False),
        ({}, False),
    ],
)
def test_thinking_requested(request_body: JSON, asked: bool) -> None:
    assert thinking_requested(request_body) is asked


def test_reasoning_missing() -> None:
    asked = {"thinking": {"type": "enabled"}}
    assert reasoning_missing(asked, answer("4")).hit  # type: ignore[union-attr]
    assert reasoning_missing(asked, answer("4", reasoning_tokens=0)).hit  # type: ignore[union-attr]
    assert not reasoning_missing(asked, answer("4", reasoning="2+2")).hit  # type: ignore[union-attr]
    # OpenAI hides the reasoning text but reports its tokens.
    assert not reasoning_missing({"reasoning_effort": "low"}, answer("4", reasoning_tokens=128)).hit  # type: ignore[union-attr]
    assert reasoning_missing({}, answer("4")) is None


def test_check_chat_reports_only_what_applies() -> None:
    plain = check_chat({"messages": []}, answer("hello"))
    assert [o.signal for o in plain] == ["content_filtered", "empty_answer"]
    assert hits(plain) == []
    everything = check_chat(
        {"tools": [WEATHER], "response_format": {"type": "json_object"}, "enable_thinking": True},
        answer(None, calls=[("get_weather", "{")]),
    )
    # A tool call is not judged as a JSON answer; every other signal applies.
    assert {o.signal for o in everything} == set(SIGNALS) - {"json_invalid"}
    assert hits(everything) == ["tool_args_invalid_json", "reasoning_missing"]
    assert all(isinstance(o, Observation) for o in everything)


def test_assemble_chat_stream_joins_tool_fragments_and_reasoning() -> None:
    def chunk(delta: JSON, finish: str | None = None) -> JSON:
        return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    args = json.dumps({"city": "Paris", "unit": "kelvin"})
    first = {"name": "get_weather", "arguments": args[:7]}
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "let me "}),
        chunk({"reasoning_content": "see"}),
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": first}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[7:]}}]}),
        chunk({}, "tool_calls"),
        {"object": "chat.completion.chunk", "choices": [], "usage": {"completion_tokens": 12}},
    ]
    body = assemble_chat_stream(chunks)
    message = body["choices"][0]["message"]
    assert message["reasoning_content"] == "let me see"
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": args}
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["usage"] == {"completion_tokens": 12}
    assert hits(check_chat({"tools": [WEATHER]}, body)) == ["tool_args_schema_mismatch"]


def test_assembled_filtered_stream_with_no_output() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "sensitive"}]},
    ]
    assert hits(check_chat({}, assemble_chat_stream(chunks))) == ["content_filtered"]
