"""Where the gateway's memory goes under sustained load: a step-by-step trace, to tell a leak from caches filling.

``gateway_overhead.py``'s RSS phase says *whether* RSS moved; this says *what* moved. One gateway runs in this
process (issue 15's config: two routes, a key with a tpm, a concurrency limit and two budgets, ledger on, the
front door) in front of ``tailgate mock --preset instant``; ``wrk -c50`` drives it for ``--steps`` steps of
``--seconds`` each (non-stream and stream requests in turn), and after every step (and a ``gc.collect()``) it
prints: requests served so far, RssAnon growth since the first step, Python's allocated blocks
(``sys.getallocatedblocks``), glibc's heap in use (``mallinfo2``) and SQLite's own heap (``sqlite3_memory_used``:
page caches, statements).

A leak grows every step by about the same amount; caches that fill grow less and less and stop (SQLite's page
cache is bounded by ``cache_size``, 2 MiB per connection by default; the routing and stats windows by their
buckets). Reported, not judged. Correctness (exit 1): every response a 2xx.

Usage: ``.venv/bin/python benchmarks/rss_trace.py [--steps N] [--seconds S] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from bench_sim import server, sim_argv
from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.gateway.app import Gateway
from tailgate.gateway.http.listener import runner_kwargs
from tailgate.gateway.http.listener import site as limits_site

KEY = "sk-rss-trace-client-0123456789"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (f, ctypes.c_size_t)
        for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def _probe(name: str, symbol: str, restype: Any) -> Any:
    try:
        fn = getattr(ctypes.CDLL(name), symbol)
    except (OSError, AttributeError):
        return None
    fn.restype = restype
    return fn


_mallinfo2 = _probe("libc.so.6", "mallinfo2", _MallInfo2)
_sqlite_used = _probe("libsqlite3.so.0", "sqlite3_memory_used", ctypes.c_int64)


def _rss_anon_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


def _config(upstream: str, ledger: Path) -> GatewayConfig:
    provider = {"base_url": f"{upstream}/v1", "api_keys": ["sk-up-0123456789"], "price": {"input": 2.0, "output": 3.0}}
    data = {
        "ledger": {"enabled": True, "path": str(ledger)},
        "keys": [
            {
                "id": "team",
                "key": KEY,
                "tpm": 1_000_000_000,
                "max_concurrency": 100_000,
                "budget": {"tokens_per_day": 100_000_000_000, "cost_per_month": 1_000_000},
            }
        ],
        "providers": {"sim": provider, "sim-b": provider},
        "models": {"bench": {"routes": [{"provider": name, "model": "bench"} for name in ("sim", "sim-b")]}},
    }
    return validate_data(data, GatewayConfig, "rss_trace")


async def trace(upstream: str, workdir: Path, steps: int, seconds: int) -> int:
    cfg = _config(upstream, workdir / "ledger.db")
    gw = Gateway(cfg, resolve_providers(cfg))
    await gw.start()
    runner = web.AppRunner(gw.app(), handler_cancellation=True, access_log=None, **runner_kwargs(cfg.server))
    await runner.setup()
    site = limits_site(runner, "127.0.0.1", 0, cfg.server)
    await site.start()
    scripts = []
    for stream in (False, True):  # the steps alternate: non-stream, stream (as gateway_overhead's RSS phase)
        lua = workdir / f"req-{'stream' if stream else 'unary'}.lua"
        extra = ', "stream": true' if stream else ""
        lua.write_text(
            'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
            f'wrk.headers["Authorization"] = "Bearer {KEY}"\n'
            'wrk.body = \'{"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20'
            f"{extra}}}'\n"
        )
        scripts.append(lua)
    url = f"http://127.0.0.1:{site.port}/v1/chat/completions"
    failures = 0
    served = 0
    first: int | None = None
    try:
        print("step  requests  RssAnon +KiB  Python blocks  malloc in use MB  SQLite MB")
        for step in range(steps):
            proc = await asyncio.create_subprocess_exec(
                "wrk", "-t1", "-c50", f"-d{seconds}s", "-s", str(scripts[step % 2]), url, stdout=asyncio.subprocess.PIPE
            )
            out = (await proc.communicate())[0].decode()
            found = re.search(r"(\d+) requests in", out)
            served += int(found.group(1)) if found else 0
            failures += ("Non-2xx" in out) + ("Socket errors" in out)
            gc.collect()
            rss = _rss_anon_kib()
            first = rss if first is None else first
            heap = f"{_mallinfo2().uordblks / 1e6:16.1f}" if _mallinfo2 is not None else f"{'-':>16}"
            sqlite = f"{_sqlite_used() / 1e6:9.2f}" if _sqlite_used is not None else f"{'-':>9}"
            print(f"{step + 1:4}  {served:8,}  {rss - first:12,}  {sys.getallocatedblocks():13,}  {heap}  {sqlite}")
    finally:
        await runner.cleanup()
        await gw.close()
    if failures:
        print(f"CORRECTNESS FAILURE: {failures} wrk run(s) with non-2xx answers or socket errors")
        return 1
    print("all correctness checks passed")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="2 steps of 1 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.seconds = 2, 1
    if shutil.which("wrk") is None:
        print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tailgate-rss-") as tmp:
        workdir = Path(tmp)
        argv = sim_argv("--preset", "instant", "--port", "0")
        with server("sim (instant)", argv, workdir / "sim.log", pin=False) as sim:
            return asyncio.run(trace(sim.url, workdir, args.steps, args.seconds))


if __name__ == "__main__":
    sys.exit(main())
