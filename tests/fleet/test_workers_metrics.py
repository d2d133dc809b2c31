"""`tailgate serve --workers 2`: one coherent /metrics, whichever worker answers the scrape."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
from pathlib import Path

import aiohttp
import pytest
import yaml

from conftest import SimFactory
from serve_process import ServeProcess


@pytest.mark.timeout(60)
async def test_every_scrape_counts_every_workers_requests(sim: SimFactory, tmp_path: Path) -> None:
    """40 requests spread over two workers (a new connection each); every scrape, whichever worker answers
    it, counts all 40, and the gauges stay per worker (``pid``)."""
    a = await sim("instant", models=("m",))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "gw.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "providers": {"a": {"base_url": a.url}},
                "models": {"m": {"routes": [{"provider": "a", "model": "m"}]}},
                "routing": {"probes": {"enabled": False}},
                "ledger": {"enabled": False},
            }
        )
    )
    gw = ServeProcess(config, "--workers", "2", port=port, listeners=2)  # both workers listen
    try:
        url = f"http://127.0.0.1:{port}"
        body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
        close = {"Connection": "close"}
        async with aiohttp.ClientSession() as session:
            for _ in range(40):
                async with session.post(f"{url}/v1/chat/completions", json=body, headers=close) as r:
                    assert r.status == 200
            totals: list[float] = []
            early: list[float] = []
            pids: set[str] = set()
            # An answered request is booked with its worker's next batch (Books.later), a moment after the
            # client has its answer: scrapes may count fewer until both workers' books are in, never more.
            # From the first scrape that counts all 40, every scrape must, whichever worker answers it, until
            # both workers have answered one (each is a coin flip). Bounded: 200 scrapes.
            for _ in range(200):
                async with session.get(f"{url}/metrics", headers=close) as r:
                    text = await r.text()
                total = sum(
                    float(m)
                    for m in re.findall(r'^tailgate_requests_total\{[^}]*outcome="ok"[^}]*\} (\S+)', text, re.M)
                )
                if not totals and total < 40.0:
                    early.append(total)
                    await asyncio.sleep(0.02)
                    continue
                totals.append(total)
                pids |= set(re.findall(r'tailgate_in_flight\{pid="(\d+)"', text))
                if len(pids) == 2 and len(totals) >= 6:
                    break
        assert all(t <= 40.0 for t in early), early
        assert set(totals) == {40.0}
        assert len(pids) == 2  # gauges stay per worker
        assert gw.stop(signal.SIGTERM) == 0
    finally:
        gw.stop(signal.SIGKILL)  # after a clean stop: nothing left to signal
