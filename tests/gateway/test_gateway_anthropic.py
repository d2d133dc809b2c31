"""Anthropic's Messages API through the gateway (issue 32), with the official ``anthropic`` SDK unchanged but for
``base_url`` and the key: in both upstream modes — *passthrough* to a provider's native endpoint
(``anthropic_base_url``) and *translation* to OpenAI chat — over real simulated providers. Which mode served is
read from the simulator's truth (``api``: the protocol it was spoken to in), not from the gateway's word."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import anthropic
import httpx2
import pytest
from aiohttp import web
from anthropic import Anthropic, AsyncAnthropic
from anthropic.types import MessageParam, ThinkingConfigParam, ToolParam

from anthropic_grammar import check_stream
from conftest import GatewayHandle, SimFactory
from sim_truth import truth as sim_truth
from tailgate.ledger import read_rows
from tailgate.sim.faults import Faults
from tailgate.sim.provider import SimProvider

GwFactory = Callable[..., Awaitable[GatewayHandle]]
FAST = {"pre_median_s": 0.0, "step_ms": 1.0, "jitter": 0.0, "default_output_tokens": 12, "reasoning_median": 6}
KEY = "tg-anthropic-client-key-0123456789"
HI: list[MessageParam] = [{"role": "user", "content": "hello there"}]
WEATHER: ToolParam = {
    "name": "get_weather",
    "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
MODES = ("passthrough", "translation")
STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
}
"""The simulator's finish reason (its truth) as the Messages API says it. Its chat dialect takes ``max_tokens``
as the answer's length (a translated request ends at it), its Anthropic dialect as a cap on a natural length."""


def root(url: str) -> str:
    """The Anthropic SDK's base_url is a host root: it appends /v1/messages itself."""
    return url.removesuffix("/v1")


def _provider(p: SimProvider, mode: str, name: str) -> dict[str, Any]:
    conf: dict[str, Any] = {"base_url": p.url, "api_keys": [f"sk-{name}-0123456789"]}
    if mode == "passthrough":
        conf["anthropic_base_url"] = root(p.url)
    return conf


def config(*providers: tuple[SimProvider, str], **extra: Any) -> dict[str, Any]:
    """One alias ``claude`` over the given (simulator, mode) providers: all weight on the first, the rest behind it."""
    names = [f"p{i}" for i in range(len(providers))]
    return {
        "providers": {n: _provider(p, mode, n) for n, (p, mode) in zip(names, providers, strict=True)},
        "models": {
            "claude": {
                "policy": "weighted",
                "routes": [
                    {"provider": n, "model": "up", "weight": 1.0 if i == 0 else 0.0} for i, n in enumerate(names)
                ],
            }
        },
        "keys": [{"id": "agent", "key": KEY}],
        **extra,
    }


async def truth(p: SimProvider) -> list[dict[str, Any]]:
    """What the simulator served, as it timed and counted it (oldest first)."""
    return sorted(await sim_truth(p.url), key=lambda rec: rec["received_at"])


async def truth_apis(p: SimProvider) -> list[str]:
    """The protocol each request the simulator served was spoken to it in."""
    return [rec["api"] for rec in await truth(p)]


@pytest.fixture
async def ant() -> AsyncIterator[Callable[..., AsyncAnthropic]]:
    made: list[AsyncAnthropic] = []

    def factory(gw: GatewayHandle, key: str = KEY, **kw: Any) -> AsyncAnthropic:
        c = AsyncAnthropic(base_url=gw.root_url, api_key=key, max_retries=0, timeout=10, **kw)
        made.append(c)
        return c

    yield factory
    for c in made:
        await c.close()


async def _one(
    sim: SimFactory, gateway: GwFactory, mode: str, preset: str = "instant", engine: Any = None, **kw: Any
) -> Any:
    p = await sim(preset, models=("up",), engine={**FAST, **(engine or {})}, **kw)
    return p, await gateway(config((p, mode)))


