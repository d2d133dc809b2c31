"""The simulator degrades on cue: the answer-quality faults set at run time through ``POST /sim/faults``,
seen by the official SDKs, named in the truth rows, and caught by the quality signals."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from anthropic import AsyncAnthropic

from conftest import SimFactory
from tailgate.accuracy import TOOL, canary_round, grade, grade_call
from tailgate.quality.signals import assemble_chat_stream, check_chat, hits
from tailgate.sim.provider import SimProvider

JSON = dict[str, Any]


async def set_faults(p: SimProvider, body: JSON | None) -> None:
    async with aiohttp.ClientSession() as s:
        if body is None:
            async with s.delete(p.url.removesuffix("/v1") + "/sim/faults") as r:
                assert r.status == 200
        else:
            async with s.post(p.url.removesuffix("/v1") + "/sim/faults", json=body) as r:
                assert r.status == 200, await r.text()


async def ask(client: Any, request: JSON, *, stream: bool) -> JSON:
    """One chat call through the openai SDK; the answer as a non-stream body (a stream assembled)."""
    if not stream:
        resp = await client.chat.completions.create(model="m", **request)
        return dict(resp.model_dump())
    chunks = [c.model_dump() async for c in await client.chat.completions.create(model="m", stream=True, **request)]
    return assemble_chat_stream(chunks)


def text_of(body: JSON) -> str:
    return str(body["choices"][0]["message"].get("content") or "")


def call_of(body: JSON) -> tuple[str | None, str | None]:
    calls = body["choices"][0]["message"].get("tool_calls") or []
    return (calls[0]["function"]["name"], calls[0]["function"]["arguments"]) if calls else (None, None)


@pytest.mark.parametrize("stream", [False, True])
async def test_healthy_sim_answers_every_canary_right(sim: SimFactory, oai: Callable[..., Any], stream: bool) -> None:
    """accuracy 1.0 (the instant preset): every kind of the canary set right, the tool call too."""
    p = await sim("instant", seed=3)
    client = oai(p.url)
    for round_index in range(3):
        for task in canary_round(round_index, seed=7):
            request: JSON = {"messages": [{"role": "user", "content": task.prompt}]}
            if task.tools:
                request["tools"] = list(task.tools)
            body = await ask(client, request, stream=stream)
            if task.kind == "tool":
                assert grade_call(task, *call_of(body)), body
                assert hits(check_chat(request, body)) == []
            else:
                assert grade(task, text_of(body)), (task.kind, text_of(body))
    assert {r.degraded for r in p.truth.records()} == {None}


async def test_accuracy_fault_lowers_canary_accuracy_and_names_it(sim: SimFactory, oai: Callable[..., Any]) -> None:
    """``accuracy`` set at run time replaces the preset's, deterministically for the seed; cleared, it is back."""

    async def run(p: SimProvider) -> list[bool]:
        client = oai(p.url)
        out = []
        for round_index in range(8):
            for task in canary_round(round_index, seed=1):
                request: JSON = {"messages": [{"role": "user", "content": task.prompt}], "tools": list(task.tools)}
                if not task.tools:
                    del request["tools"]
                body = await ask(client, request, stream=False)
                out.append(grade_call(task, *call_of(body)) if task.tools else grade(task, text_of(body)))
        return out

    a, b = await sim("instant", seed=11), await sim("instant", seed=11)
    await set_faults(a, {"accuracy": 0.5})
    await set_faults(b, {"accuracy": 0.5})
    right_a, right_b = await run(a), await run(b)
    assert right_a == right_b  # the same seed serves the same wrong answers
    assert 12 <= sum(right_a) <= 36  # 48 canaries at 0.5
    wrong_rows = [r for r in a.truth.records() if r.degraded == "canary_wrong"]
    assert len(wrong_rows) == right_a.count(False)
    await set_faults(a, {"accuracy": 0.0})
    assert not any(await run(a))
    await set_faults(a, None)
    assert all(await run(a))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("kind", "signal"),
    [
        ("invalid_json", "tool_args_invalid_json"),
        ("schema_mismatch", "tool_args_schema_mismatch"),
        ("unknown_tool", "tool_unknown_name"),
    ],
)
async def test_broken_tool_calls_are_served_and_caught(
    sim: SimFactory, oai: Callable[..., Any], kind: str, signal: str, stream: bool
) -> None:
    p = await sim("instant", seed=5)
    client = oai(p.url)
    await set_faults(p, {"tool_call_break_rate": 1.0, "tool_call_break_kinds": [kind]})
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
    for tools in ([weather], [TOOL]):
        request: JSON = {"messages": [{"role": "user", "content": "What now?"}], "tools": tools}
        body = await ask(client, request, stream=stream)
        assert body["choices"][0]["finish_reason"] == "tool_calls"
        assert hits(check_chat(request, body)) == [signal]
        assert p.truth.records()[-1].degraded == signal


