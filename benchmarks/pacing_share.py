"""Claim: a fleet uses ≥ 0.95× of a provider's pacing target at any offered load, with 0 upstream 429s.

Three real ``tailgate serve`` replicas on one real ``redis-server`` (``state: {backend: redis}``) pace
provider ``a`` (``limits.rpm``; a simulator in this process that enforces that rpm and answers 429 past it);
provider ``b`` (unlimited) takes what ``a``'s pacing spills. For each multiple (2×, 5×, 10× the pacing
target ``headroom × rpm``), requests arrive at an even rate, round-robin over the replicas, for ``--seconds``
after a warm-up; the share is what ``a`` answered 200 inside the window ÷ the target over the same window.
Each multiple runs in each lane: ``interactive`` (no header: paced-out requests spill to ``b``), ``batch``
(``x-tailgate-class: batch``: they wait at ``a``'s pacer, up to ``routing.pacing.batch_wait``), and ``mixed``
(interactive at 0.7× the target on replica 0 beside batch at the multiple on replicas 1 and 2: the interactive
requests moved to ``b`` are counted — the lane split's fleet-wide priority).

Target: share ≥ 0.95 at every multiple, 0 upstream 429s. Exits 1 on any upstream 429.
Usage: ``.venv/bin/python benchmarks/pacing_share.py [--quick] [--rpm 60] [--seconds 30] [--multiples 2,5,10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from soak import start_gateway
from tailgate.sim.faults import Faults
from tailgate.sim.presets import preset
from tailgate.sim.provider import ProviderSpec, SimProvider
from tailgate.state.server import RedisServer

HEADROOM = 0.9
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _config(tmp: Path, redis_url: str, a: str, b: str, rpm: float, lane: str, batch_wait: float) -> Path:
    data: dict[str, Any] = {
        "providers": {"a": {"base_url": a, "limits": {"rpm": rpm}}, "b": {"base_url": b}},
        "models": {
            "m": {
                "routes": [
                    {"provider": "a", "model": "up", "weight": 100},
                    {"provider": "b", "model": "up", "weight": 0},
                ]
            }
        },
        "routing": {"probes": {"enabled": False}, "pacing": {"headroom": HEADROOM, "batch_wait": batch_wait}},
        "ledger": {"enabled": False},
        "state": {"backend": "redis", "url": redis_url, "namespace": f"p{uuid.uuid4().hex[:8]}", "timeout": "250ms"},
    }
    path = tmp / f"fleet-{lane}-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def one_run(
    redis_url: str, rpm: float, multiple: float, seconds: float, warmup: float, lane: str, batch_wait: float
) -> dict[str, Any]:
    """One fleet, one multiple, one lane: the share of the target that ``a`` served and its 429s."""
    tmp = Path(tempfile.mkdtemp(prefix="tailgate-pacing-"))
    a = SimProvider(
        ProviderSpec(
            name="a", params=preset("instant"), preset="instant", models=("up",), faults=Faults(rate_limit_rpm=rpm)
        )
    )
    b = SimProvider(ProviderSpec(name="b", params=preset("instant"), preset="instant", models=("up",)))
    await a.start()
    await b.start()
    config = _config(tmp, redis_url, a.url, b.url, rpm, lane, batch_wait)
    procs = [start_gateway(config) for _ in range(3)]
    target = HEADROOM * rpm / 60.0  # req/s fleet-wide
    batch = {"x-tailgate-class": "batch"}
    statuses: dict[int, int] = {}
    moved = [0, 0]  # interactive requests of the mixed run sent after the warm-up: served by b (moved off a), all
    try:
        # No cap on the client's connections: batch requests hold theirs while they wait in the lane.
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:

            async def chat(url: str, headers: dict[str, str], watch: bool) -> None:
                try:
                    async with session.post(f"{url}/chat/completions", json=BODY, headers=headers) as r:
                        await r.read()
                        statuses[r.status] = statuses.get(r.status, 0) + 1
                        if watch:
                            moved[0] += r.headers.get("x-tailgate-provider") != "a"
                            moved[1] += 1
                except (aiohttp.ClientError, OSError):
                    statuses[0] = statuses.get(0, 0) + 1

            async def drive(rate: float, urls: list[str], headers: dict[str, str], watch: bool) -> int:
                start, n = time.monotonic(), 0
                while (due := start + n / rate) < start + warmup + seconds:
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                    in_window = watch and due - start >= warmup  # after the warm-up: the split has converged
                    tasks.append(asyncio.create_task(chat(urls[n % len(urls)], headers, in_window)))
                    n += 1
                return n

            await asyncio.sleep(1.0)  # the replicas learn of each other in their first sync ticks
            tasks: list[asyncio.Task[None]] = []
            urls = [url for _, url in procs]
            t0 = time.time()
            if lane == "mixed":  # interactive at 0.7× the target on replica 0, batch at the multiple on 1 and 2
                counts = await asyncio.gather(
                    drive(0.7 * target, urls[:1], {}, True), drive(multiple * target, urls[1:], batch, False)
                )
                i = sum(counts)
            else:
                i = await drive(multiple * target, urls, batch if lane == "batch" else {}, False)
            w0, w1 = t0 + warmup, t0 + warmup + seconds
            records = [r for r in a.truth.records() if w0 <= r.received_at < w1]
            await asyncio.gather(*tasks)
    finally:
        for proc, _ in procs:
            proc.terminate()
        for proc, _ in procs:
            proc.wait(timeout=15)
        await a.stop()
        await b.stop()
    served = sum(r.status == 200 for r in records)
    upstream_429 = sum(r.status == 429 for r in a.truth.records())
    return {
        "lane": lane,
        "multiple": multiple,
        "offered": i,
        "served_by_a": served,
        "target": round(target * seconds, 2),
        "share": round(served / (target * seconds), 3),
        "upstream_429": upstream_429,
        "client_statuses": statuses,
        "interactive_moved": moved[0] if lane == "mixed" else None,
        "interactive": moved[1] if lane == "mixed" else None,
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpm", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--multiples", default="2,5,10")
    parser.add_argument("--lanes", default="interactive,batch,mixed")
    parser.add_argument("--batch-wait", type=float, default=30.0, help="routing.pacing.batch_wait (s)")
    parser.add_argument(
        "--quick", action="store_true", help="interactive, mixed; 5×, 6 s, rpm 240, batch_wait 2 s: the smoke test's"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    multiples = [float(m) for m in args.multiples.split(",")]
    if args.quick:
        args.rpm, args.seconds, args.warmup, args.batch_wait, multiples = 240.0, 6.0, 2.0, 2.0, [5.0]
        args.lanes = "interactive,mixed"
    results = []
    with RedisServer() as redis:
        for lane in args.lanes.split(","):
            for m in multiples:
                res = await one_run(redis.url, args.rpm, m, args.seconds, args.warmup, lane, args.batch_wait)
                results.append(res)
                print(
                    f"{lane:<11} {m:>4g}x  offered {res['offered']:>5}  a served {res['served_by_a']:>4} of "
                    f"target {res['target']:>6}  share {res['share']:.3f}  upstream 429s {res['upstream_429']}  "
                    f"clients {res['client_statuses']}"
                    + (
                        f"  interactive moved to b {res['interactive_moved']} of {res['interactive']}"
                        if lane == "mixed"
                        else ""
                    ),
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    bad = [r for r in results if r["upstream_429"]]
    if bad:
        print(f"FAIL: upstream 429s in {len(bad)} run(s)")
        return 1
    print("no upstream 429s")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