@pytest.mark.parametrize("mode", MODES)
async def test_async_sdk_message_and_stream(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic], mode: str
) -> None:
    """create() and messages.stream() (its accumulator: text_stream is the final text), the alias rewritten, usage
    counted; the simulator saw the protocol of the mode; the ledger row says api=anthropic with its tokens."""
    p, gw = await _one(sim, gateway, mode)
    client = ant(gw)
    raw = await client.messages.with_raw_response.create(model="claude", max_tokens=64, messages=HI)
    msg = await raw.parse()
    assert raw.headers["x-tailgate-upstream-api"] == ("anthropic" if mode == "passthrough" else "openai")
    assert msg.type == "message"
    assert msg.role == "assistant"
    assert msg.content[0].type == "text"
    assert msg.content[0].text.strip()
    assert msg.usage.input_tokens > 0
    async with client.messages.stream(model="claude", max_tokens=64, messages=HI) as stream:
        pieces = [t async for t in stream.text_stream]
        final = await stream.get_final_message()
    assert final.content[0].type == "text"
    assert "".join(pieces) == final.content[0].text
    want = "anthropic" if mode == "passthrough" else "openai"
    served = await truth(p)
    assert [rec["api"] for rec in served] == [want, want]
    counts = [rec["output_tokens"] for rec in served]
    assert [msg.usage.output_tokens, final.usage.output_tokens] == counts
    assert len(pieces) == counts[1]  # one text delta per token
    assert [msg.stop_reason, final.stop_reason] == [STOP[rec["finish_reason"]] for rec in served]
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    assert [(r.api, r.endpoint, r.stream, r.status, r.outcome, r.key_id) for r in rows] == [
        ("anthropic", "messages", False, 200, "ok", "agent"),
        ("anthropic", "messages", True, 200, "ok", "agent"),
    ]
    assert [r.output_tokens for r in rows] == counts
    assert all(r.prompt_tokens and r.prompt_tokens > 0 for r in rows)
    assert all(r.tokens_estimated is False for r in rows)
    assert rows[1].ttft_ms is not None
    assert rows[1].ttft_answer_ms is not None


@pytest.mark.parametrize("mode", MODES)
async def test_sync_sdk(sim: SimFactory, gateway: GwFactory, mode: str) -> None:
    """The blocking client (run in a thread: the gateway shares this test's loop), key in Authorization: Bearer
    (the SDK's auth_token, Claude Code's ANTHROPIC_AUTH_TOKEN)."""
    p, gw = await _one(sim, gateway, mode)
    with Anthropic(base_url=gw.root_url, auth_token=KEY, max_retries=0, timeout=10) as client:
        msg = await asyncio.to_thread(client.messages.create, model="claude", max_tokens=64, messages=HI)
    assert msg.content[0].type == "text"
    assert msg.usage.output_tokens == (await truth(p))[0]["output_tokens"]


@pytest.mark.parametrize("mode", MODES)
async def test_tool_use_round_trip(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic], mode: str
) -> None:
    """A forced tool call comes back as a tool_use block (streamed input_json_delta accumulated to the same input),
    and the tool_result sent back gets a text answer."""
    p, gw = await _one(sim, gateway, mode, engine={"tool_call_rate": 0.0})
    client = ant(gw)
    first = await client.messages.create(
        model="claude", max_tokens=64, messages=HI, tools=[WEATHER], tool_choice={"type": "any"}
    )
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert use.name == "get_weather"
    assert isinstance(use.input, dict)
    assert "city" in use.input
    async with client.messages.stream(
        model="claude", max_tokens=64, messages=HI, tools=[WEATHER], tool_choice={"type": "any"}
    ) as stream:
        streamed = await stream.get_final_message()
    s_use = next(b for b in streamed.content if b.type == "tool_use")
    assert s_use.name == "get_weather"
    assert "city" in s_use.input
    follow: list[MessageParam] = [
        *HI,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}]},
    ]
    second = await client.messages.create(model="claude", max_tokens=64, messages=follow, tools=[WEATHER])
    assert [b.type for b in second.content] == ["text"]
    assert second.stop_reason == STOP[(await truth(p))[-1]["finish_reason"]]


