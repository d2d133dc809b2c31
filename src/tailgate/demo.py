"""``tailgate demo``: the whole system on one machine with no keys and no network.

For now it starts two simulated providers shaped like FIELD-NOTES.md (``provider-a`` as primary,
``provider-b`` as secondary), sends a few streamed chat requests to each, and prints what each
simulator timed (its ground truth). Later issues add the gateway, the monitor, the dashboard and the
failover drill to this command.
"""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
from rich.console import Console
from rich.table import Table

from tailgate._runtime import wait_for_stop
from tailgate.sim.cluster import SimCluster
from tailgate.sim.presets import preset
from tailgate.sim.provider import ProviderSpec, SimProvider
from tailgate.stats import LatencyHistogram
from tailgate.wire.sse import SSEDecoder

log = logging.getLogger("tailgate.demo")
MODEL = "deepseek-v3.2"


async def _one(session: aiohttp.ClientSession, url: str) -> int:
    """Send one streamed chat request; return the number of content chunks received."""
    body = {
        "model": MODEL,
        "stream": True,
        "max_tokens": 48,
        "messages": [{"role": "user", "content": "Say something about queues."}],
    }
    chunks = 0
    decoder = SSEDecoder()
    async with session.post(f"{url}/chat/completions", json=body, headers={"Authorization": "Bearer demo"}) as resp:
        resp.raise_for_status()
        async for data in resp.content.iter_any():
            for event in decoder.feed(data):
                if event.is_done:
                    return chunks
                choices = json.loads(event.data).get("choices") or []
                if choices and choices[0].get("delta", {}).get("content"):
                    chunks += 1
    return chunks


async def _exercise(provider: SimProvider, n: int) -> tuple[int, int]:
    async with aiohttp.ClientSession() as session:
        results = await asyncio.gather(*(_one(session, provider.url) for _ in range(n)), return_exceptions=True)
    ok = [r for r in results if isinstance(r, int)]
    return len(ok), sum(ok)


async def run_demo(
    stop: asyncio.Event,
    *,
    port: int = 0,
    duration: float | None = None,
    n_requests: int = 5,
    time_scale: float = 1.0,
) -> None:
    console = Console()
    specs = [
        ProviderSpec(
            name=name,
            params=preset(pre),
            preset=pre,
            port=port + i if port else 0,
            seed=i,
            time_scale=time_scale,
            models=(MODEL,),
        )
        for i, (name, pre) in enumerate((("primary", "provider-a"), ("secondary", "provider-b")))
    ]
    async with SimCluster(specs) as cluster:
        for p in cluster.providers.values():
            console.print(f"[bold]{p.name}[/] ({p.spec.preset}) listening on [cyan]{p.url}[/]")
        console.print(f"Sending {n_requests} streamed requests to each provider…")
        answered = await asyncio.gather(*(_exercise(p, n_requests) for p in cluster.providers.values()))
        table = Table(
            "provider",
            "preset",
            "answered",
            "tokens",
            "P50 TTFT",
            "P90 TTFT",
            "P90 E2E",
            title="what the simulators timed (ground truth, ms)",
        )
        for (ok, tokens), p in zip(answered, cluster.providers.values(), strict=True):
            ttft, e2e = LatencyHistogram(), LatencyHistogram()
            for rec in p.truth.records():
                if rec.status == 200 and rec.ttft_ms is not None and rec.e2e_ms is not None:
                    ttft.record(rec.ttft_ms)
                    e2e.record(rec.e2e_ms)
            table.add_row(
                p.name,
                p.spec.preset,
                f"{ok}/{n_requests}",
                str(tokens),
                f"{ttft.percentile(50):.0f}",
                f"{ttft.percentile(90):.0f}",
                f"{e2e.percentile(90):.0f}",
            )
        console.print(table)
        first = next(iter(cluster.providers.values()))
        console.print(
            "Try it with the official SDK:\n"
            f'[green]from openai import OpenAI\nclient = OpenAI(base_url="{first.url}", api_key="any")\n'
            f'print(client.chat.completions.create(model="{MODEL}", '
            'messages=[{"role": "user", "content": "hi"}]).choices[0].message.content)[/]'
        )
        if duration == 0:
            return
        console.print("Running; Ctrl-C to stop." if duration is None else f"Running for {duration:g} s.")
        await wait_for_stop(stop, duration)
