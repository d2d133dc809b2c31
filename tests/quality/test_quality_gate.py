"""The first-byte gate on the simulator's real streams (healthy, thinking, filtered, empty, cut by length) and on
hand-made edge cases; the non-stream verdict on the same answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from conftest import SimFactory
from tailgate.quality.gate import FirstByteGate, non_answer


async def _stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    chunks = []
    async with aiohttp.ClientSession() as s, s.post(url + "/chat/completions", json={**body, "stream": True}) as r:
        async for line in r.content:
            if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


def _gate(chunks: list[dict[str, Any]]) -> tuple[str, int]:
    """The verdict and how many chunks it took."""
    gate = FirstByteGate()
    for i, chunk in enumerate(chunks, 1):
        if (v := gate.feed(chunk)) != "hold":
            return v, i
    return gate.end(), len(chunks)


@pytest.mark.parametrize(
    ("faults", "engine", "want"),
    [
        ({}, {}, "answer"),
        ({"content_filter_rate": 1.0}, {}, "content_filtered"),
        ({"content_filter_rate": 1.0, "content_filter_reason": "sensitive"}, {}, "content_filtered"),
        ({"empty_answer_rate": 1.0}, {}, "empty_answer"),
        ({}, {"thinking": True, "reasoning_median": 5.0}, "answer"),
    ],
)
async def test_gate_on_simulated_streams(
    sim: SimFactory, oai: Callable[..., Any], faults: dict[str, Any], engine: dict[str, Any], want: str
) -> None:
    p = await sim("instant", seed=1, engine=engine)
    if faults:
        async with aiohttp.ClientSession() as s, s.post(p.url.removesuffix("/v1") + "/sim/faults", json=faults) as r:
            assert r.status == 200
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    chunks = await _stream(p.url, body)
    verdict, used = _gate(chunks)
    assert verdict == want
    if want == "answer":
        assert used == 2  # the role chunk is held, the first token releases
    unary = (await oai(p.url).chat.completions.create(**body)).model_dump()
    assert non_answer(unary) == (None if want == "answer" else want)


def test_gate_edge_cases() -> None:
    def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}

    assert _gate([chunk({"role": "assistant", "content": ""}), chunk({"content": "  "}), chunk(finish="stop")]) == (
        "empty_answer",
        3,
    )
    assert _gate([chunk({"content": ""}), chunk(finish="length")]) == ("answer", 2)  # the client's budget
    assert _gate([chunk({"tool_calls": [{"index": 0, "function": {"name": "f"}}]})]) == ("answer", 1)
    assert _gate([chunk({"refusal": "I can't"}), chunk(finish="content_filter")]) == ("answer", 1)
    assert _gate([{"choices": [], "usage": {"completion_tokens": 0}}]) == ("empty_answer", 1)  # ended, nothing
    gate = FirstByteGate()
    gate.feed(chunk(finish="content_filter"))
    assert gate.feed(chunk({"content": "late"})) == "content_filtered"  # final
    thought = {"choices": [{"message": {"content": "", "reasoning_content": "hmm"}, "finish_reason": "stop"}]}
    assert non_answer(thought) is None
