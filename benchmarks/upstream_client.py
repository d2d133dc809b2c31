"""Claim: tailgate's own upstream HTTP client costs a fraction of aiohttp's ClientSession per call.

Why it exists: issue 15's profile put aiohttp's client at ~20 % of the gateway's event loop; the gateway
now calls providers through ``tailgate.upstream.http`` (asyncio protocols + httptools). This measures
the client side alone, in one process, against one ``tailgate mock --preset instant`` subprocess:

- ``aiohttp``: ``aiohttp.ClientSession.post`` + ``readany()`` to the end + ``release()``, configured as
  the gateway configured it before (a ``TCPConnector`` with the same limit, ``trust_env=False``);
- ``pool``: ``tailgate.upstream.http.Pool.post`` + ``readany()`` to the end + ``release()``;
- ``call``: ``tailgate.upstream.call()`` (the pool plus the whole measurement core: deadlines, SSE
  parsing, token counting, usage, the ``CallResult``) — what the gateway, bench and monitor run.

Each runs ``--requests`` calls at ``--concurrency`` (50) in turn, interleaved for ``--rounds`` rounds,
non-stream (20 tokens) and stream (20 token chunks). Reported: CPU µs per call of this process
(``getrusage``, user + system; the simulator is another process) and calls/s; the claim is judged on the
median over rounds of ``pool`` ÷ ``aiohttp`` CPU per call: target ≤ 0.5 non-stream and ≤ 0.8 stream (a
stream's 23 reads each cost an event-loop wake-up and a system call that any client pays; what a client
can save is its own per-read and per-call work).

Correctness (a failure exits 1): every call is a 200 with a complete body (the non-stream JSON has
``choices``; a stream ends with ``[DONE]``), and ``call`` returns ``ok`` results with 20 output tokens.

Usage: ``.venv/bin/python benchmarks/upstream_client.py [--quick] [--rounds N] [--requests N] [--json F]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from tailgate.upstream import Endpoint, UpstreamClient, call
from tailgate.upstream.http import Pool, request_head

BODY = {"model": "bench", "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 20}
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench", "x-request-id": "bench"}


def start_simulator() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailgate", "mock", "--preset", "instant", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if m := re.search(r"http://127\.0\.0\.1:\d+", line):
            return proc, m.group(0)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("the simulator did not start")


class Failure(Exception):
    pass


def check_body(data: bytes, stream: bool) -> None:
    if stream:
        if not data.rstrip().endswith(b"data: [DONE]"):
            raise Failure(f"a stream did not end with [DONE]: {data[-80:]!r}")
    elif b'"choices"' not in data:
        raise Failure(f"a non-stream answer has no choices: {data[:80]!r}")


def clients(base: str, stream: bool, concurrency: int) -> dict[str, Callable[[], Awaitable[None]]]:
    """One coroutine function per client kind: one call, checked."""
    body = json.dumps({**BODY, "stream": stream}).encode()
    url = f"{base}/v1/chat/completions"
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency, limit_per_host=0, keepalive_timeout=30),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
        trust_env=False,
    )
    pool = Pool(f"{base}/v1", limit=concurrency, connect_timeout=5, keepalive_s=30)
    upstream = UpstreamClient(Endpoint("bench", f"{base}/v1", ("sk-bench",), max_connections=concurrency))

    async def with_aiohttp() -> None:
        resp = await session.post(url, data=body, headers=HEADERS)
        out = bytearray()
        while data := await resp.content.readany():
            out += data
        resp.release()
        if resp.status != 200:
            raise Failure(f"aiohttp: HTTP {resp.status}")
        check_body(bytes(out), stream)

    async def with_pool() -> None:
        head = request_head("POST", "/v1/chat/completions", pool.host_header, HEADERS, len(body))
        resp = await pool.post(head, body)
        out = bytearray()
        while data := await resp.readany():
            out += data
        resp.release()
        if resp.status != 200:
            raise Failure(f"pool: HTTP {resp.status}")
        check_body(bytes(out), stream)

    async def with_call() -> None:
        result = await call(upstream, "chat/completions", body, stream=stream, request_id="bench").collect()
        if not result.ok or result.output_tokens != 20:
            raise Failure(f"call: {result.error_class} {result.detail} ({result.output_tokens} tokens)")

    async def close() -> None:
        await session.close()
        await pool.close()
        await upstream.close()

    return {"aiohttp": with_aiohttp, "pool": with_pool, "call": with_call, "_close": close}


async def run_one(one: Callable[[], Awaitable[None]], requests: int, concurrency: int) -> tuple[float, float]:
    """CPU µs per call and calls/s for ``requests`` calls at ``concurrency``."""
    left = 2 * concurrency  # warm-up: open the pool's connections

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    left = requests
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return cpu / requests * 1e6, requests / (t1 - t0)


async def measure(base: str, rounds: int, requests: int, concurrency: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stream in (False, True):
        mode = "stream" if stream else "nonstream"
        kinds = clients(base, stream, concurrency)
        close = kinds.pop("_close")
        per: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
        names = list(kinds)
        try:
            for r in range(rounds):
                order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
                for name in order:
                    cpu, rate = await run_one(kinds[name], requests, concurrency)
                    per[name].append((cpu, rate))
                    print(f"  round {r + 1} {mode:9} {name:8} {cpu:7.1f} µs CPU/call  {rate:8,.0f} calls/s", flush=True)
        finally:
            await close()
        ratios = [p[0] / a[0] for p, a in zip(per["pool"], per["aiohttp"], strict=True)]
        out[mode] = {
            "cpu_us": {k: statistics.median(c for c, _ in v) for k, v in per.items()},
            "calls_per_s": {k: statistics.median(r for _, r in v) for k, v in per.items()},
            "pool_over_aiohttp_per_round": ratios,
            "pool_over_aiohttp": statistics.median(ratios),
            "rounds": dict(per),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=10_000, help="calls per run (default 10,000)")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="1 round of 500 calls; targets printed, not enforced")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.requests = 1, 500
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    sim, base = start_simulator()
    print(f"Python {sys.version.split()[0]}, aiohttp {aiohttp.__version__}; simulator {base} (instant)")
    print(f"{args.rounds} round(s) x {args.requests:,} calls at concurrency {args.concurrency}, per client kind")
    try:
        results = asyncio.run(measure(base, args.rounds, args.requests, args.concurrency))
    except Failure as exc:
        print(f"CORRECTNESS FAILURE: {exc}")
        return 1
    finally:
        sim.terminate()
        sim.wait(10)
    met = True
    targets = {"nonstream": 0.5, "stream": 0.8}
    for mode, r in results.items():
        cpu = r["cpu_us"]
        print(
            f"{mode:9}: CPU µs/call aiohttp {cpu['aiohttp']:.1f}  pool {cpu['pool']:.1f}  call {cpu['call']:.1f};"
            f"  pool / aiohttp {r['pool_over_aiohttp']:.3f} (per round "
            f"{', '.join(f'{x:.3f}' for x in r['pool_over_aiohttp_per_round'])})"
        )
        ok = r["pool_over_aiohttp"] <= targets[mode]
        met &= ok
        print(f"  {mode}: pool CPU per call <= {targets[mode]} x aiohttp's: {'PASS' if ok else 'FAIL'}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print("all correctness checks passed" + ("" if met else "; targets missed"))
    return 0 if met or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
