"""Provider realism through the official openai SDK: vendor fields per dialect, thinking mode, tool calls,
``message.refusal``, the Responses API, and uniform ground-truth rows."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from conftest import SimFactory
from sim_truth import truth
from tailgate.config import ConfigError
from tailgate.sim.config import load_sim_config

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

Oai = Callable[..., AsyncOpenAI]
MSG: list[Any] = [{"role": "user", "content": "hello"}]
USAGE_EVERY_CHUNK: Any = {"include_usage": True, "continuous_usage_stats": True}  # vLLM's extension
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


# ---- vendor fields per dialect -------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["vllm", "sglang", "provider-a"])
async def test_load_tester_fields_are_accepted_and_honoured(sim: SimFactory, oai: Oai, preset: str) -> None:
    """vLLM / SGLang / MaaS dialects accept ignore_eos, min_tokens, top_k …; ignore_eos decodes exactly
    max_tokens even for a question whose scripted answer is shorter; continuous_usage_stats puts the
    running usage on every chunk."""
    p = await sim(preset, time_scale=0.01)
    client = oai(p.url)
    extra = {"ignore_eos": True, "min_tokens": 5, "top_k": 20, "repetition_penalty": 1.05, "min_p": 0.0}
    resp = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "What is 17 + 25?"}], max_tokens=30, extra_body=extra
    )
    assert resp.usage is not None
    assert resp.usage.completion_tokens == 30
    assert resp.choices[0].finish_reason == "length"
    stream = await client.chat.completions.create(
        model="m",
        messages=MSG,
        max_tokens=6,
        stream=True,
        stream_options=USAGE_EVERY_CHUNK,
        extra_body={"ignore_eos": True},
    )
    chunks = [c async for c in stream]
    token_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(token_chunks) == 6
    assert [c.usage.completion_tokens for c in token_chunks if c.usage] == [1, 2, 3, 4, 5, 6]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 6


async def test_openai_dialect_refuses_vendor_fields(sim: SimFactory, oai: Oai) -> None:
    """The openai preset is strict like api.openai.com: a vLLM field is a 400 naming it."""
    p = await sim("openai", time_scale=0.01)
    for field, value in (("ignore_eos", True), ("top_k", 5), ("chat_template_kwargs", {"enable_thinking": False})):
        with pytest.raises(openai.BadRequestError) as exc:
            await oai(p.url).chat.completions.create(model="m", messages=MSG, max_tokens=2, extra_body={field: value})
        assert exc.value.param == field
        assert f"Unrecognized request argument supplied: {field}" in exc.value.message


async def test_min_tokens_holds_off_a_stop_string(sim: SimFactory, oai: Oai) -> None:
    """With min_tokens, a stop string cannot end the answer before that many tokens."""
    p = await sim("vllm", time_scale=0.01)
    client = oai(p.url)
    base = await client.chat.completions.create(model="m", messages=MSG, max_tokens=12, seed=3)
    words = (base.choices[0].message.content or "").split()
    stop = words[1]  # would end the answer after one token
    early = await client.chat.completions.create(model="m", messages=MSG, max_tokens=12, seed=3, stop=[stop])
    held = await client.chat.completions.create(
        model="m", messages=MSG, max_tokens=12, seed=3, stop=[stop], extra_body={"min_tokens": 4}
    )
    assert early.usage is not None
    assert held.usage is not None
    assert early.usage.completion_tokens < 4 <= held.usage.completion_tokens


# ---- thinking mode -------------------------------------------------------------------------------


async def test_reasoning_stream_thinks_before_it_answers(sim: SimFactory, oai: Oai) -> None:
    """A reasoning-shaped preset streams reasoning_content deltas, then content; usage counts them and
    /sim/truth records both the first token and the first answer token."""
    p = await sim("reasoner", time_scale=0.01, engine={"reasoning_median": 12, "reasoning_sigma": 0.0})
    stream = await oai(p.url).chat.completions.create(
        model="m", messages=MSG, max_tokens=20, stream=True, stream_options={"include_usage": True}
    )
    kinds: list[str] = []
    usage = None
    async for chunk in stream:
        usage = chunk.usage or usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if getattr(delta, "reasoning_content", None):
            kinds.append("r")
        elif delta.content:
            kinds.append("c")
    assert "".join(kinds) == "r" * 12 + "c" * 8
    assert usage is not None
    assert usage.completion_tokens == 20
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 12
    row = (await truth(p.root_url))[-1]
    assert row["reasoning_tokens"] == 12
    assert row["output_tokens"] == 20
    assert row["ttft_answer_ms"] > row["ttft_ms"] > 0
    assert len(row["itl_ms"]) == 19  # one gap per pair of tokens, thinking or not
    assert sum(row["itl_ms"]) <= row["e2e_ms"] - row["ttft_ms"]


@pytest.mark.parametrize(
    "switch",
    [
        {"enable_thinking": False},
        {"thinking": {"type": "disabled"}},
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"reasoning_effort": "none"},
    ],
)
async def test_thinking_switched_off_by_the_providers_own_field(
    sim: SimFactory, oai: Oai, switch: dict[str, Any]
) -> None:
    """Each provider's own switch turns thinking off: no reasoning_content, no reasoning tokens."""
    p = await sim("reasoner", time_scale=0.01)
    resp = await oai(p.url).chat.completions.create(model="m", messages=MSG, max_tokens=5, extra_body=switch)
    message = resp.choices[0].message
    assert getattr(message, "reasoning_content", None) is None
    assert resp.usage is not None
    assert resp.usage.completion_tokens_details is None
    row = (await truth(p.root_url))[-1]
    assert row["reasoning_tokens"] == 0
    assert row["ttft_answer_ms"] == row["ttft_ms"]