@pytest.mark.parametrize("mode", MODES)
async def test_thinking(sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic], mode: str) -> None:
    """thinking enabled: a thinking block first, then the text; passthrough keeps the provider's signature byte for
    byte, a translation has none to give (``""``). Off: no thinking block."""
    _, gw = await _one(sim, gateway, mode, preset="reasoner")
    client = ant(gw)
    on: ThinkingConfigParam = {"type": "enabled", "budget_tokens": 1024}
    msg = await client.messages.create(model="claude", max_tokens=256, messages=HI, thinking=on)
    assert [b.type for b in msg.content] == ["thinking", "text"]
    thinking = msg.content[0]
    assert thinking.type == "thinking"
    assert thinking.thinking
    assert (thinking.signature != "") is (mode == "passthrough")
    async with client.messages.stream(model="claude", max_tokens=256, messages=HI, thinking=on) as stream:
        final = await stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.usage.output_tokens > len(final.content[1].text.split())  # type: ignore[union-attr]
    off = await client.messages.create(model="claude", max_tokens=256, messages=HI, thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"]


async def raw_stream(gw: GatewayHandle, body: dict[str, Any], **headers: str) -> tuple[int, bytes]:
    async with httpx2.AsyncClient(timeout=10) as http:
        resp = await http.post(
            gw.root_url + "/v1/messages",
            json={"model": "claude", "max_tokens": 256, "stream": True, **body},
            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01", **headers},
        )
        return resp.status_code, resp.content


@pytest.mark.parametrize("mode", MODES)
async def test_streams_conform_to_the_grammar(sim: SimFactory, gateway: GwFactory, mode: str) -> None:
    """The gateway's streams, raw, against Anthropic's documented event grammar: text, thinking, tool use."""
    _, gw = await _one(sim, gateway, mode, preset="reasoner")
    cases: dict[str, tuple[dict[str, Any], list[str]]] = {
        "text": ({"messages": HI, "thinking": {"type": "disabled"}}, ["text"]),
        "thinking": ({"messages": HI, "thinking": {"type": "enabled", "budget_tokens": 512}}, ["thinking", "text"]),
        "tool": (
            {
                "messages": HI,
                "thinking": {"type": "disabled"},
                "tools": [WEATHER],
                "tool_choice": {"type": "tool", "name": "get_weather"},
            },
            ["tool_use"],
        ),
    }
    for name, (body, kinds) in cases.items():
        status, raw = await raw_stream(gw, body)
        assert status == 200, (name, raw[:300])
        checked = check_stream(raw)
        assert checked.events[-1] == "message_stop", name
        assert checked.error is None
        assert [b.type for b in checked.blocks] == kinds, name
        assert checked.usage["output_tokens"] > 0


@pytest.mark.parametrize("mode", MODES)
async def test_a_failure_mid_stream_ends_with_an_error_event(sim: SimFactory, gateway: GwFactory, mode: str) -> None:
    """The provider cuts the stream after 5 tokens: the client already has output, so no fallback; the stream ends
    with an Anthropic ``error`` event (grammar-checked: nothing after it, never a silent cut), the SDK raises."""
    p, gw = await _one(sim, gateway, mode, faults={"disconnect_after_tokens": 5})
    status, raw = await raw_stream(gw, {"messages": HI})
    assert status == 200
    checked = check_stream(raw)
    assert checked.events[-1] == "error"
    assert checked.error is not None
    assert checked.error["type"] == "api_error"
    assert checked.blocks[0].text.split() == [*checked.blocks[0].text.split()][:5]
    client = AsyncAnthropic(base_url=gw.root_url, api_key=KEY, max_retries=0, timeout=10)
    with pytest.raises(anthropic.APIError):
        async with client.messages.stream(model="claude", max_tokens=64, messages=HI) as stream:
            await stream.get_final_message()
    await client.close()
    p.set_faults(Faults())
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    assert [r.outcome for r in rows] == ["cut", "cut"]


async def test_refusals_in_anthropics_shape(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic]
) -> None:
    """The gateway's own refusals are Anthropic-shaped, so the SDK raises the right classes: no key / a wrong key
    → 401 authentication_error; an unknown alias → 404 not_found_error; a field a translation cannot carry → 400
    naming it; a key over its rpm → 429 rate_limit_error with Retry-After; the key works in x-api-key too."""
    p = await sim("instant", models=("up",), engine=FAST)
    cfg = config((p, "translation"))
    cfg["keys"].append({"id": "slow", "key": "tg-slow-key-0123456789", "rpm": 1})
    gw = await gateway(cfg)
    async with httpx2.AsyncClient(timeout=10) as http:
        r = await http.post(gw.root_url + "/v1/messages", json={"model": "claude", "max_tokens": 8, "messages": HI})
    assert r.status_code == 401
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "authentication_error"
    assert "x-api-key" in r.json()["error"]["message"]
    with pytest.raises(anthropic.AuthenticationError):
        await ant(gw, key="tg-wrong-0123456789").messages.create(model="claude", max_tokens=8, messages=HI)
    client = ant(gw)
    with pytest.raises(anthropic.NotFoundError) as nf:
        await client.messages.create(model="nope", max_tokens=8, messages=HI)
    assert nf.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    doc: list[MessageParam] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "read this"},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}},
            ],
        }
    ]
    with pytest.raises(anthropic.BadRequestError) as bad:
        await client.messages.create(model="claude", max_tokens=8, messages=doc)
    assert "messages.0.content.1" in bad.value.message
    slow = ant(gw, key="tg-slow-key-0123456789")
    ok = await slow.messages.create(model="claude", max_tokens=8, messages=HI)
    assert ok.content
    with pytest.raises(anthropic.RateLimitError) as limited:
        await slow.messages.create(model="claude", max_tokens=8, messages=HI)
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert limited.value.response.headers.get("retry-after")
    async with aiohttp.ClientSession() as s, s.get(f"{gw.root_url}/metrics") as r2:
        metrics = await r2.text()
    assert 'api="anthropic"' in metrics
    assert 'outcome="rpm_limited"' in metrics


