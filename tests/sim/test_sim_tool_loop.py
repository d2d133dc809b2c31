"""An agent's tool loop ends: the simulator answers a tool result with text (``tool_result_call_rate``, 0
by default), on chat (``role: tool``), Anthropic (``tool_result`` blocks) and the Responses API
(``function_call_output``), while a user's turn still calls at ``tool_call_rate``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from conftest import SimFactory

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FAST = {"pre_median_s": 0.0, "step_ms": 1.0, "jitter": 0.0, "default_output_tokens": 12}
READ: Any = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
CALL: Any = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}
CHAT_LOOP: Any = [
    {"role": "user", "content": "read a"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "the file's text"},
]


async def test_chat_tool_result_is_answered_with_text(sim: SimFactory, oai: Callable[..., AsyncOpenAI]) -> None:
    """Chat: the user's turn calls the tool; the turn carrying its ``role: tool`` result gets text."""
    p = await sim("instant", engine=FAST)
    client = oai(p.url)
    first = await client.chat.completions.create(model="m", messages=CHAT_LOOP[:1], tools=[READ])
    assert first.choices[0].finish_reason == "tool_calls"
    for _ in range(5):
        resp = await client.chat.completions.create(model="m", messages=CHAT_LOOP, tools=[READ])
        assert resp.choices[0].finish_reason == "stop"
        assert resp.choices[0].message.tool_calls is None
        assert resp.choices[0].message.content


async def test_chat_tool_result_call_rate_is_configurable(sim: SimFactory, oai: Callable[..., AsyncOpenAI]) -> None:
    """``tool_result_call_rate: 1`` brings the endless loop back for whoever wants it."""
    p = await sim("instant", engine={**FAST, "tool_result_call_rate": 1.0})
    resp = await oai(p.url).chat.completions.create(model="m", messages=CHAT_LOOP, tools=[READ])
    assert resp.choices[0].finish_reason == "tool_calls"


async def test_anthropic_tool_result_is_answered_with_text(sim: SimFactory) -> None:
    """Anthropic: a user turn of ``tool_result`` blocks gets a ``text`` block and ``end_turn``."""
    p = await sim("instant", engine=FAST)
    tool: Any = {"name": "Read", "input_schema": READ["function"]["parameters"]}
    async with AsyncAnthropic(base_url=p.url.removesuffix("/v1"), api_key="k", max_retries=0, timeout=10) as c:
        first = await c.messages.create(
            model="m", max_tokens=200, tools=[tool], messages=[{"role": "user", "content": "read a"}]
        )
        assert first.stop_reason == "tool_use"
        messages: Any = [
            {"role": "user", "content": "read a"},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": first.content[-1].id, "content": "text"}],  # type: ignore[union-attr]
            },
        ]
        for _ in range(5):
            resp = await c.messages.create(model="m", max_tokens=200, tools=[tool], messages=messages)
            assert resp.stop_reason == "end_turn"
            assert [b.type for b in resp.content] == ["text"]


async def test_responses_function_call_output_is_answered_with_text(
    sim: SimFactory, oai: Callable[..., AsyncOpenAI]
) -> None:
    """Responses API: an input ending in a ``function_call_output`` gets a text ``message``, its output
    counted as prompt."""
    p = await sim("instant", engine=FAST)
    client = oai(p.url)
    call: Any = {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": '{"path":"a"}'}
    short: Any = [
        {"role": "user", "content": "read a"},
        call,
        {"type": "function_call_output", "call_id": "call_1", "output": "x"},
    ]
    long: Any = [*short[:2], {**short[2], "output": "the file's text " * 50}]
    tools: Any = [{"type": "function", "name": "read_file", "parameters": READ["function"]["parameters"]}]
    a = await client.responses.create(model="m", input=short, tools=tools)
    b = await client.responses.create(model="m", input=long, tools=tools)
    assert a.output_text
    assert b.output_text
    assert [item.type for item in b.output] == ["message"]
    assert a.usage is not None
    assert b.usage is not None
    assert b.usage.input_tokens > a.usage.input_tokens + 50


async def test_tool_arguments_and_max_tokens_cap(sim: SimFactory, oai: Callable[..., AsyncOpenAI]) -> None:
    """``tool_arguments`` makes the call deterministic (the first named function the request declares, with
    the given arguments); ``max_tokens_cap`` makes chat's max_tokens a cap on the natural length."""
    engine = {**FAST, "tool_arguments": (("Read", '{"file_path": "/x"}'), ("read_file", '{"path": "/tmp/notes"}'))}
    p = await sim("instant", engine={**engine, "max_tokens_cap": True})
    client = oai(p.url)
    other: Any = {"type": "function", "function": {"name": "skill", "parameters": {"type": "object"}}}
    for _ in range(5):
        resp = await client.chat.completions.create(model="m", messages=CHAT_LOOP[:1], tools=[other, READ])
        calls = resp.choices[0].message.tool_calls
        assert calls is not None
        assert (calls[0].function.name, calls[0].function.arguments) == ("read_file", '{"path": "/tmp/notes"}')  # type: ignore[union-attr]
    text = await client.chat.completions.create(model="m", messages=CHAT_LOOP, tools=[READ], max_tokens=32000)
    assert text.usage is not None
    assert text.usage.completion_tokens <= 18  # default_output_tokens 12 x 1.5, not 32,000
    assert text.choices[0].finish_reason == "stop"
    cut = await client.chat.completions.create(model="m", messages=CHAT_LOOP, max_tokens=3)
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage is not None
    assert cut.usage.completion_tokens == 3


async def test_responses_function_call_stream_and_not(sim: SimFactory, oai: Callable[..., AsyncOpenAI]) -> None:
    """Responses API with function tools: the user's turn gets one ``function_call`` output item (``call_id``,
    name, the given arguments), streamed as ``function_call_arguments`` deltas the SDK assembles."""
    engine = {**FAST, "tool_arguments": (("exec_command", '{"cmd": "cat notes.txt"}'),)}
    p = await sim("instant", engine=engine)
    client = oai(p.url)
    tools: Any = [
        {"type": "function", "name": "update_plan", "parameters": {"type": "object", "properties": {}}},
        {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}},
    ]
    resp = await client.responses.create(model="m", input="read notes.txt", tools=tools)
    assert [item.type for item in resp.output] == ["function_call"]
    call: Any = resp.output[0]
    assert (call.name, call.arguments) == ("exec_command", '{"cmd": "cat notes.txt"}')
    assert call.call_id.startswith("call_")
    stream = await client.responses.create(model="m", input="read notes.txt", tools=tools, stream=True)
    kinds: list[str] = []
    final: Any = None
    async for event in stream:
        kinds.append(event.type)
        if event.type == "response.completed":
            final = event.response
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert final.output[0].arguments == '{"cmd": "cat notes.txt"}'
    answer = await client.responses.create(
        model="m",
        tools=tools,
        input=[
            {"role": "user", "content": "read notes.txt"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "the text"},
        ],
    )
    assert [item.type for item in answer.output] == ["message"]