async def test_break_rate_is_a_share(sim: SimFactory, oai: Callable[..., Any]) -> None:
    p = await sim("instant", seed=8)
    client = oai(p.url)
    await set_faults(p, {"tool_call_break_rate": 0.3})
    request: JSON = {"messages": [{"role": "user", "content": "go"}], "tools": [TOOL]}
    broken = 0
    for _ in range(60):
        body = await ask(client, request, stream=False)
        broken += bool(hits(check_chat(request, body)))
    served = sum(1 for r in p.truth.records() if r.degraded)
    assert broken == served
    assert 8 <= broken <= 30


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("reason", ["content_filter", "sensitive"])
async def test_content_filter_with_no_output(
    sim: SimFactory, oai: Callable[..., Any], reason: str, stream: bool
) -> None:
    p = await sim("reasoner", seed=2, engine={"step_ms": 0.1, "pre_median_s": 0.0, "reasoning_median": 5.0})
    client = oai(p.url)
    await set_faults(p, {"content_filter_rate": 1.0, "content_filter_reason": reason})
    request: JSON = {"messages": [{"role": "user", "content": "Tell me about it."}], "max_tokens": 50}
    body = await ask(client, request, stream=stream)
    assert body["choices"][0]["finish_reason"] == reason
    assert text_of(body) == ""
    assert not body["choices"][0]["message"].get("reasoning_content")
    assert hits(check_chat(request, body)) == ["content_filtered"]
    row = p.truth.records()[-1]
    assert (row.degraded, row.finish_reason, row.output_tokens) == ("content_filtered", reason, 0)
    await set_faults(p, None)
    body = await ask(client, request, stream=stream)
    assert body["choices"][0]["finish_reason"] == "length"
    assert hits(check_chat(request, body)) == []


@pytest.mark.parametrize("stream", [False, True])
async def test_empty_answers(sim: SimFactory, oai: Callable[..., Any], stream: bool) -> None:
    p = await sim("instant", seed=2)
    client = oai(p.url)
    await set_faults(p, {"empty_answer_rate": 1.0})
    request: JSON = {"messages": [{"role": "user", "content": "Say something."}]}
    body = await ask(client, request, stream=stream)
    assert (body["choices"][0]["finish_reason"], text_of(body)) == ("stop", "")
    assert hits(check_chat(request, body)) == ["empty_answer"]
    assert p.truth.records()[-1].degraded == "empty_answer"


async def test_filtered_and_degraded_on_anthropic_messages(sim: SimFactory) -> None:
    """/v1/messages serves the same faults: a filtered answer is ``stop_reason: refusal`` with no text, and
    the accuracy fault makes the canaries wrong there too."""
    p = await sim("instant", seed=6)
    client = AsyncAnthropic(api_key="sk-test", base_url=p.url.removesuffix("/v1"), max_retries=0)
    try:
        await set_faults(p, {"content_filter_rate": 1.0})
        msg = await client.messages.create(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "Tell me about it."}]
        )
        assert msg.stop_reason == "refusal"
        assert "".join(b.text for b in msg.content if b.type == "text") == ""
        async with client.messages.stream(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "Again."}]
        ) as s:
            final = await s.get_final_message()
        assert final.stop_reason == "refusal"
        assert p.truth.records()[-1].degraded == "content_filtered"
        await set_faults(p, None)
        await set_faults(p, {"accuracy": 0.0})
        task = canary_round(0, seed=2)[0]
        msg = await client.messages.create(
            model="m", max_tokens=100, messages=[{"role": "user", "content": task.prompt}]
        )
        text = "".join(b.text for b in msg.content if b.type == "text")
        assert not grade(task, text)
        assert p.truth.records()[-1].degraded == "canary_wrong"
    finally:
        await client.close()


def test_fault_fields_validate() -> None:
    from pydantic import ValidationError

    from tailgate.sim.faults import parse_faults

    assert parse_faults({"accuracy": 0.7, "tool_call_break_rate": 0.1}).active
    bads: list[JSON] = [
        {"accuracy": 1.5},
        {"tool_call_break_kinds": ["nope"]},
        {"tool_call_break_kinds": []},
        {"content_filter_reason": "blocked"},
        {"empty_answer_rate": -0.1},
    ]
    for bad in bads:
        with pytest.raises(ValidationError):
            parse_faults(bad)
    assert json.loads(parse_faults({}).model_dump_json())["tool_call_break_kinds"] == [
        "invalid_json",
        "schema_mismatch",
        "unknown_tool",
    ]