async def test_failover_from_a_passthrough_down_to_a_translation(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic]
) -> None:
    """The passthrough provider is down before the first byte (a 503 outage): every request, streamed or not, is
    served by the translation route behind it — none fails; the simulators' truth shows who served what."""
    native = await sim("instant", models=("up",), engine=FAST, faults={"outage": True})
    chat = await sim("instant", models=("up",), engine=FAST)
    gw = await gateway(config((native, "passthrough"), (chat, "translation")))
    client = ant(gw)
    for _ in range(3):
        msg = await client.messages.create(model="claude", max_tokens=32, messages=HI)
        assert msg.content[0].type == "text"
        async with client.messages.stream(model="claude", max_tokens=32, messages=HI) as stream:
            final = await stream.get_final_message()
        assert final.content[0].type == "text"
    assert await truth_apis(chat) == ["openai"] * 6
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    assert [(r.status, r.provider, r.api) for r in rows] == [(200, "p1", "anthropic")] * 6
    assert rows[0].attempts == 2  # the passthrough's 503 first (later ones may skip it: its breaker opens)


async def test_count_tokens_where_a_native_endpoint_exists(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic]
) -> None:
    """/v1/messages/count_tokens is forwarded to the alias's provider with a native endpoint (the count is the
    simulator's own, asked directly); an alias with none answers a 404 not_found_error that says why."""
    native = await sim("instant", models=("up",), engine=FAST)
    chat = await sim("instant", models=("up",), engine=FAST)
    cfg = config((chat, "translation"), (native, "passthrough"))  # the native route is second: still found
    cfg["models"]["chat-only"] = {"routes": [{"provider": "p0", "model": "up"}]}
    gw = await gateway(cfg)
    client = ant(gw)
    counted = await client.messages.count_tokens(model="claude", messages=HI, system="be brief")
    async with AsyncAnthropic(base_url=root(native.url), api_key="sk-x", max_retries=0) as direct:
        truth_count = await direct.messages.count_tokens(model="up", messages=HI, system="be brief")
    assert counted.input_tokens == truth_count.input_tokens > 0
    with pytest.raises(anthropic.NotFoundError) as nf:
        await client.messages.count_tokens(model="chat-only", messages=HI)
    assert "anthropic_base_url" in nf.value.message
    with pytest.raises(anthropic.AuthenticationError):
        await ant(gw, key="tg-wrong-0123456789").messages.count_tokens(model="claude", messages=HI)


