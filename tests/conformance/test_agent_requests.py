"""Codex CLI's and Qwen Code's recorded requests (tests/conformance/codex_0_171_request.json,
qwen_code_0_24_request.json: captured from the real agents, ids and paths replaced) decode strictly, and go through
the gateway to a strict simulated provider with 200, every repeat of one session on one route (Codex: the session
id in ``x-codex-turn-metadata``; Qwen Code: the stable prefix)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from conftest import GatewayHandle, SimFactory
from tailgate.wire.types import decode_request

HERE = Path(__file__).parent
CODEX = json.loads((HERE / "codex_0_171_request.json").read_text())
QWEN = json.loads((HERE / "qwen_code_0_24_request.json").read_text())
FAST = {
    "pre_median_s": 0.0,
    "step_ms": 0.2,
    "jitter": 0.0,
    "default_output_tokens": 8,
    "max_tokens_cap": True,
    "dialect": "maas",
}


def test_recorded_agent_requests_decode_strictly() -> None:
    """Every field the agents send is known to the strict decoder (no 400 for Codex's client_metadata)."""
    codex = decode_request("responses", msgspec.json.encode(CODEX["body"]), strict=True)
    assert codex.client_metadata is not None
    assert codex.prompt_cache_key
    assert codex.tools
    qwen = decode_request("chat", msgspec.json.encode(QWEN["body"]), strict=True)
    assert [m.role for m in qwen.messages][-1] == "tool"
    assert qwen.tools


@pytest.mark.parametrize(("recorded", "path"), [(CODEX, "responses"), (QWEN, "chat/completions")])
async def test_recorded_agent_requests_through_the_gateway_stick(
    recorded: dict[str, Any],
    path: str,
    sim: SimFactory,
    gateway: Callable[..., Awaitable[GatewayHandle]],
) -> None:
    """The recorded request, sent as the agent sends it (its headers too) five times over a 50/50 alias: 200
    each time, all on one route."""
    a = await sim("instant", engine=FAST)
    b = await sim("instant", engine=FAST)
    model = recorded["body"]["model"]
    config = {
        "providers": {"pa": {"base_url": a.url}, "pb": {"base_url": b.url}},
        "models": {model: {"routes": [{"provider": p, "model": "m", "weight": 50} for p in ("pa", "pb")]}},
    }
    gw = await gateway(config)
    async with aiohttp.ClientSession() as s:
        for _ in range(5):
            async with s.post(f"{gw.url}/{path}", json=recorded["body"], headers=recorded["headers"]) as r:
                text = await r.text()
                assert r.status == 200, text
    served = [p.truth.total for p in (a, b)]
    assert sorted(served) == [0, 5]


CLAUDE = json.loads((HERE / "claude_code_2_1_request.json").read_text())


def _with_session(recorded: dict[str, Any], sid: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The recorded request as another session of the same agent sends it: only its session id differs."""
    body = json.loads(json.dumps(recorded["body"]).replace("00000000-0000-4000-8000-000000000001", sid))
    headers = {k: v.replace("00000000-0000-4000-8000-000000000001", sid) for k, v in recorded["headers"].items()}
    if "x-codex-turn-metadata" in headers:
        meta = json.loads(headers["x-codex-turn-metadata"])
        headers["x-codex-turn-metadata"] = json.dumps({**meta, "session_id": sid})
    return body, headers


@pytest.mark.parametrize(("recorded", "path"), [(CLAUDE, "messages"), (CODEX, "responses")])
async def test_sessions_of_one_agent_are_keyed_by_their_session_ids(
    recorded: dict[str, Any],
    path: str,
    sim: SimFactory,
    gateway: Callable[..., Awaitable[GatewayHandle]],
) -> None:
    """16 sessions sending the same prompt, told apart only by their session ids (Claude Code's header and
    ``metadata.user_id``; Codex's ``x-codex-turn-metadata``): each session's turns stay on one route, and the
    sessions spread over both (by the prompt alone all 16 would share one route)."""
    a = await sim("instant", engine=FAST)
    b = await sim("instant", engine=FAST)
    model = recorded["body"]["model"]
    config = {
        "providers": {"pa": {"base_url": a.url}, "pb": {"base_url": b.url}},
        "models": {model: {"routes": [{"provider": p, "model": "m", "weight": 50} for p in ("pa", "pb")]}},
    }
    gw = await gateway(config)
    async with aiohttp.ClientSession() as s:
        for i in range(16):
            body, headers = _with_session(recorded, f"00000000-0000-4000-8000-{i:012d}")
            for turn in range(2):
                rid = {"x-request-id": f"s{i}-t{turn}"}
                async with s.post(f"{gw.url}/{path}", json=body, headers={**headers, **rid}) as r:
                    text = await r.text()  # the whole answer: a stream left early is a cancelled request
                    assert r.status == 200, text
    wanted = {f"s{i}-t{turn}" for i in range(16) for turn in range(2)}
    served: dict[str, str] = {}
    for _ in range(1000):  # a stream's truth row is written just after its last byte: wait for all 32
        served = {
            t.client_request_id: n
            for n, p in (("a", a), ("b", b))
            for t in p.truth.records()
            if t.client_request_id is not None
        }
        if wanted <= served.keys():
            break
        await asyncio.sleep(0.01)
    per_session = [{served[f"s{i}-t{turn}"] for turn in range(2)} for i in range(16)]
    assert all(len(routes) == 1 for routes in per_session), per_session
    assert {next(iter(routes)) for routes in per_session} == {"a", "b"}