async def test_thinking_switched_on_with_a_budget_non_stream(sim: SimFactory, oai: Oai) -> None:
    """On a preset that does not think by default, enable_thinking + thinking_budget gives exactly the
    budget of reasoning tokens (below the preset's median) in message.reasoning_content and usage."""
    p = await sim("provider-a", time_scale=0.01)
    resp = await oai(p.url).chat.completions.create(
        model="m", messages=MSG, max_tokens=15, extra_body={"enable_thinking": True, "thinking_budget": 6}
    )
    message = resp.choices[0].message
    assert len(getattr(message, "reasoning_content", "").split()) == 6
    assert len((message.content or "").split()) == 9
    assert resp.usage is not None
    assert resp.usage.completion_tokens_details is not None
    assert resp.usage.completion_tokens_details.reasoning_tokens == 6


# ---- tool calls ----------------------------------------------------------------------------------


async def test_tool_call_streams_argument_fragments(sim: SimFactory, oai: Oai) -> None:
    """With tools, the answer is a tool call: the first delta names it, argument fragments follow over
    several chunks, and the stream finishes with tool_calls; each fragment is one output token."""
    p = await sim("instant")
    stream = await oai(p.url).chat.completions.create(
        model="m", messages=MSG, tools=[WEATHER], stream=True, stream_options={"include_usage": True}
    )
    calls: list[Any] = []
    finish, usage = None, None
    async for chunk in stream:
        usage = chunk.usage or usage
        if chunk.choices:
            finish = chunk.choices[0].finish_reason or finish
            calls.extend(chunk.choices[0].delta.tool_calls or [])
    assert len(calls) >= 3
    assert calls[0].id
    assert calls[0].type == "function"
    assert calls[0].function is not None
    assert calls[0].function.name == "get_weather"
    assert all(c.index == 0 and c.id is None for c in calls[1:])
    args = json.loads("".join(c.function.arguments or "" for c in calls if c.function))
    assert set(args) == {"city", "days"}
    assert isinstance(args["days"], int)
    assert finish == "tool_calls"
    assert usage is not None
    assert usage.completion_tokens == len(calls)


async def test_tool_call_non_stream_and_tool_choice_none(sim: SimFactory, oai: Oai) -> None:
    """Non-stream: message.tool_calls with content null; tool_choice none answers with text."""
    p = await sim("instant")
    client = oai(p.url)
    resp = await client.chat.completions.create(model="m", messages=MSG, tools=[WEATHER], tool_choice="required")
    message = resp.choices[0].message
    assert message.content is None
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert "city" in json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert resp.choices[0].finish_reason == "tool_calls"
    plain = await client.chat.completions.create(model="m", messages=MSG, tools=[WEATHER], tool_choice="none")
    assert plain.choices[0].message.tool_calls is None
    assert plain.choices[0].message.content


