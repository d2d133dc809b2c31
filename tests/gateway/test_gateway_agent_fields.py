"""Fields the gateway does not know are the provider's business (issue 38): Codex CLI's Responses body reaches a
strict provider whole, an unknown field is passed on as sent, and a provider's ``drop_fields`` (the ``openai``
preset's vendor fields) leave before the request goes to it. Official ``openai`` SDK → real gateway → simulator."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest

from conftest import GatewayHandle, SimFactory

GwFactory = Callable[..., Awaitable[GatewayHandle]]
FAST = {"pre_median_s": 0.0, "step_ms": 1.0, "jitter": 0.0, "default_output_tokens": 6}
CODEX_TOOL = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file in the workspace",
    "strict": False,
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}


def _config(url: str, **provider: Any) -> dict[str, Any]:
    return {
        "providers": {"up": {"base_url": url, "api_keys": ["sk-up-0123456789"], **provider}},
        "models": {"gpt": {"routes": [{"provider": "up", "model": "up-model"}]}},
    }


async def _gateway(
    sim: SimFactory, gateway: GwFactory, preset_name: str | None = None, **provider: Any
) -> GatewayHandle:
    """A gateway whose alias ``gpt`` has one route, to an api.openai.com-strict simulator (its ``openai`` preset)."""
    p = await sim("openai", models=("up-model",), engine=FAST)
    if preset_name is not None:
        provider["preset"] = preset_name
    return await gateway(_config(p.url, **provider))


@pytest.mark.parametrize("stream", [False, True])
async def test_codex_responses_body_reaches_a_strict_provider(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any], stream: bool
) -> None:
    """What Codex CLI 0.171 sends to /v1/responses (client_metadata, store, include, reasoning, parallel_tool_calls,
    prompt_cache_key, tools) is served through the gateway by an api.openai.com-strict provider: no 400 anywhere."""
    gw = await _gateway(sim, gateway)
    client = oai(gw.url, "anything")
    kwargs: dict[str, Any] = {
        "model": "gpt",
        "instructions": "You are Codex, a coding agent.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "say hello"}]}],
        "tools": [CODEX_TOOL],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        "extra_body": {"client_metadata": {"x-codex-installation-id": "00000000-0000-4000-8000-000000000000"}},
        "extra_headers": {"x-client-request-id": "req-1", "x-codex-turn-metadata": '{"turn_id":"t1"}'},
    }
    if stream:
        events = [e async for e in await client.responses.create(stream=True, **kwargs)]
        assert events[-1].type == "response.completed"
        assert events[-1].response.usage is not None
    else:
        resp = await client.responses.create(**kwargs)
        assert resp.status == "completed"
        assert resp.usage is not None
        assert resp.usage.output_tokens > 0


async def test_an_unknown_field_is_passed_on_as_sent(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """A top-level field the gateway does not know goes to the provider as sent: a strict provider's own 400 names
    it (the gateway did not), and the same body to a provider that drops it by ``drop_fields`` is served."""
    msgs: Any = [{"role": "user", "content": "hi"}]
    client = oai((await _gateway(sim, gateway)).url, "anything")
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(model="gpt", messages=msgs, max_tokens=3, extra_body={"x_vendor_hint": 7})
    assert refused.value.response.headers["x-tailgate-attempts"] == "1"  # the provider refused it, not the gateway
    assert "x_vendor_hint" in str(refused.value)
    dropping = oai((await _gateway(sim, gateway, drop_fields=["x_vendor_hint"])).url, "anything")
    ok = await dropping.chat.completions.create(
        model="gpt", messages=msgs, max_tokens=3, extra_body={"x_vendor_hint": 7}
    )
    assert ok.usage is not None
    assert ok.usage.completion_tokens == 3


async def test_the_openai_preset_drops_the_vendor_fields_openai_refuses(
    sim: SimFactory, gateway: GwFactory, oai: Callable[..., Any]
) -> None:
    """A chat request carrying vLLM's / DashScope's vendor fields is served by a provider with the ``openai`` preset
    (it drops what api.openai.com refuses) where, without the preset, the strict provider answers 400."""
    vendor = {"top_k": 20, "enable_thinking": False, "chat_template_kwargs": {"enable_thinking": False}}
    msgs = [{"role": "user", "content": "hi"}]
    bare = oai((await _gateway(sim, gateway)).url, "anything")
    with pytest.raises(openai.BadRequestError, match="Unrecognized request argument supplied"):
        await bare.chat.completions.create(model="gpt", messages=msgs, max_tokens=3, extra_body=vendor)
    preset = oai((await _gateway(sim, gateway, preset_name="openai")).url, "anything")
    ok = await preset.chat.completions.create(model="gpt", messages=msgs, max_tokens=3, extra_body=vendor)
    assert ok.usage is not None
    assert ok.usage.completion_tokens == 3


def test_the_openai_preset_drops_what_the_simulated_openai_refuses() -> None:
    """The ``openai`` preset's ``drop_fields`` and the simulator's ``openai`` dialect name the same vendor fields."""
    from tailgate.config.presets import OPENAI_REFUSED_FIELDS, get_preset
    from tailgate.sim.shape import VENDOR_FIELDS

    assert OPENAI_REFUSED_FIELDS == VENDOR_FIELDS
    openai_preset = get_preset("openai")
    assert openai_preset is not None
    assert openai_preset.drop_fields == VENDOR_FIELDS
