"""Claude Code's own request through the gateway (issue 38), sent by the official ``anthropic`` SDK as Claude Code 2.1.x
sends it (tests/conformance/claude_code_2_1_request.json: adaptive thinking, context-management edits, effort,
cached system blocks, 20 tools, its beta headers): served by a translated route, and a request one route cannot
carry goes to a route of the alias that can. Which route served is read from the simulator's truth."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic

from conftest import GatewayHandle, SimFactory
from sim_truth import truth
from tailgate.sim.provider import SimProvider

GwFactory = Callable[..., Awaitable[GatewayHandle]]
FAST = {
    "pre_median_s": 0.0,
    "step_ms": 0.2,
    "jitter": 0.0,
    "default_output_tokens": 8,
    "reasoning_median": 4,
    "dialect": "maas",
}
"""A fast DeepSeek-like provider: its chat API takes DeepSeek's `thinking` switch (the `maas` dialect), and it serves
Anthropic's Messages API too (the `instant` preset)."""
KEY = "tg-claude-code-key-0123456789"
RECORDED = json.loads((Path(__file__).parents[1] / "conformance" / "claude_code_2_1_request.json").read_text())
SDK_FIELDS = ("model", "max_tokens", "messages", "system", "tools", "metadata", "thinking")
"""The recorded body's fields the SDK's ``create`` names; the rest ride in ``extra_body``, as sent."""


def _root(url: str) -> str:
    return url.removesuffix("/v1")


def _config(routes: list[tuple[SimProvider, str, float]]) -> dict[str, Any]:
    """Alias ``claude`` over (simulator, mode, weight) routes; a ``passthrough`` provider has ``anthropic_base_url``."""
    providers: dict[str, Any] = {}
    for i, (p, mode, _) in enumerate(routes):
        conf: dict[str, Any] = {"base_url": p.url, "api_keys": [f"sk-p{i}-0123456789"]}
        if mode == "passthrough":
            conf["anthropic_base_url"] = _root(p.url)
        providers[f"p{i}"] = conf
    return {
        "providers": providers,
        "models": {
            "claude": {
                "policy": "weighted",
                "routes": [{"provider": f"p{i}", "model": "up", "weight": w} for i, (_, _, w) in enumerate(routes)],
            }
        },
        "keys": [{"id": "agent", "key": KEY}],
    }


async def _apis(p: SimProvider) -> list[str]:
    """The protocol each request the simulator served was spoken to it in (its truth)."""
    return [rec["api"] for rec in await truth(p.url)]


@pytest.fixture
async def client() -> AsyncIterator[Callable[[GatewayHandle], AsyncAnthropic]]:
    made: list[AsyncAnthropic] = []

    def factory(gw: GatewayHandle) -> AsyncAnthropic:
        c = AsyncAnthropic(base_url=gw.root_url, api_key=KEY, max_retries=0, timeout=20)
        made.append(c)
        return c

    yield factory
    for c in made:
        await c.close()


async def _claude_code_turn(c: AsyncAnthropic, **override: Any) -> tuple[str, list[str]]:
    """One first turn as Claude Code sends it (streamed); (the upstream API header, the event types received)."""
    body = {**RECORDED["body"], **override}
    known = {k: body[k] for k in SDK_FIELDS}
    extra = {k: v for k, v in body.items() if k not in SDK_FIELDS and k != "stream"}
    raw = await c.messages.with_raw_response.create(
        stream=True, extra_body=extra, extra_headers=RECORDED["headers"], **known
    )
    events = [e.type async for e in await raw.parse()]
    return raw.headers["x-tailgate-upstream-api"], events


async def test_claude_codes_request_is_served_through_a_translated_route(
    sim: SimFactory, gateway: GwFactory, client: Callable[[GatewayHandle], AsyncAnthropic]
) -> None:
    """Claude Code 2.1.x's first turn on an alias with only a translated route is served (it was a 400
    ``context_management cannot be translated``): a whole event stream, spoken to the provider as OpenAI chat."""
    p = await sim("instant", models=("up",), engine=FAST)
    gw = await gateway(_config([(p, "translation", 1.0)]))
    api, events = await _claude_code_turn(client(gw), max_tokens=16)
    assert api == "openai"
    assert events[0] == "message_start"
    assert events[-1] == "message_stop"
    assert "content_block_delta" in events
    assert await _apis(p) == ["openai"]


