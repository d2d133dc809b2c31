"""The simulator speaks Anthropic's Messages API: the official anthropic SDK, sync and async, streams,
tool use, thinking, errors and faults, against presets that claim it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import anthropic
import httpx2
import pytest
from anthropic import Anthropic, AsyncAnthropic
from anthropic.types import MessageParam, ToolParam

from anthropic_grammar import check_stream
from conftest import SimFactory, ThreadedSim
from tailgate.sim.provider import SimProvider

FAST = {"pre_median_s": 0.0, "step_ms": 1.0, "jitter": 0.0, "default_output_tokens": 12, "reasoning_median": 6}
"""A quick engine for these tests: 1 ms steps, short answers, short thinking."""
HI: list[MessageParam] = [{"role": "user", "content": "hello there"}]
WEATHER: ToolParam = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

Client = Callable[..., AsyncAnthropic]


def root(p: SimProvider | ThreadedSim) -> str:
    """The SDK's base_url is the host root: it appends /v1/messages itself."""
    return p.url.removesuffix("/v1")


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    """Factory for official AsyncAnthropic clients (no retries); all closed afterwards."""
    made: list[AsyncAnthropic] = []

    def factory(p: SimProvider, key: str = "sk-ant-test") -> AsyncAnthropic:
        c = AsyncAnthropic(base_url=root(p), api_key=key, max_retries=0, timeout=10)
        made.append(c)
        return c

    yield factory
    for c in made:
        await c.close()


async def raw_stream(p: SimProvider, body: dict[str, Any]) -> bytes:
    """The raw SSE body of a streamed /v1/messages call (for the grammar checker)."""
    async with httpx2.AsyncClient(timeout=10) as http:
        resp = await http.post(root(p) + "/v1/messages", json={**body, "stream": True})
        assert resp.status_code == 200
        return resp.content


def test_sync_client_gets_a_message(threaded_sim: Callable[..., ThreadedSim]) -> None:
    """The blocking SDK client: a text message, end_turn, usage counting every output token."""
    ts = threaded_sim("provider-a", engine=FAST)
    with Anthropic(base_url=root(ts), api_key="k", max_retries=0, timeout=10) as c:
        msg = c.messages.create(model="deepseek-v3.2", max_tokens=100, messages=HI)
    assert msg.type == "message"
    assert msg.model == "deepseek-v3.2"
    assert [b.type for b in msg.content] == ["text"]
    assert msg.stop_reason == "end_turn"
    truth = ts.provider.truth.records()[-1]
    assert (truth.api, truth.status, truth.output_tokens) == ("anthropic", 200, msg.usage.output_tokens)
    assert msg.usage.input_tokens == truth.prompt_tokens


async def test_max_tokens_caps_the_answer(sim: SimFactory, client: Client) -> None:
    """max_tokens below the natural length cuts it: stop_reason max_tokens, exactly max_tokens tokens."""
    p = await sim("instant", engine={"default_output_tokens": 40})
    msg = await client(p).messages.create(model="m", max_tokens=5, messages=HI)
    assert msg.stop_reason == "max_tokens"
    assert msg.usage.output_tokens == 5
    assert msg.content[0].type == "text"
    assert len(msg.content[0].text.split()) == 5


async def test_streaming_with_the_sdk_accumulator(sim: SimFactory, client: Client) -> None:
    """messages.stream: text_stream pieces add up to the accumulated final message; the raw sequence conforms."""
    p = await sim("provider-a", engine=FAST)
    async with client(p).messages.stream(model="m", max_tokens=100, messages=HI) as stream:
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert final.content[0].type == "text"
    assert "".join(pieces) == final.content[0].text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == len(pieces)
    checked = check_stream(await raw_stream(p, {"model": "m", "max_tokens": 100, "messages": HI}))
    assert [b.type for b in checked.blocks] == ["text"]
    rows = p.truth.records()
    assert rows[-1].stream
    assert rows[-1].itl_ms is not None
    assert len(rows[-1].itl_ms) == (rows[-1].output_tokens or 0) - 1


async def test_tool_use_round_trip(sim: SimFactory, client: Client) -> None:
    """tool_choice any → a tool_use block whose input follows the schema; the tool_result turn is answered."""
    p = await sim("provider-a", engine={**FAST, "tool_call_rate": 0.0})
    c = client(p)
    first = await c.messages.create(
        model="m", max_tokens=200, messages=HI, tools=[WEATHER], tool_choice={"type": "any"}
    )
    assert first.stop_reason == "tool_use"
    call = first.content[-1]
    assert call.type == "tool_use"
    assert call.name == "get_weather"
    assert set(call.input) == {"city"}
    assert call.id.startswith("toolu_")
    second = await c.messages.create(
        model="m",
        max_tokens=200,
        tools=[WEATHER],
        messages=[
            *HI,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"}]},
        ],
    )
    assert second.stop_reason == "end_turn"
    assert [b.type for b in second.content] == ["text"]


