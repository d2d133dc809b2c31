"""Rules every batch line obeys, whichever path runs it (docs/batch.md): what a provider job's lines carry, the
key's budgets and revocation, the upstream cap, and how live batch-class requests are sent and recorded."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
from openai import AsyncOpenAI
from test_gateway_batches import KEY_A, chat_lines, config, jsonl, read_file, wait_done

from conftest import GatewayHandle, SimFactory

Oai = Callable[..., AsyncOpenAI]


async def sim_files(url: str, key: str) -> dict[str, bytes]:
    """A simulated provider's stored files (filename → content), read through its own ``/v1/files``."""
    headers = {"Authorization": f"Bearer {key}"}
    out: dict[str, bytes] = {}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/files", headers=headers) as r:
            listed = await r.json()
        for f in listed["data"]:
            async with http.get(f"{url}/files/{f['id']}/content", headers=headers) as r:
                out[f["filename"]] = await r.read()
    return out


async def test_a_provider_jobs_lines_go_without_stream_fields(sim: SimFactory, gateway: Any, oai: Oai) -> None:
    """Lines that ask ``stream: true`` with ``stream_options`` are answered whole by a provider's batch job: the JSONL
    the gateway uploads carries neither field (a provider's batch API refuses streaming lines)."""
    p = await sim("instant", faults={"batch_turnaround_s": 0.1})
    gw: GatewayHandle = await gateway(config(p.url, batch_api=True))
    client = oai(gw.url, key=KEY_A)
    lines = chat_lines(3)
    for line in lines:
        line["body"] |= {"stream": True, "stream_options": {"include_usage": True}}
    f = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = await wait_done(client, batch.id)
    assert done.status == "completed"
    assert len(await read_file(client, done.output_file_id)) == 3
    uploaded = (await sim_files(p.url, "sk-p-0123456789"))[f"{batch.id}.jsonl"]
    bodies = [json.loads(x)["body"] for x in uploaded.splitlines()]
    assert len(bodies) == 3
    for body in bodies:
        assert "stream" not in body
        assert "stream_options" not in body
        assert body["model"] == "up-m"