async def test_tool_call_rate_zero_never_calls(sim: SimFactory, oai: Oai) -> None:
    """tool_call_rate (per preset, overridable) is the share of tool_choice auto requests that call."""
    p = await sim("instant", engine={"tool_call_rate": 0.0})
    resp = await oai(p.url).chat.completions.create(model="m", messages=MSG, tools=[WEATHER])
    assert resp.choices[0].message.tool_calls is None


# ---- schema details, truth rows, Responses API ---------------------------------------------------


async def test_non_stream_message_has_refusal_null(sim: SimFactory) -> None:
    """OpenAI sends message.refusal: null; so does the simulator."""
    p = await sim("instant")
    body = {"model": "m", "messages": MSG, "max_tokens": 2}
    async with aiohttp.ClientSession() as s, s.post(f"{p.url}/chat/completions", json=body) as r:
        message = (await r.json())["choices"][0]["message"]
    assert "refusal" in message
    assert message["refusal"] is None


async def test_every_truth_row_has_every_field_and_the_real_id(sim: SimFactory, oai: Oai) -> None:
    """A rate-limited request's row has the same keys as a served one, null where n/a, and a real id."""
    p = await sim("instant", faults={"rate_limit_rpm": 1})
    client = oai(p.url)
    await client.chat.completions.create(model="m", messages=MSG, max_tokens=2)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="m", messages=MSG, max_tokens=2)
    served, limited = await truth(p.root_url)
    assert set(served) == set(limited)
    contract = {"id", "received_at", "queue_ms", "ttft_ms", "e2e_ms", "output_tokens", "stream", "status"}
    assert contract <= set(limited)
    assert limited["status"] == 429
    assert limited["id"].startswith("chatcmpl-")
    assert limited["id"] != served["id"]
    assert all(limited[k] is None for k in ("queue_ms", "ttft_ms", "ttft_answer_ms", "e2e_ms", "output_tokens"))


async def test_responses_api_stream_and_not(sim: SimFactory, oai: Oai) -> None:
    """POST /v1/responses: the SDK's responses.create, non-stream (output_text, usage) and stream (typed
    events, one output_text.delta per token, response.completed with usage)."""
    p = await sim("instant")
    client = oai(p.url)
    resp = await client.responses.create(model="m", input="hello there", max_output_tokens=9)
    assert resp.object == "response"
    assert resp.id.startswith("resp_")
    assert len(resp.output_text.split()) == 9
    assert resp.usage is not None
    assert resp.usage.output_tokens == 9
    assert resp.status == "incomplete"
    stream = await client.responses.create(model="m", input=[{"role": "user", "content": "hi"}], stream=True)
    events = [e async for e in stream]
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert types[-1] == "response.completed"
    final = events[-1].response  # type: ignore[union-attr]
    assert final.usage is not None
    assert final.usage.output_tokens == len(deltas)
    assert final.output_text == "".join(deltas)
    row = (await truth(p.root_url))[-1]
    assert row["id"] == final.id
    assert row["output_tokens"] == len(deltas)
    assert row["stream"] is True


# ---- config ----------------------------------------------------------------------------------------


def test_dialect_and_thinking_are_configurable_per_provider(tmp_path: Path) -> None:
    """engine: {dialect, thinking, reasoning_median, tool_call_rate} override the preset; a bad dialect names
    its file, line and path."""
    good = tmp_path / "sim.yaml"
    good.write_text(
        "providers:\n"
        "  r: {preset: reasoner, engine: {thinking: false, reasoning_median: 50, tool_call_rate: 0.5}}\n"
        "  o: {preset: provider-a, engine: {dialect: openai}}\n"
    )
    r, o = load_sim_config(good).specs()
    assert (r.params.dialect, r.params.thinking, r.params.reasoning_median, r.params.tool_call_rate) == (
        "maas",
        False,
        50,
        0.5,
    )
    assert o.params.dialect == "openai"
    bad = tmp_path / "bad.yaml"
    bad.write_text("providers:\n  a:\n    preset: vllm\n    engine: {dialect: tgi}\n")
    with pytest.raises(ConfigError) as exc:
        load_sim_config(bad)
    assert exc.value.problems[0].startswith(f"{bad}:4: providers.a.engine.dialect:")