async def test_tool_use_streams_input_json(sim: SimFactory, client: Client) -> None:
    """A streamed tool call: input_json_delta fragments the SDK assembles into the input object."""
    p = await sim("provider-a", engine=FAST)
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 200,
        "messages": HI,
        "tools": [WEATHER],
        "tool_choice": {"type": "tool", "name": "get_weather"},
    }
    async with client(p).messages.stream(**body) as stream:
        final = await stream.get_final_message()
    assert final.content[-1].type == "tool_use"
    assert set(final.content[-1].input) == {"city"}
    checked = check_stream(await raw_stream(p, body))
    assert checked.blocks[-1].type == "tool_use"
    assert checked.stop_reason == "tool_use"


async def test_thinking_blocks_with_signatures(sim: SimFactory, client: Client) -> None:
    """A reasoning preset thinks first: a thinking block (budget respected, signed) before the answer;
    thinking disabled gives none. The streamed sequence conforms and the SDK accumulates the signature."""
    p = await sim("reasoner", engine=FAST)
    c = client(p)
    msg = await c.messages.create(
        model="m", max_tokens=200, messages=HI, thinking={"type": "enabled", "budget_tokens": 3}
    )
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].type == "thinking"
    assert len(msg.content[0].thinking.split()) == 3
    assert msg.content[0].signature
    assert p.truth.records()[-1].reasoning_tokens == 3
    off = await c.messages.create(model="m", max_tokens=200, messages=HI, thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"]
    async with c.messages.stream(model="m", max_tokens=200, messages=HI) as stream:
        final = await stream.get_final_message()
    assert final.content[0].type == "thinking"
    assert final.content[0].signature.startswith("sim-")
    checked = check_stream(await raw_stream(p, {"model": "m", "max_tokens": 200, "messages": HI}))
    assert [b.type for b in checked.blocks] == ["thinking", "text"]
    row = p.truth.records()[-1]
    assert row.ttft_answer_ms is not None
    assert row.ttft_ms is not None
    assert row.ttft_answer_ms >= row.ttft_ms


async def test_stop_sequences(sim: SimFactory, client: Client) -> None:
    """A stop sequence the answer reaches ends it: stop_reason stop_sequence, naming the sequence."""
    p = await sim("instant", engine={"default_output_tokens": 400})
    msg = await client(p).messages.create(model="m", max_tokens=1000, messages=HI, stop_sequences=["zzz", "the"])
    assert msg.stop_reason == "stop_sequence"
    assert msg.stop_sequence == "the"
    assert msg.content[0].type == "text"
    assert "the" not in msg.content[0].text.split()


async def test_count_tokens(sim: SimFactory, client: Client) -> None:
    """messages.count_tokens answers the simulator's estimate, more for a longer prompt."""
    p = await sim("instant")
    c = client(p)
    short = await c.messages.count_tokens(model="m", messages=HI)
    long = await c.messages.count_tokens(model="m", messages=[{"role": "user", "content": "hello there " * 50}])
    assert 0 < short.input_tokens < long.input_tokens


async def test_presets_without_the_api_answer_404(sim: SimFactory, client: Client) -> None:
    """A preset that does not claim the API: the SDK's NotFoundError with Anthropic's error type."""
    p = await sim("vllm")
    with pytest.raises(anthropic.NotFoundError) as info:
        await client(p).messages.create(model="m", max_tokens=10, messages=HI)
    assert info.value.body == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": "This provider does not serve the Anthropic Messages API (POST /v1/messages).",
        },
    }
    assert p.truth.records()[-1].api == "anthropic"


async def test_errors_are_anthropic_shaped(sim: SimFactory, client: Client) -> None:
    """Auth (x-api-key), an unknown block type, an unknown model, a rate limit, quota and an outage each
    raise the SDK's class for the status, with Anthropic's error type."""
    p = await sim("provider-a", engine=FAST, api_keys=("sk-ant-good",), models=("m",))
    with pytest.raises(anthropic.AuthenticationError) as auth:
        await client(p, key="sk-ant-bad").messages.create(model="m", max_tokens=10, messages=HI)
    assert auth.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    good = client(p, key="sk-ant-good")
    assert (await good.messages.create(model="m", max_tokens=10, messages=HI)).type == "message"
    with pytest.raises(anthropic.BadRequestError) as bad:
        await good.messages.create(
            model="m",
            max_tokens=10,
            messages=cast(Any, [{"role": "user", "content": [{"type": "no_such_block"}]}]),
        )
    assert "messages.0.content.0.type" in bad.value.message
    with pytest.raises(anthropic.NotFoundError):
        await good.messages.create(model="other", max_tokens=10, messages=HI)
    from tailgate.sim.faults import Faults

    cases: list[tuple[dict[str, Any], type[anthropic.APIStatusError], str]] = [
        ({"rate_limit_rps": 0.001}, anthropic.RateLimitError, "rate_limit_error"),
        ({"quota_exhausted": True}, anthropic.RateLimitError, "billing_error"),
        ({"outage": True}, anthropic.InternalServerError, "overloaded_error"),
        ({"error_rate": 1.0, "error_statuses": [529]}, anthropic.InternalServerError, "overloaded_error"),
    ]
    for faults, cls, kind in cases:
        p.set_faults(Faults.model_validate(faults))
        if "rate_limit_rps" in faults:  # the first request of a window passes
            await good.messages.create(model="m", max_tokens=10, messages=HI)
        with pytest.raises(cls) as info:
            await good.messages.create(model="m", max_tokens=10, messages=HI)
        assert info.value.body["error"]["type"] == kind, faults  # type: ignore[index]
        p.clear_faults()
    assert {r.api for r in p.truth.records()} == {"anthropic"}


