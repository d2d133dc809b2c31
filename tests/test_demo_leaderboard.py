"""The leaderboard over a store written the way `tailgate demo` writes it: every tok/s near the decode rate."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tailgate.demo.stack import MODEL, PRIMARY, SECONDARY, StackOptions, start_stack
from tailgate.demo.traffic import Traffic, TrafficShape
from tailgate.sim.presets import preset

# Both demo providers are `provider-a`: one decode step per token for every sequence in the batch.
DECODE_TOK_S = 1000.0 / preset("provider-a").step_ms  # ≈ 119 tok/s
TOK_S_KEYS = ("snapshot_tok_s", "tok_s_avg", "tok_s_min", "tok_s_max", "traffic_tok_s_avg")


def _served(traffic: Traffic) -> Counter[tuple[str | None, bool]]:
    return Counter((r.provider, r.stream) for r in traffic.records if r.ok)


async def _run_demo_traffic(db: Path) -> None:
    """The demo's stack (gateway, two simulated providers, monitor) and its traffic with a large batch share,
    until both providers have served streamed requests, the secondary non-streamed ones too, and the monitor
    has probed once."""
    stack = await start_stack(StackOptions(db=db))
    try:
        traffic = Traffic(stack.url, MODEL, TrafficShape(rate=20.0, batch_share=0.4))
        sending = asyncio.create_task(traffic.run())
        # Batch (non-streamed) work goes to the secondary first; both take interactive (streamed) requests.
        wanted = [(PRIMARY, True), (SECONDARY, True), (SECONDARY, False)]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 90.0
        while not (all(_served(traffic)[k] >= 3 for k in wanted) and stack.monitor and stack.monitor.rounds):
            assert loop.time() < deadline, (_served(traffic), stack.monitor and stack.monitor.rounds)
            await asyncio.sleep(0.1)
        traffic.stop()
        await sending
        await traffic.drain(30.0)
    finally:
        await stack.close()  # writes the current minute's traffic rows


@pytest.mark.timing  # tok/s against the simulator's decode rate: a starved simulator decodes late
@pytest.mark.timeout(120)
def test_every_tok_s_on_the_leaderboard_of_a_demo_store_is_near_the_decode_rate(tmp_path: Path) -> None:
    """`tailgate leaderboard --json` over a demo store: each provider's traffic and probe tok/s within 3× of
    the simulator's configured decode rate (non-streamed rows made the secondary read 195,533.9 tok/s)."""
    db = tmp_path / "demo.db"
    asyncio.run(_run_demo_traffic(db))
    proc = subprocess.run(
        [sys.executable, "-m", "tailgate", "leaderboard", "--db", str(db), "--window", "1h", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["provider"], r["model"]): r for r in json.loads(proc.stdout)["rows"]}
    assert set(rows) == {(PRIMARY, MODEL), (SECONDARY, MODEL)}
    for key, row in rows.items():
        assert row["traffic_tok_s_avg"] is not None, key
        assert row["snapshot_tok_s"] is not None, key
        for name in TOK_S_KEYS:
            if row[name] is not None:
                assert DECODE_TOK_S / 3 <= row[name] <= DECODE_TOK_S * 3, (key, name, row[name])