async def test_an_unknown_field_is_dropped_when_translating(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic]
) -> None:
    """A field the gateway does not know cannot be said in chat: a translation leaves it out (issue 38: never a 400
    for a field Anthropic's API may accept) — the strict simulator, which refuses unknown fields, served the chat."""
    p, gw = await _one(sim, gateway, "translation")
    msg = await ant(gw).messages.create(model="claude", max_tokens=8, messages=HI, extra_body={"bogus_knob": 1})
    assert msg.content
    assert await truth_apis(p) == ["openai"]


async def test_a_passthrough_relays_the_providers_error_event_as_the_last_frame(
    gateway: GwFactory, ant: Callable[..., AsyncAnthropic]
) -> None:
    """A native endpoint that fails mid-stream with its own ``error`` event (a stand-in server: the simulator has no
    such fault): the client gets the events so far, then that error event, and nothing after it (grammar-checked);
    the ledger row says stream_error."""
    frames: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "up",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 5, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]

    async def messages(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for f in frames:
            await resp.write(f"event: {f['type']}\ndata: {json.dumps(f)}\n\n".encode())
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        url = f"http://127.0.0.1:{port}"
        gw = await gateway(
            {
                "providers": {
                    "nat": {"base_url": url + "/v1", "anthropic_base_url": url, "api_keys": ["sk-n-0123456789"]}
                },
                "models": {"claude": {"routes": [{"provider": "nat", "model": "up"}]}},
                "keys": [{"id": "agent", "key": KEY}],
            }
        )
        status, raw = await raw_stream(gw, {"messages": HI})
        assert status == 200
        checked = check_stream(raw)
        assert checked.events == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "error",
        ]
        assert checked.error == {"type": "overloaded_error", "message": "Overloaded"}
        assert checked.blocks[0].text == "Hello"
        await gw.stop()
        rows = read_rows(gw.gateway.ledger.path)
        assert [(r.outcome, r.api, r.prompt_tokens) for r in rows] == [("stream_error", "anthropic", 5)]
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("switch", "honoured"),
    [("thinking", True), ("enable_thinking", True), ("chat_template_kwargs", True), ("none", False)],
)
async def test_a_translation_switches_thinking_the_providers_way(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic], switch: str, honoured: bool
) -> None:
    """``thinking: disabled`` reaches a thinking-by-default model in the provider's own field
    (``providers.NAME.thinking_switch``; the simulator honours all three): no thinking block. With ``none`` the
    field is not sent, so the model thinks as it would by default."""
    p = await sim("reasoner", models=("up",), engine=FAST)
    cfg = config((p, "translation"))
    cfg["providers"]["p0"]["thinking_switch"] = switch
    gw = await gateway(cfg)
    msg = await ant(gw).messages.create(model="claude", max_tokens=64, messages=HI, thinking={"type": "disabled"})
    assert [b.type for b in msg.content] == (["text"] if honoured else ["thinking", "text"])
    assert (((await truth(p))[0]["reasoning_tokens"] or 0) > 0) is not honoured  # the simulator's own word


def test_presets_say_how_their_chat_api_switches_thinking() -> None:
    """The presets' defaults; the user's value wins."""
    from tailgate.config.loader import validate_data
    from tailgate.config.resolve import resolve_providers
    from tailgate.config.schema import GatewayConfig

    names = ("deepseek", "bailian", "siliconflow", "vllm", "openai")
    providers: dict[str, Any] = {
        n: {"preset": n, "api_keys": ["k"], **({"base_url": "http://127.0.0.1:1/v1"} if n == "vllm" else {})}
        for n in names
    }
    providers["mine"] = {"preset": "vllm", "base_url": "http://127.0.0.1:2/v1", "thinking_switch": "none"}
    models = {"m": {"routes": [{"provider": n, "model": "x"} for n in providers]}}
    cfg = validate_data({"providers": providers, "models": models}, GatewayConfig, "test")
    resolved = resolve_providers(cfg)
    assert {n: resolved[n].thinking_switch for n in providers} == {
        "deepseek": "thinking",
        "bailian": "enable_thinking",
        "siliconflow": "enable_thinking",
        "vllm": "chat_template_kwargs",
        "openai": "reasoning_effort",
        "mine": "none",
    }


