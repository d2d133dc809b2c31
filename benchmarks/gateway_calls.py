"""Claim (issue 27): restructuring the gateway did not add work per request — counted, not timed.

On a shared, loaded machine a req/s or CPU-time comparison of two gateways swings by ±30 % a round
(gateway_overhead.py --baseline, docs/benchmarks.md). The number of Python function calls the gateway process
makes per request does not depend on the machine's load (only a little on timing: how many upstream reads a
stream arrives in, how many requests one batch of books takes), so it shows a change in the work per request
that timing cannot. For each tree (this one, and ``--baseline SRC``: another tailgate ``src`` directory, e.g. a
worktree at an older commit) and each mode (non-stream, stream; ``max_tokens`` 20; chat, and with ``--messages``
Anthropic's ``/v1/messages`` too, translated to the simulator's chat), ``tailgate serve`` runs
under cProfile against the same ``instant`` simulator with the gateway_overhead.py config (two routes, a store
key with limits, ledger): once per tree with no request (start-up and stop, shared by both modes) and once per
mode with ``--requests`` requests at 50 connections; calls per request = (calls of the busy run − calls of the
idle run) ÷ requests. A ``--baseline`` that is this same tree is measured once (ratio 1). ``--aiohttp-front`` adds
this tree once more with ``server.http_front: aiohttp`` (the ``/v1`` POSTs through aiohttp's server instead of the
lean front door), reported beside it as ``aiohttp-front``: the calls the lean front door saves (aiohttp's C parser
and multidict are not Python calls, so this counts the Python work only).

Target: after ÷ before within 1.05 in every mode (reported; exit 1 when missed, not with ``--quick``).

Usage: ``.venv/bin/python benchmarks/gateway_calls.py --baseline SRC [--aiohttp-front] [--requests N] [--messages]
[--quick] [--json F]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from _overhead_hops import gateway_yaml, store_key
from bench_sim import server, sim_argv

HERE = Path(__file__).resolve().parent
TARGET = 1.05
BODY = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages"}
"""Where each API's requests go (the body above is both chat's and Anthropic's Messages API's)."""
CONNECTIONS = 50


async def _drive(url: str, bearer: str, n: int, stream: bool, api: str = "chat") -> int:
    """``n`` requests at ``CONNECTIONS`` at a time; returns how many were not answered 200."""
    sem = asyncio.Semaphore(CONNECTIONS)
    body = {**BODY, "stream": stream}
    headers = {"Authorization": f"Bearer {bearer}"}
    if api == "messages":
        headers = {"x-api-key": bearer, "anthropic-version": "2023-06-01"}
    bad = 0
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            nonlocal bad
            async with sem, session.post(f"{url}{PATHS[api]}", json=body, headers=headers) as resp:
                await resp.read()
                bad += resp.status != 200

        await asyncio.gather(*(one() for _ in range(n)))
    return bad


def _calls(
    src: Path, name: str, workdir: Path, sim_url: str, n: int, stream: bool, api: str = "chat", extra_yaml: str = ""
) -> tuple[int, int]:
    """(Python function calls of a ``tailgate serve`` from ``src`` that served ``n`` requests, failed requests)."""
    cfg, _ = gateway_yaml(workdir, name, sim_url, extra_yaml=extra_yaml)
    bearer = store_key(cfg, src)  # made by the tree that serves the store: a newer one migrates it past the older
    prof, log = workdir / f"{name}.prof", workdir / f"{name}.log"
    env = {**os.environ, "PYTHONPATH": str(src)}
    argv = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "tailgate", "serve", "--config", str(cfg)]
    with log.open("w") as out:
        proc = subprocess.Popen([*argv, "--port", "0"], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=HERE.parent)
    try:
        deadline = time.monotonic() + 60.0
        while not (match := re.search(r"listening on (http://\S+)/v1", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{log.read_text()}")
            time.sleep(0.05)
        bad = asyncio.run(_drive(match.group(1), bearer, n, stream, api)) if n else 0
        time.sleep(0.5)  # the last books are kept within a millisecond; the stop drains them anyway
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return int(pstats.Stats(str(prof)).total_calls), bad  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--baseline", type=Path, default=None, metavar="SRC", help="the tailgate src tree to compare with")
    ap.add_argument("--requests", type=int, default=3000, help="requests per measured run (default 3000)")
    ap.add_argument("--messages", action="store_true", help="also measure /v1/messages (translated), both modes")
    ap.add_argument("--quick", action="store_true", help="300 requests; the target is shown, not enforced")
    ap.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    ap.add_argument(
        "--keep-profiles",
        type=Path,
        default=None,
        metavar="DIR",
        help="copy each run's cProfile file here (compare two trees function by function with pstats)",
    )
    ap.add_argument(
        "--aiohttp-front",
        action="store_true",
        help="also measure this tree with server.http_front: aiohttp (reported, not judged)",
    )
    args = ap.parse_args(argv)
    n = 300 if args.quick else max(1, args.requests)
    here = (HERE.parent / "src").resolve()
    trees: dict[str, tuple[Path, str]] = {"after": (here, "")}
    if args.baseline is not None:
        if not (args.baseline / "tailgate" / "__init__.py").is_file():
            raise SystemExit(f"--baseline {args.baseline}: no tailgate package there (give a src directory)")
        trees = {"before": (args.baseline.resolve(), ""), **trees}
    if args.aiohttp_front:
        trees["aiohttp-front"] = (here, "server: {http_front: aiohttp}\n")
    result: dict[str, Any] = {
        "requests": n,
        "connections": CONNECTIONS,
        "trees": {k: str(v[0]) for k, v in trees.items()},
    }
    modes: dict[str, dict[str, Any]] = {}
    failed = 0
    # Each thing measured is measured once: a tree's start-up and stop (no request, so no mode) is one run shared
    # by both modes, and a --baseline that is this very tree reuses this tree's runs (its ratio is then 1).
    idle: dict[tuple[Path, str], int] = {}
    busy: dict[tuple[Path, str, str, bool], tuple[int, int]] = {}
    apis = ("chat", "messages") if args.messages else ("chat",)
    with tempfile.TemporaryDirectory(prefix="gateway_calls-") as tmp:
        workdir = Path(tmp)
        with server(
            "sim (instant)", sim_argv("--preset", "instant", "--port", "0"), workdir / "sim.log", pin=False
        ) as sim:
            for api, stream in ((api, stream) for api in apis for stream in (False, True)):
                mode = ("stream" if stream else "non-stream") + ("" if api == "chat" else f" {api}")
                modes[mode] = {}
                for tag, (src, extra) in trees.items():
                    if (src, extra) not in idle:
                        idle[src, extra], _ = _calls(src, f"{tag}-idle", workdir, sim.url, 0, stream, extra_yaml=extra)
                    if (src, extra, api, stream) not in busy:
                        name = f"{tag}-busy-{mode.replace(' ', '-')}"
                        busy[src, extra, api, stream] = _calls(src, name, workdir, sim.url, n, stream, api, extra)
                        failed += busy[src, extra, api, stream][1]
                    calls, bad = busy[src, extra, api, stream]
                    start = idle[src, extra]
                    per = (calls - start) / n
                    modes[mode][tag] = {"calls_per_request": round(per, 1), "startup_calls": start, "failed": bad}
                    print(f"{mode:19} {tag:13} {per:8.1f} calls/request (start-up and stop: {start:,})", flush=True)
                if "before" in modes[mode]:
                    ratio = modes[mode]["after"]["calls_per_request"] / modes[mode]["before"]["calls_per_request"]
                    modes[mode]["after_over_before"] = round(ratio, 4)
                    print(f"{mode:19} after / before {ratio:.4f} (target <= {TARGET})", flush=True)
                if "aiohttp-front" in modes[mode]:
                    ratio = (
                        modes[mode]["aiohttp-front"]["calls_per_request"] / modes[mode]["after"]["calls_per_request"]
                    )
                    modes[mode]["aiohttp_front_over_lean"] = round(ratio, 4)
                    print(f"{mode:19} aiohttp-front / lean front door {ratio:.4f} (reported)", flush=True)
        if args.keep_profiles is not None:
            args.keep_profiles.mkdir(parents=True, exist_ok=True)
            for prof in workdir.glob("*.prof"):
                shutil.copy(prof, args.keep_profiles / prof.name)
    result["modes"] = modes
    result["failed_requests"] = failed
    met = all(m.get("after_over_before", 1.0) <= TARGET for m in modes.values())
    result["target_met"] = met
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if failed:
        print(f"{failed} requests were not answered 200")
        return 1
    return 0 if met or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