async def test_a_disconnect_mid_stream_is_recorded(sim: SimFactory, client: Client) -> None:
    """disconnect_after_tokens cuts the stream: the SDK raises, the truth row says disconnect (anthropic)."""
    p = await sim("provider-a", engine=FAST, faults={"disconnect_after_tokens": 3})
    with pytest.raises(anthropic.APIError):
        async with client(p).messages.stream(model="m", max_tokens=100, messages=HI) as stream:
            await stream.get_final_message()
    row = p.truth.records()[-1]
    assert (row.fault, row.output_tokens, row.api) == ("disconnect", 3, "anthropic")


async def test_a_malformed_frame_breaks_the_stream(sim: SimFactory) -> None:
    """malformed_rate=1 writes a frame cut inside its JSON: the grammar checker refuses the body."""
    p = await sim("provider-a", engine=FAST, faults={"malformed_rate": 1.0})
    body = await raw_stream(p, {"model": "m", "max_tokens": 100, "messages": HI})
    with pytest.raises(ValueError, match=r"Expecting|Unterminated|Invalid"):  # the frame's JSON is cut
        check_stream(body)
    assert p.truth.records()[-1].fault == "malformed"


async def test_chat_rows_still_say_openai(sim: SimFactory, oai: Callable[..., Any]) -> None:
    """The api field of truth rows tells the protocols apart: chat says openai."""
    p = await sim("instant")
    await oai(p.url).chat.completions.create(model="m", messages=HI, max_tokens=2)
    assert p.truth.records()[-1].api == "openai"


async def test_system_turns_among_the_messages(sim: SimFactory, client: Client) -> None:
    """The SDK's SystemMessageParam (a system turn inside `messages`, as recent Claude Code sends) is accepted."""
    p = await sim("provider-a", engine=FAST)
    msg = await client(p).messages.create(
        model="m",
        max_tokens=50,
        system="You are terse.",
        messages=[*HI, {"role": "system", "content": [{"type": "text", "text": "Answer in one line."}]}],
    )
    assert msg.stop_reason == "end_turn"
    assert p.truth.records()[-1].status == 200


async def test_a_repeated_prompt_reads_the_prefix_cache(sim: SimFactory, client: Client) -> None:
    """The prefix cache answers in Anthropic's terms: the second identical prompt reports its cached blocks
    as ``cache_read_input_tokens`` and only the rest as ``input_tokens`` (the two add up to the prompt)."""
    p = await sim("provider-a", models=("m",), engine={**FAST, "cache_block_tokens": 16})
    c = client(p)
    long: list[MessageParam] = [{"role": "user", "content": "a long shared document " * 40}]
    first = await c.messages.create(model="m", max_tokens=4, messages=long)
    second = await c.messages.create(model="m", max_tokens=4, messages=long)
    assert first.usage.cache_read_input_tokens == 0
    prompt = first.usage.input_tokens
    cached = second.usage.cache_read_input_tokens
    assert cached is not None
    assert cached > 0
    assert cached % 16 == 0  # whole blocks only
    assert second.usage.input_tokens + cached == prompt
    assert p.truth.records()[-1].cached_tokens == cached


async def test_the_next_turn_hits_the_tools_system_and_earlier_turns(sim: SimFactory, client: Client) -> None:
    """A coding agent's second turn resends the tools, the system prompt and the first turn: the provider's
    cache holds all of it (tools lead the prompt as a template renders them), so only the new tail and the
    last partial block are prefilled again."""
    p = await sim("provider-a", models=("m",), engine={**FAST, "cache_block_tokens": 16})
    c = client(p)
    tools: list[ToolParam] = [
        {**WEATHER, "name": f"tool_{i}", "description": "a tool with a long description " * 8} for i in range(6)
    ]
    system = "You are a careful coding agent. " * 10
    turn1: list[MessageParam] = [{"role": "user", "content": "first question about the code base"}]
    first = await c.messages.create(model="m", max_tokens=4, system=system, tools=tools, messages=turn1)
    turn2: list[MessageParam] = [
        *turn1,
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": "a follow-up"},
    ]
    second = await c.messages.create(model="m", max_tokens=4, system=system, tools=tools, messages=turn2)
    before = first.usage.input_tokens  # turn 1 was a miss: all of it is input
    cached = second.usage.cache_read_input_tokens
    assert cached is not None
    assert before - 16 < cached <= before  # every whole block of turn 1's prompt was a hit