@pytest.mark.parametrize(
    ("mode", "front"), [("passthrough", "lean"), ("translation", "lean"), ("translation", "aiohttp")]
)
async def test_refusals_before_the_proxy_and_the_deadline_speak_anthropic(
    sim: SimFactory, gateway: GwFactory, mode: str, front: str
) -> None:
    """What the server refuses before the proxy (a body over max_body_bytes: 413; a non-JSON content type: 415)
    and the request deadline (504 before the first byte; after it, the end of the stream) are Anthropic-shaped on
    /v1/messages: an error body, or an ``error`` event that ends the stream (grammar-checked). Both HTTP fronts:
    the gateway's own (``lean``) and aiohttp's."""
    p = await sim("instant", models=("up",), engine=FAST)
    cfg = config((p, mode), max_body_bytes=4096, server={"request_deadline": "1s", "http_front": front})
    gw = await gateway(cfg)
    headers = {"x-api-key": KEY}
    async with httpx2.AsyncClient(timeout=10) as http:
        big = {"model": "claude", "max_tokens": 8, "messages": [{"role": "user", "content": "x" * 8000}]}
        r = await http.post(gw.root_url + "/v1/messages", json=big, headers=headers)
        assert r.status_code == 413
        assert r.json()["type"] == "error"
        assert r.json()["error"]["type"] == "request_too_large"
        r = await http.post(
            gw.root_url + "/v1/messages", content=b"hi", headers={**headers, "Content-Type": "application/xml"}
        )
        assert r.status_code == 415
        assert r.json()["error"]["type"] == "invalid_request_error"
        p.set_faults(Faults(stall_headers_s=3.0))
        r = await http.post(gw.root_url + "/v1/messages", json={**big, "messages": HI}, headers=headers)
        assert r.status_code == 504
        assert r.json()["error"]["type"] == "timeout_error"
        assert "deadline" in r.json()["error"]["message"]
    p.clear_faults()
    p.set_faults(Faults(slow_drip_s=0.3))
    status, raw = await raw_stream(gw, {"messages": HI, "max_tokens": 30})
    assert status == 200
    checked = check_stream(raw)
    assert checked.events[-1] == "error"
    assert checked.error is not None
    assert checked.error["type"] == "timeout_error"
    p.clear_faults()


async def test_a_hedge_across_protocols(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic]
) -> None:
    """A hedged alias whose native endpoint stalls before its first token: after the hedge delay the same request
    also goes to the translation route, which wins; the answer (whole or streamed) says who and how."""
    native = await sim("instant", models=("up",), engine=FAST, faults={"stall_first_token_s": 3.0})
    chat = await sim("instant", models=("up",), engine=FAST)
    cfg = config((native, "passthrough"), (chat, "translation"))
    cfg["models"]["claude"]["hedge"] = {"after": "0.1s", "budget": 1.0}
    gw = await gateway(cfg)
    client = ant(gw)
    raw = await client.messages.with_raw_response.create(model="claude", max_tokens=16, messages=HI)
    msg = await raw.parse()
    assert msg.content[0].type == "text"
    assert raw.headers["x-tailgate-hedged"] == "1"
    assert raw.headers["x-tailgate-provider"] == "p1"
    assert raw.headers["x-tailgate-upstream-api"] == "openai"
    status, body = await raw_stream(gw, {"messages": HI, "max_tokens": 16})
    assert status == 200
    assert check_stream(body).events[-1] == "message_stop"
    assert await truth_apis(chat) == ["openai", "openai"]


async def test_top_k_reaches_a_translated_provider_only_when_its_preset_takes_it(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic]
) -> None:
    """A strict OpenAI-dialect upstream (the simulator's ``openai`` preset refuses ``top_k`` like api.openai.com):
    a translated request with ``top_k`` is answered, because the gateway leaves ``top_k`` out for a provider whose
    preset does not take it. The same upstream configured as ``preset: vllm`` (which takes it) gets ``top_k``, and
    its own 400 naming the field reaches the client — the field is really sent where declared."""
    strict = await sim("openai", models=("up",), engine=FAST)
    gw = await gateway(config((strict, "translation")))
    msg = await ant(gw).messages.create(model="claude", max_tokens=8, messages=HI, extra_body={"top_k": 5})
    assert msg.content
    assert [r["status"] for r in await truth(strict)] == [200]

    cfg = config((strict, "translation"))
    cfg["providers"]["p0"]["preset"] = "vllm"
    gw2 = await gateway(cfg)
    with pytest.raises(anthropic.BadRequestError) as exc:
        await ant(gw2).messages.create(model="claude", max_tokens=8, messages=HI, extra_body={"top_k": 5})
    assert "top_k" in exc.value.message
    assert [r["status"] for r in await truth(strict)] == [200, 400]