@pytest.mark.parametrize("weighted", ["passthrough", "translation"])
async def test_claude_code_on_a_mixed_alias_is_served_by_either_kind_of_route(
    sim: SimFactory, gateway: GwFactory, client: Callable[[GatewayHandle], AsyncAnthropic], weighted: str
) -> None:
    """The issue's alias (a passthrough and a translated route), its weight on one kind: 6 of Claude Code's turns,
    0 failed, each served by the weighted kind (the simulator's truth). One session's turns share their prompt
    prefix, so affinity keeps them on one route: the weight, not chance, picks the kind here."""
    native = await sim("instant", models=("up",), engine=FAST)
    chat = await sim("instant", models=("up",), engine=FAST)
    w = 1.0 if weighted == "passthrough" else 0.0
    gw = await gateway(_config([(native, "passthrough", w), (chat, "translation", 1.0 - w)]))
    c = client(gw)
    served = [(await _claude_code_turn(c, max_tokens=16))[0] for _ in range(6)]
    want = "anthropic" if weighted == "passthrough" else "openai"
    assert served == [want] * 6
    assert await _apis(native if weighted == "passthrough" else chat) == [want] * 6


MCP = {"mcp_servers": [{"type": "url", "url": "https://mcp.example.com/sse", "name": "docs"}]}


async def test_a_request_a_route_cannot_carry_goes_to_a_route_that_can(
    sim: SimFactory, gateway: GwFactory, client: Callable[[GatewayHandle], AsyncAnthropic]
) -> None:
    """A field a translation cannot carry (``mcp_servers``: only Anthropic's servers call them) on a 50/50 alias:
    the chooser leaves the translated route out before it orders, so all 12 requests go to the passthrough and none
    is a 400 — however the weights fall."""
    native = await sim("instant", models=("up",), engine=FAST)
    chat = await sim("instant", models=("up",), engine=FAST)
    gw = await gateway(_config([(native, "passthrough", 0.5), (chat, "translation", 0.5)]))
    c = client(gw)
    for _ in range(12):
        raw = await c.messages.with_raw_response.create(
            model="claude", max_tokens=8, messages=[{"role": "user", "content": "hi"}], extra_body=MCP
        )
        assert raw.headers["x-tailgate-upstream-api"] == "anthropic"
    assert await _apis(native) == ["anthropic"] * 12
    assert await _apis(chat) == []


async def test_a_400_only_when_no_route_of_the_alias_can_carry_it(
    sim: SimFactory, gateway: GwFactory, client: Callable[[GatewayHandle], AsyncAnthropic]
) -> None:
    """With translated routes only, the same request is a 400 naming the field, and nothing reaches a provider."""
    a = await sim("instant", models=("up",), engine=FAST)
    b = await sim("instant", models=("up",), engine=FAST)
    gw = await gateway(_config([(a, "translation", 0.5), (b, "translation", 0.5)]))
    with pytest.raises(anthropic.BadRequestError) as bad:
        await client(gw).messages.create(
            model="claude", max_tokens=8, messages=[{"role": "user", "content": "hi"}], extra_body=MCP
        )
    assert "mcp_servers" in bad.value.message
    assert await _apis(a) == []
    assert await _apis(b) == []


def test_a_translated_attempt_leaves_out_the_providers_drop_fields() -> None:
    """``providers.NAME.drop_fields`` holds for a translated ``/v1/messages`` attempt too: Claude Code's
    ``metadata.user_id`` becomes the chat ``user``, and a provider that drops ``user`` never gets it."""
    from tailgate.gateway.apis.messages import Messages

    body = json.dumps(RECORDED["body"]).encode()
    messages = Messages(body, json.loads(body), RECORDED["headers"])
    upstream: Any = object()  # where the attempt would go: only carried along here
    kept = messages.attempt(upstream, None, "up", "thinking")
    dropped = messages.attempt(upstream, None, "up", "thinking", drop_fields=frozenset({"user", "thinking"}))
    assert isinstance(kept.payload, dict)
    assert isinstance(dropped.payload, dict)
    assert kept.payload["user"] == RECORDED["body"]["metadata"]["user_id"]
    assert kept.payload["thinking"] == {"type": "enabled"}
    assert set(kept.payload) - set(dropped.payload) == {"user", "thinking"}
