"""Claim: under long mixed load with faults injected on a timeline, the gateway neither leaks nor fails clients.

Setup: two simulated providers (``primary``, ``fallback``, the ``instant`` preset with a little latency)
in this process, ``tailgate serve`` as a child process in front of them (weighted 80/20, probes on,
ledger in a temp dir), and a closed-loop client (``--concurrency``, half streams, half not). Every
``--phase`` seconds the primary's faults change through its ``/sim/faults`` API, cycling through:
none, 30 % 5xx, first-token stalls, mid-stream cuts, malformed chunks, a full outage (connection
reset), 429s. The gateway is sampled every ``--sample`` seconds: RSS and open file descriptors from
``/proc``, asyncio tasks and ledger pending rows from ``/metrics``.

Targets (checked after ``--warmup`` seconds):

1. RSS growth from the end of the warm-up to the end < 5 % (``--rss-limit``; the check's key names the limit);
2. open file descriptors and asyncio tasks flat: the last third's maximum is at most the warm-up's
   maximum + 10 % + 8 (a leak grows without bound; load noise does not);
3. 0 client errors outside the injected faults' documented outcomes: a cut or malformed stream after
   its first token ends with an SSE error event (docs/reliability.md); every other request, in every
   phase, is a 200 with a complete answer.

Usage: ``.venv/bin/python benchmarks/soak.py [--duration 1800] [--quick] [--json out.json]``
(``--quick``: 60 s, the smoke version the test suite runs). Exit status 0 when every target is met.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tailgate.sim.faults import Faults
from tailgate.sim.presets import preset
from tailgate.sim.provider import ProviderSpec, SimProvider

PHASES: list[tuple[str, dict[str, Any]]] = [
    ("calm", {}),
    ("5xx", {"error_rate": 0.3, "error_statuses": [500, 502, 503]}),
    ("first_token_stall", {"stall_first_token_s": 3.0, "spike_rate": 0.0}),
    ("mid_stream_cut", {"disconnect_after_tokens": 3}),
    ("malformed", {"malformed_rate": 0.3}),
    ("outage", {"outage": True, "outage_mode": "reset"}),
    ("rate_limited", {"error_rate": 0.5, "error_statuses": [429]}),
]
DOCUMENTED_SSE_ERRORS = {"mid_stream_cut", "malformed"}
"""Phases in which a stream that already started may end with an SSE error event (no fallback after
the first token: docs/gateway.md)."""


@dataclass
class Tally:
    ok: int = 0
    documented: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)


def _spec(name: str, model: str) -> ProviderSpec:
    return ProviderSpec(name=name, params=preset("instant"), preset="instant", port=0, models=(model,))


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


async def _client(url: str, stop: asyncio.Event, phase: list[str], tally: Tally, worker: int) -> None:
    i = 0
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not stop.is_set():
            i += 1
            stream = (i + worker) % 2 == 0
            body = {"model": "m", "messages": [{"role": "user", "content": "soak"}], "max_tokens": 8, "stream": stream}
            now_phase = phase[0]
            try:
                async with session.post(f"{url}/chat/completions", json=body) as r:
                    raw = await r.read()
                    status = r.status
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                tally.errors[f"{now_phase}:client {type(exc).__name__}"] += 1
                continue
            if status != 200:
                tally.errors[f"{now_phase}:HTTP {status}"] += 1
                if len(tally.examples) < 5:
                    tally.examples.append(raw[:200].decode("utf-8", "replace"))
            elif stream and b"event: error" in raw:
                if now_phase in DOCUMENTED_SSE_ERRORS or phase[0] in DOCUMENTED_SSE_ERRORS:
                    tally.documented[f"{now_phase}:sse error"] += 1
                else:
                    tally.errors[f"{now_phase}:sse error"] += 1
            elif stream and not raw.rstrip().endswith(b"data: [DONE]"):
                tally.errors[f"{now_phase}:stream without [DONE]"] += 1
            else:
                tally.ok += 1


def start_gateway(config: Path) -> tuple[subprocess.Popen[str], str]:
    """``tailgate serve --port 0`` as a child process, and its URL once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailgate", "serve", "--config", str(config), "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if match := re.search(r"gateway listening on (http://\S+)", line):
            return proc, match.group(1)
    raise SystemExit("tailgate serve did not start")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="tailgate-soak-"))
    primary = SimProvider(_spec("primary", "up-primary"))
    fallback = SimProvider(_spec("fallback", "up-fallback"))
    await primary.start()
    await fallback.start()
    config = {
        "providers": {
            "primary": {"base_url": primary.url, "timeouts": {"first_token": 1.0, "idle": 1.0}},
            "fallback": {"base_url": fallback.url},
        },
        "models": {
            "m": {
                "routes": [
                    {"provider": "primary", "model": "up-primary", "weight": 80},
                    {"provider": "fallback", "model": "up-fallback", "weight": 20},
                ]
            }
        },
        "routing": {"policy": "weighted"},
        "ledger": {"path": str(tmp / "ledger.db")},
    }
    (tmp / "gateway.yaml").write_text(yaml.safe_dump(config))
    proc, url = start_gateway(tmp / "gateway.yaml")
    assert proc.stderr is not None
    # keep reading the child's log so its pipe never fills
    log_task = asyncio.get_running_loop().run_in_executor(None, proc.stderr.read)
    stop = asyncio.Event()
    phase = ["calm"]
    tally = Tally()
    samples: list[dict[str, float]] = []
    clients = [asyncio.create_task(_client(url, stop, phase, tally, w)) for w in range(args.concurrency)]
    t0 = time.monotonic()
    next_phase, index = t0, 0
    async with aiohttp.ClientSession() as session:
        while (elapsed := time.monotonic() - t0) < args.duration:
            if time.monotonic() >= next_phase:
                name, faults = PHASES[index % len(PHASES)]
                primary.clear_faults()
                if faults:
                    primary.set_faults(Faults.model_validate(faults))
                phase[0] = name
                index += 1
                next_phase += args.phase
            async with session.get(url.removesuffix("/v1") + "/metrics") as r:
                text = await r.text()
            samples.append(
                {
                    "t": round(elapsed, 1),
                    "rss_kb": _rss_kb(proc.pid),
                    "fds": _fds(proc.pid),
                    "tasks": _metric(text, "tailgate_event_loop_tasks"),
                    "ledger_pending": _metric(text, "tailgate_ledger_pending_rows"),
                    "phase": index,
                }
            )
            if args.verbose:
                print(samples[-1], phase[0], tally.ok, sum(tally.errors.values()), flush=True)
            await asyncio.sleep(args.sample)
    stop.set()
    await asyncio.gather(*clients)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    await log_task
    await primary.stop()
    await fallback.stop()

    warm = [s for s in samples if s["t"] <= args.warmup] or samples[:1]
    last_third = [s for s in samples if s["t"] >= args.duration * 2 / 3] or samples[-1:]
    rss_start, rss_end = warm[-1]["rss_kb"], samples[-1]["rss_kb"]
    growth = (rss_end - rss_start) / rss_start
    flat = {key: (max(s[key] for s in warm), max(s[key] for s in last_third)) for key in ("fds", "tasks")}
    checks = {
        f"rss_growth_below_{round(args.rss_limit * 100)}pct": growth < args.rss_limit,
        "fds_flat": flat["fds"][1] <= flat["fds"][0] * 1.1 + 8,
        "tasks_flat": flat["tasks"][1] <= flat["tasks"][0] * 1.1 + 8,
        "no_undocumented_client_errors": not tally.errors,
    }
    return {
        "duration_s": args.duration,
        "concurrency": args.concurrency,
        "phase_s": args.phase,
        "requests_ok": tally.ok,
        "documented_outcomes": dict(tally.documented),
        "client_errors": dict(tally.errors),
        "error_examples": tally.examples,
        "rss_kb": {"after_warmup": rss_start, "end": rss_end, "growth": round(growth, 4)},
        "fds": {"warmup_max": flat["fds"][0], "last_third_max": flat["fds"][1]},
        "tasks": {"warmup_max": flat["tasks"][0], "last_third_max": flat["tasks"][1]},
        "checks": checks,
        "samples": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=1800.0)
    parser.add_argument("--warmup", type=float, default=None, help="seconds (default: 10%% of the run, >= 20 s)")
    parser.add_argument("--phase", type=float, default=None, help="seconds per fault phase (default: duration/28)")
    parser.add_argument("--sample", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--rss-limit",
        type=float,
        default=0.05,
        help="largest RSS growth after the warm-up, a fraction (default 0.05; the suite's short smoke on a shared "
        "machine uses 0.15: its fill-up moves with the other work there)",
    )
    parser.add_argument("--quick", action="store_true", help="60 s smoke run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.duration = 60.0
    args.warmup = args.warmup if args.warmup is not None else max(20.0, args.duration / 10)
    args.phase = args.phase if args.phase is not None else max(5.0, args.duration / 28)
    result = asyncio.run(run(args))
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if all(result["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