async def test_count_tokens_applies_the_keys_standing_and_rpm_and_is_counted(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic]
) -> None:
    """count_tokens asks the key what a generation asks, short of reserving tokens: a key not allowed the alias
    → 403 permission_error; a key over its rpm → 429 rate_limit_error with Retry-After (the count took its one
    request a minute, so the generation after it is refused too). Every answer is counted in
    ``tailgate_count_tokens_total`` by alias, the provider that counted, and status."""
    native = await sim("instant", models=("up",), engine=FAST)
    cfg = config((native, "passthrough"))
    cfg["keys"].append({"id": "slow", "key": "tg-slow-key-0123456789", "rpm": 1})
    cfg["keys"].append({"id": "other", "key": "tg-other-key-0123456789", "models": ["elsewhere"]})
    cfg["models"]["elsewhere"] = {"routes": [{"provider": "p0", "model": "up"}]}
    gw = await gateway(cfg)
    slow = ant(gw, key="tg-slow-key-0123456789")
    counted = await slow.messages.count_tokens(model="claude", messages=HI)
    assert counted.input_tokens > 0
    with pytest.raises(anthropic.RateLimitError) as limited:
        await slow.messages.count_tokens(model="claude", messages=HI)
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert limited.value.response.headers.get("retry-after")
    with pytest.raises(anthropic.RateLimitError):
        await slow.messages.create(model="claude", max_tokens=8, messages=HI)
    with pytest.raises(anthropic.PermissionDeniedError):
        await ant(gw, key="tg-other-key-0123456789").messages.count_tokens(model="claude", messages=HI)
    with pytest.raises(anthropic.AuthenticationError):
        await ant(gw, key="tg-wrong-0123456789").messages.count_tokens(model="claude", messages=HI)
    async with aiohttp.ClientSession() as s, s.get(f"{gw.root_url}/metrics") as r:
        metrics = await r.text()
    assert 'tailgate_count_tokens_total{alias="claude",provider="p0",status="200"} 1.0' in metrics
    assert 'tailgate_count_tokens_total{alias="claude",provider="",status="429"} 1.0' in metrics
    assert 'tailgate_count_tokens_total{alias="claude",provider="",status="403"} 1.0' in metrics
    assert 'tailgate_count_tokens_total{alias="claude",provider="",status="401"} 1.0' in metrics


async def test_a_count_tokens_refused_for_want_of_a_native_endpoint_keeps_the_keys_rpm(
    sim: SimFactory, gateway: GwFactory, ant: Callable[..., AsyncAnthropic]
) -> None:
    """A refusal of ours keeps nothing (docs/keys.md): an alias with no native endpoint answers count_tokens a 404
    before the key's rpm is taken, so a key of ``rpm: 1`` still gets its one generation afterwards."""
    native = await sim("instant", models=("up",), engine=FAST)
    chat = await sim("instant", models=("up",), engine=FAST)
    cfg = config((chat, "translation"), (native, "passthrough"))
    cfg["models"]["chat-only"] = {"routes": [{"provider": "p0", "model": "up"}]}
    cfg["keys"].append({"id": "one", "key": "tg-one-key-01234567890", "rpm": 1})
    gw = await gateway(cfg)
    one = ant(gw, key="tg-one-key-01234567890")
    for _ in range(2):
        with pytest.raises(anthropic.NotFoundError):
            await one.messages.count_tokens(model="chat-only", messages=HI)
    answer = await one.messages.create(model="chat-only", max_tokens=8, messages=HI)
    assert answer.content  # the rpm's one request was still there
    with pytest.raises(anthropic.RateLimitError):  # ... and now it is spent
        await one.messages.create(model="chat-only", max_tokens=8, messages=HI)
