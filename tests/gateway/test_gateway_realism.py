"""Provider realism through the gateway, with the official openai SDK: thinking streams, tool calls, vendor
fields, the Responses API, errors to the right exception classes, and the first-answer-token figures."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest

from conftest import GatewayHandle, SimFactory
from tailgate.ledger import read_rows
from tailgate.sim.faults import Faults

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GwFactory = Callable[..., Awaitable[GatewayHandle]]
MSG: list[Any] = [{"role": "user", "content": "hello"}]
TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
}


def _config(*urls: str) -> dict[str, Any]:
    providers = {f"p{i}": {"base_url": url, "api_keys": [f"sk-p{i}-0123456789"]} for i, url in enumerate(urls)}
    routes = [{"provider": f"p{i}", "model": "up"} for i in range(len(urls))]
    return {"providers": providers, "models": {"qwen3": {"routes": routes}}}


async def _gw(
    sim: SimFactory, gateway: GwFactory, preset: str, n: int = 1, time_scale: float = 0.01, **kw: Any
) -> tuple[list[Any], Any]:
    sims = [await sim(preset, time_scale=time_scale, **kw) for _ in range(n)]
    return sims, await gateway(_config(*(s.url for s in sims)))


async def test_thinking_stream_is_relayed_and_measured(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """reasoning_content deltas reach the client before content, untouched; the ledger and /metrics carry
    the first answer token beside the first token, and the reasoning tokens beside the output tokens."""
    # 1.5 ms steps: the 40 thinking tokens take ~60 ms, so the first answer token arrives in a later read
    thinking = {"reasoning_median": 40, "reasoning_sigma": 0.0}
    (_, gw) = await _gw(sim, gateway, "reasoner", time_scale=0.1, engine=thinking)
    client = oai(gw.url)
    stream = await client.chat.completions.create(model="qwen3", messages=MSG, max_tokens=46, stream=True)
    kinds = ""
    async for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            kinds += "r" if getattr(delta, "reasoning_content", None) else ("c" if delta.content else "")
        assert chunk.usage is None  # asked upstream on the client's behalf and removed again
    assert kinds == "r" * 40 + "c" * 6
    off = await client.chat.completions.create(
        model="qwen3", messages=MSG, max_tokens=4, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
    )
    assert getattr(off.choices[0].message, "reasoning_content", None) is None
    async with aiohttp.ClientSession() as s, s.get(f"{gw.root_url}/metrics") as r:
        metrics = await r.text()
    assert "tailgate_ttft_answer_seconds_bucket" in metrics
    assert 'tailgate_tokens_total{direction="reasoning",provider="p0"} 40.0' in metrics
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    thought, plain = rows
    assert thought.reasoning_tokens == 40
    assert thought.output_tokens == 46
    assert thought.ttft_ms is not None
    assert thought.ttft_answer_ms is not None
    assert thought.ttft_answer_ms > thought.ttft_ms
    assert plain.reasoning_tokens is None
    assert plain.ttft_answer_ms == plain.ttft_ms


async def test_tool_call_stream_and_vendor_fields_pass_through(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """Tool-call deltas are relayed as they came; vLLM's ignore_eos reaches a vLLM-shaped upstream."""
    (_, gw) = await _gw(sim, gateway, "vllm")
    client = oai(gw.url)
    stream = await client.chat.completions.create(
        model="qwen3", messages=MSG, tools=[TOOL], tool_choice="required", stream=True
    )
    calls: list[Any] = []
    finish = None
    async for chunk in stream:
        if chunk.choices:
            calls.extend(chunk.choices[0].delta.tool_calls or [])
            finish = chunk.choices[0].finish_reason or finish
    assert len(calls) >= 2
    assert calls[0].function.name == "lookup"
    assert finish == "tool_calls"
    assert "q" in json.loads("".join(c.function.arguments or "" for c in calls))
    resp = await client.chat.completions.create(
        model="qwen3",
        messages=[{"role": "user", "content": "What is 2 + 2?"}],
        max_tokens=25,
        extra_body={"ignore_eos": True, "top_k": 5},
    )
    assert resp.usage is not None
    assert resp.usage.completion_tokens == 25


async def test_responses_api_through_the_gateway(sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]) -> None:
    """/v1/responses is routed like chat: alias rewritten, stream and not, measured through the one core."""
    (sims, gw) = await _gw(sim, gateway, "instant", models=("up",))
    client = oai(gw.url)
    resp = await client.responses.create(model="qwen3", input="hello", max_output_tokens=7)
    assert len(resp.output_text.split()) == 7
    assert resp.model == "up"
    stream = await client.responses.create(model="qwen3", input="hello", max_output_tokens=5, stream=True)
    events = [e async for e in stream]
    assert sum(e.type == "response.output_text.delta" for e in events) == 5
    assert events[-1].type == "response.incomplete"
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    assert [(r.endpoint, r.stream, r.output_tokens, r.status) for r in rows] == [
        ("responses", False, 7, 200),
        ("responses", True, 5, 200),
    ]
    assert all(r.ttft_ms is not None and r.ttft_answer_ms == r.ttft_ms for r in rows)


async def test_responses_stream_fails_over_before_output_and_errors_after(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """A failing first route is replaced before any output event; a stream cut after output ends with a
    Responses-shaped error event that the SDK raises as APIError."""
    (sims, gw) = await _gw(sim, gateway, "instant", n=2, models=("up",))
    sims[0].set_faults(Faults(error_rate=1.0, error_statuses=[503]))
    sims[1].set_faults(Faults(error_rate=1.0, error_statuses=[503]))
    client = oai(gw.url)
    with pytest.raises(openai.APIStatusError) as exc:
        await client.responses.create(model="qwen3", input="hi", max_output_tokens=3)
    assert exc.value.status_code >= 500
    sims[1].clear_faults()
    ok = await client.responses.create(model="qwen3", input="hi", max_output_tokens=3, stream=True)
    events = [e async for e in ok]
    assert sum(e.type == "response.output_text.delta" for e in events) == 3
    for p in sims:
        p.set_faults(Faults(disconnect_after_tokens=2))
    async with aiohttp.ClientSession() as s:
        body = {"model": "qwen3", "input": "hi", "max_output_tokens": 9, "stream": True}
        async with s.post(f"{gw.url}/responses", json=body) as r:
            assert r.status == 200
            raw = await r.read()
    assert raw.count(b"event: response.output_text.delta") == 2
    assert b"event: error" in raw
    assert b'"type":"error"' in raw
    assert b"response.completed" not in raw
    stream = await client.responses.create(model="qwen3", input="hi", max_output_tokens=9, stream=True)
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass


async def test_errors_map_to_the_sdk_exception_classes(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """Through the gateway: an unknown alias is NotFoundError, a bad body BadRequestError, an exhausted quota
    RateLimitError, upstream 5xx on every route InternalServerError-class (>= 500)."""
    (sims, gw) = await _gw(sim, gateway, "instant")
    client = oai(gw.url)
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="nope", messages=MSG)
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="qwen3", messages=[])
    sims[0].set_faults(Faults(quota_exhausted=True))
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="qwen3", messages=MSG, max_tokens=2)
    sims[0].set_faults(Faults(quota_exhausted=False, error_rate=1.0, error_statuses=[500]))
    with pytest.raises(openai.APIStatusError) as exc:
        await client.chat.completions.create(model="qwen3", messages=MSG, max_tokens=2, stream=True)
    assert exc.value.status_code >= 500
