"""Claim: framing Redis commands with hiredis costs the fleet's admission less CPU than redis-py's own framing.

The Redis state (``tailgate.state.redis``) frames every command with hiredis's C ``pack_command`` instead of
redis-py's asyncio connection's Python one (``state/clients.py``). This runs a key's admission and settlement
(``KeyAdmission.admit`` + ``settle``: the gateway's two script calls per request, the benchmark key of
``gateway_overhead.py``: tpm, a daily token budget, a monthly money budget, ``max_concurrency``) one request at a
time against a throw-away ``redis-server``, through two ``RedisState`` objects in the same run: ``hiredis`` (as
shipped) and ``redis-py`` (the same state with the pool's connection class set back to redis-py's).

Reported: this process's CPU µs per admitted and settled request (``time.process_time``; redis-server's own CPU
is not counted), median of ``--rounds`` interleaved rounds, and hiredis ÷ redis-py. Target: ≤ 0.95. Correctness
(exit 1): every request admitted by Redis (never by the fallback), and the key's tpm counter in Redis holds
exactly what was settled.

Usage: ``.venv/bin/python benchmarks/bench_redis_framing.py [--rounds N] [--requests N] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from tailgate.config.schema import StateConfig
from tailgate.gateway.access.key_directory import KeyDirectory, KeyLimits
from tailgate.gateway.request_path.admission import KeyAdmission
from tailgate.state.redis import RedisState
from tailgate.state.server import RedisServer

LIMITS = KeyLimits("team", tpm=1e12, max_concurrency=100_000, tokens_per_day=10**14, cost_per_month=1e9)
TARGET = 0.95


async def run(url: str, namespace: str, framing: str, requests: int) -> float:
    state = RedisState(StateConfig(backend="redis", url=url, namespace=namespace, timeout=2.0))  # type: ignore[arg-type]
    if framing == "redis-py":
        pool = state._r.connection_pool
        pool.connection_class = pool.connection_class.__bases__[1]  # undo clients.hiredis_packing
    await state.start()
    directory = KeyDirectory(None, [])
    directory.limits = lambda key_id: LIMITS  # type: ignore[method-assign]
    # Without allowances (issue 31): every request's RESERVE and SETTLE go to Redis, the path a request takes
    # when its allowance is exhausted and every request of a limit decided exactly — the calls framed here.
    admission = KeyAdmission(directory, lambda: state, CollectorRegistry(), allowances=False)
    try:
        for _ in range(200):  # warm: connections, scripts
            ticket = await admission.admit("team", "bench", 30, 20, (2.0, 3.0))
            assert ticket is not None
            admission.settle(ticket, 25, 15, 0.0001)
            await asyncio.sleep(0)
        calls, fallbacks = state.calls, state.fallbacks
        t0 = time.process_time()
        for _ in range(requests):
            ticket = await admission.admit("team", "bench", 30, 20, (2.0, 3.0))
            assert ticket is not None
            admission.settle(ticket, 25, 15, 0.0001)
            await asyncio.sleep(0)
        cpu = time.process_time() - t0
        await admission.close()
        if state.fallbacks != fallbacks or state.calls - calls < requests:
            raise SystemExit(f"CORRECTNESS FAILURE ({framing}): {state.fallbacks - fallbacks} fallback decisions")
        used = await state.usage("key:team:tpm", 60.0)
        if abs(used - 40 * (requests + 200)) > 1e-6 * requests:
            raise SystemExit(f"CORRECTNESS FAILURE ({framing}): tpm {used}, expected {40 * (requests + 200)}")
    finally:
        await state.close()
    return cpu / requests * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=3_000)
    parser.add_argument("--quick", action="store_true", help="1 round of 300; the target printed, not enforced")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.requests = 1, 300
    results: dict[str, list[float]] = {"hiredis": [], "redis-py": []}
    with RedisServer() as redis:
        for r in range(args.rounds):
            for name in ("hiredis", "redis-py") if r % 2 == 0 else ("redis-py", "hiredis"):
                us = asyncio.run(run(redis.url, f"bench-{name}-{r}", name, args.requests))
                results[name].append(us)
                print(f"  round {r + 1} {name:8} {us:6.1f} µs CPU per admitted + settled request")
    ours, theirs = statistics.median(results["hiredis"]), statistics.median(results["redis-py"])
    ratio = ours / theirs
    print(f"redis-py {theirs:.1f} µs, hiredis {ours:.1f} µs: hiredis / redis-py {ratio:.3f} (target <= {TARGET})")
    print("all correctness checks passed" + ("" if ratio <= TARGET else "; target missed"))
    return 0 if ratio <= TARGET or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
