"""The gateway writes a traffic trace (lengths and timing only); `tailgate bench --replay` plays it back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from conftest import GatewayHandle, SimFactory, two_provider_config
from tailgate.bench.workload import WorkloadError, load_trace
from tailgate.cli import main


async def test_gateway_trace_replays_with_its_classes_and_lengths(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]], tmp_path: Path
) -> None:
    """Requests through a gateway with trace.path → a JSONL trace without text → replayed, classes kept."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    trace = tmp_path / "trace.jsonl"
    gw = await gateway(two_provider_config(a.url, b.url, trace={"path": str(trace)}))
    secret = "a prompt that must never reach the trace"
    async with aiohttp.ClientSession() as session:
        for i in range(12):
            body = {
                "model": "deepseek-v3.2",
                "max_tokens": 3 + i % 3,
                "messages": [{"role": "user", "content": secret}],
            }
            headers = {"x-tailgate-class": "batch"} if i % 4 == 0 else {}
            async with session.post(f"{gw.url}/chat/completions", json=body, headers=headers) as r:
                assert r.status == 200
            await asyncio.sleep(0.01)
    await gw.stop()
    text = trace.read_text()
    assert secret not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) == 12
    assert [line.get("class") for line in lines].count("batch") == 3
    assert all(line["output_tokens"] == 3 + i % 3 for i, line in enumerate(lines))

    replay_gw = await gateway(two_provider_config(a.url, b.url))
    b_before = sum(1 for r in b.truth.records() if r.status == 200)
    out = tmp_path / "replay.json"
    result = await asyncio.to_thread(
        CliRunner().invoke,
        main,
        [
            "bench",
            "--base-url",
            replay_gw.url,
            "--model",
            "deepseek-v3.2",
            "--replay",
            str(trace),
            "--time-scale",
            "0.5",
            "--no-stream",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    run: dict[str, Any] = json.loads(out.read_text())["runs"][0]
    assert run["load"]["mode"] == "open"
    assert run["load"]["replay"] == "trace.jsonl"
    assert run["requests"] == run["successes"] == 12
    assert run["tokens"]["output"] == sum(line["output_tokens"] for line in lines)
    # The 3 batch lines went to the batch route again (the secondary), plus its weighted share of the rest.
    assert sum(1 for r in b.truth.records() if r.status == 200) - b_before >= 3


def test_bad_trace_names_file_and_line(tmp_path: Path) -> None:
    """A trace line without t is an error naming the file and line."""
    path = tmp_path / "t.jsonl"
    path.write_text('{"t": 0}\n{"input_tokens": 5}\n')
    with pytest.raises(WorkloadError, match=f"{path}:2:"):
        load_trace(path)
