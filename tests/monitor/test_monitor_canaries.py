"""The monitor's accuracy workload asks the whole canary set — the tool call included, over chat and over
Anthropic's Messages API — and grades it against a simulator that answers right, then (the ``accuracy``
fault) wrong."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from conftest import SimFactory
from tailgate.accuracy import CANARY_KINDS
from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.ledger.samples import SampleStore
from tailgate.monitor.runner import Monitor, targets_from_config
from tailgate.monitor.workloads import build_probe, tool_call_of

WALL = 60.0 * 300 * 1000  # a minute whose index is 0 modulo the suite: round k asks task k


async def _rounds(url: str, tmp_path: Path, name: str) -> list[bool | None]:
    data = {
        "providers": {"a": {"base_url": url, "anthropic_base_url": url.removesuffix("/v1")}},
        "models": {"m": {"routes": [{"provider": "a", "model": "up"}]}},
    }
    cfg = validate_data(data, GatewayConfig, "test-config")
    providers = resolve_providers(cfg)
    targets = targets_from_config(cfg, providers, ("openai", "anthropic"))
    async with SampleStore(tmp_path / f"{name}.db") as store:
        monitor = Monitor(providers, targets, store, workloads=("accuracy",), wall=lambda: WALL)
        try:
            graded = []
            for k in range(len(CANARY_KINDS)):
                report = await monitor.run_round(k)
                assert report.ok == 2, report.summary()
                graded += [s.accuracy_ok for s in report.samples]
        finally:
            await monitor.close()
    return graded


async def test_every_canary_kind_is_asked_and_graded_both_ways(sim: SimFactory, tmp_path: Path) -> None:
    assert [build_probe("accuracy", k, WALL).task.kind for k in range(6)] == list(CANARY_KINDS)  # type: ignore[union-attr]
    tool_probe = build_probe("accuracy", CANARY_KINDS.index("tool"), WALL)
    assert tool_probe.body["tools"][0]["function"]["name"] == "record_order"
    p = await sim("instant", seed=9)
    assert await _rounds(p.url, tmp_path, "right") == [True] * 12
    tool_rows = [r for r in p.truth.records() if r.finish_reason in ("tool_calls", "stop") and r.api == "openai"]
    assert any(r.finish_reason == "tool_calls" for r in tool_rows)
    faults = p.url.removesuffix("/v1") + "/sim/faults"
    async with aiohttp.ClientSession() as s, s.post(faults, json={"accuracy": 0.0}) as r:
        assert r.status == 200
    assert await _rounds(p.url, tmp_path, "wrong") == [False] * 12
    assert sum(1 for r in p.truth.records() if r.degraded == "canary_wrong") == 12


def test_tool_call_of_reads_both_protocols_and_whole_bodies() -> None:
    openai_stream = (
        b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
        b'"id":"c","function":{"name":"f","arguments":"{\\"a\\""}}]}}]}\n\n'
        b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
        b'"function":{"arguments":": 1}"}}]}}]}\n\ndata: [DONE]\n\n'
    )
    assert tool_call_of(openai_stream) == ("f", '{"a": 1}')

    def delta(part: str) -> bytes:
        event = {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": part}}
        return b"data: " + json.dumps(event).encode() + b"\n"

    anthropic_stream = (
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n'
        b'data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","name":"f","input":{}}}\n'
        + delta('{"a"')
        + delta(": 1}")
    )
    assert tool_call_of(anthropic_stream) == ("f", '{"a": 1}')
    call = {"function": {"name": "g", "arguments": "{}"}}
    body = json.dumps({"object": "chat.completion", "choices": [{"message": {"tool_calls": [call]}}]}).encode()
    assert tool_call_of(body) == ("g", "{}")
    assert tool_call_of(b'{"type":"message","content":[{"type":"tool_use","name":"h","input":{"x":1}}]}') == (
        "h",
        '{"x": 1}',
    )
    assert tool_call_of(b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n') == (None, None)
