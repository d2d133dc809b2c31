"""Claim: tailgate relays realistic streams for little more CPU than the least a Python proxy can do.

Hundreds to thousands of concurrent streams of 300 tokens, paced like ``provider-a`` (TTFT ≈ 0.7 s,
then one token per decode step of 8.4 ms + 0.01 ms per sequence in the batch: a stream lasts ≈ 4 s),
through four hops to one simulator, interleaved in one run so drift on a shared machine hits all alike:

- ``direct``: client -> simulator;
- ``floor``: client -> ``_passthrough_proxy.py`` (aiohttp + uvloop, no features) -> simulator;
- ``tailgate``: client -> ``tailgate serve`` (one process) with every default feature on (adaptive
  routing, active probes, client keys with an rpm limit, provider pacing, price, the SQLite ledger, the
  per-minute traffic aggregates, Prometheus metrics) and the fleet's state on Redis -> simulator;
- ``tailgate-w2``: the same config, ``--workers 2`` (at ``--workers-level`` streams only).

The client (``_stream_client.py``, a separate process on uvloop) holds every stream and timestamps every
token chunk. Targets:

1. CPU per relayed chunk (hop processes' CPU ÷ token chunks the client received in the window):
   tailgate ≤ 1.15 × the floor's, at every compared level (default 300 and 1,000 streams);
2. added ITL P99 (tailgate's inter-token-gap P99 − direct's, paired per round, median) ≤ 2 ms at 300 streams.

Reported, no target: the concurrent streams one tailgate process holds with added ITL P99 ≤ 5 ms
(steps up ``--capacity-steps`` until one misses); ``--workers 2`` against 1 at ``--workers-level``; the
client's CPU and the rest of the machine's; a projection of the cores needed for 1,800 QPS of 4-second
streams from the measured CPU per chunk and from the measured capacity.

Correctness (a failure exits 1 in every mode): one stream through each hop is well-formed (200, 300 content
chunks, ``[DONE]``, no usage chunk leaking, tailgate's headers); in every run zero errors and every stream
complete (300 token chunks and ``[DONE]``); every hop produced chunks; each gateway's ledger holds an ``ok``
row for every stream it completed, none dropped; no server process died. Exit 0 when every check passes and
every target is met (``--quick``: targets printed, not enforced).

Usage: ``.venv/bin/python benchmarks/stream_relay.py [--quick] [--rounds N] [--measure S] [--only PART]
[--json F]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from array import array
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench_sim import CHAT_PATH, Checks, _cores, _verdict, finish, print_checks, proc_cpu_s
from gateway_overhead import alive, busy_s
from tailgate.sim.presets import preset
from tailgate.state.server import RedisServer, find_redis_server

HERE = Path(__file__).resolve().parent
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
TARGET_CPU_RATIO = 1.15
TARGET_ADDED_ITL_P99_MS = 2.0
TARGET_ITL_LEVEL = 300
CAPACITY_ADDED_ITL_P99_MS = 5.0
TOKENS = 300
CLIENT_KEY = "sk-bench-client"
UPSTREAM_KEY = "sk-bench-upstream"
PARTS = ("compare", "capacity")
PROJECTION_QPS = 1800
PROJECTION_STREAM_S = 4.0
PROJECTION_UTILISATION = 0.6
"""Cores are sized to run at most this busy: ITL tails grow long before a loop is 100 % busy."""
_LISTEN = re.compile(r"listening on http://127\.0\.0\.1:(\d+)/v1")

_SIM_YAML = """\
seed: 1
time_scale: {time_scale}
truth_size: 200
providers:
  a:
    preset: provider-a
    port: 0
    # provider-a's pacing (step 8.4 ms + 0.01 ms per sequence, jitter, TTFT) with room for every stream:
    # its 256 slots would queue the streams beyond 256 instead of decoding them.
    engine: {{slots: 8192, queue_limit: 16384}}
"""

_GATEWAY_YAML = """\
listen: {{host: 127.0.0.1, port: 0}}
keys:
  - {{id: bench, key: {client_key}, rpm: 10000000}}
providers:
  sim:
    base_url: "{upstream}/v1"
    api_keys: ["{upstream_key}"]
    price: {{input: 2.0, output: 3.0}}
    limits: {{rpm: 10000000, max_connections: 16384}}
models:
  bench:
    routes:
      - {{provider: sim, model: bench}}
server: {{max_connections: 16384, max_upstream_in_flight: 16384}}
ledger: {{enabled: true, path: "{ledger}"}}
state: {{backend: redis, url: "{redis}", namespace: {namespace}}}
"""


def chat_body() -> str:
    return json.dumps(
        {
            "model": "bench",
            "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": TOKENS,
            "stream": True,
        }
    )


@dataclass
class Settings:
    levels: list[int]
    """Concurrent streams at which every hop is compared."""
    workers_level: int
    rounds: int
    ramp_s: float
    measure_s: float
    capacity_steps: list[int]
    client_procs: int
    time_scale: float
    quick: bool
    parts: list[str] = field(default_factory=lambda: list(PARTS))


# -- processes -------------------------------------------------------------------------------------


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (Linux ``/proc/PID/task/*/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{p}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo.extend(int(c) for c in (task / "children").read_text().split())
    return out


def tree_cpu_s(pid: int) -> float:
    return sum(proc_cpu_s(p) or 0.0 for p in tree(pid))


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    url: str = ""

    @property
    def pid(self) -> int:
        return self.popen.pid


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def servers(specs: list[tuple[str, list[str], Path, int]]) -> Iterator[dict[str, Proc]]:
    """Start every ``(name, argv, log, listening lines)`` at once; wait until each has said it listens."""
    procs: dict[str, Proc] = {}
    try:
        for name, argv, log, _ in specs:
            with log.open("w") as fh:
                procs[name] = Proc(
                    name, subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=HERE.parent), log
                )
        deadline = time.monotonic() + 60.0
        for name, _, log, lines in specs:
            while True:
                found = _LISTEN.findall(log.read_text())
                if len(found) >= lines:
                    procs[name].url = f"http://127.0.0.1:{found[0]}"
                    break
                if procs[name].popen.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start:\n{log.read_text()}")
                time.sleep(0.05)
        yield procs
    finally:
        for p in procs.values():
            if p.popen.poll() is None:
                p.popen.terminate()
        for p in procs.values():
            try:
                p.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait()


# -- one measured run ------------------------------------------------------------------------------


COMPLETED: Counter[str] = Counter()
"""Streams each hop completed, every run (each gateway's ledger must hold a row for each)."""


def pct(sorted_ns: list[int], q: float) -> float:
    """Nearest-rank percentile of sorted ns values, in ms."""
    if not sorted_ns:
        return 0.0
    k = max(0, min(len(sorted_ns) - 1, round(q / 100.0 * len(sorted_ns)) - 1))
    return round(sorted_ns[k] / 1e6, 3)


def summary_ms(values: array[int]) -> dict[str, float]:
    """P50/P90/P99/P99.9/max/mean in ms, and the share of zero gaps."""
    s = sorted(values)
    out = {f"p{q}": pct(s, q) for q in (50, 90, 99)}
    out["p99.9"] = pct(s, 99.9)
    out["max"] = round(s[-1] / 1e6, 3) if s else 0.0
    out["mean"] = round(sum(s) / len(s) / 1e6, 3) if s else 0.0
    # Gaps of 0: the token arrived in the same client read as the one before (a hop that fell one step
    # behind forwards both in one write). More of them means fewer writes, so less CPU per chunk.
    out["coalesced"] = round(s.count(0) / len(s), 4) if s else 0.0
    return out


def run_load(
    hop: str, url: str, streams: int, st: Settings, procs: dict[str, Proc], workdir: Path, tag: str
) -> dict[str, Any]:
    """One run: ``streams`` users against ``url`` for ramp + measure seconds (then drained)."""
    k = max(1, min(st.client_procs, streams))
    # time for the client processes to start and open their connections
    t0 = time.monotonic_ns() + int((0.4 + 0.2 * k + streams / 600) * 1e9)
    w0 = t0 + int(st.ramp_s * 1e9)
    w1 = w0 + int(st.measure_s * 1e9)
    clients: list[tuple[subprocess.Popen[bytes], Path]] = []
    for i in range(k):
        out = workdir / f"client-{tag}-{i}.json"
        argv = [sys.executable, str(HERE / "_stream_client.py"), url + CHAT_PATH]
        argv += ["--streams", str(streams // k + (1 if i < streams % k else 0)), "--t0", str(t0 + i * 1000)]
        argv += ["--ramp", str(st.ramp_s), "--measure", str(st.measure_s), "--body", chat_body()]
        argv += ["--key", CLIENT_KEY, "--tokens", str(TOKENS), "--out", str(out)]
        log = (workdir / f"client-{tag}-{i}.log").open("w")
        clients.append((subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), out))
        log.close()
    groups = {name: p.pid for name, p in procs.items()}

    def sample() -> tuple[dict[str, float], float, float | None]:
        cpu = {name: tree_cpu_s(pid) for name, pid in groups.items()}
        cpu["client"] = sum(proc_cpu_s(c.pid) or 0.0 for c, _ in clients)
        return cpu, time.monotonic(), busy_s()

    time.sleep(max(0.0, (w0 - time.monotonic_ns()) / 1e9))
    cpu0, m0, busy0 = sample()
    time.sleep(max(0.0, (w1 - time.monotonic_ns()) / 1e9))
    cpu1, m1, busy1 = sample()
    wall = m1 - m0
    for c, _ in clients:
        try:
            c.wait(timeout=120 * max(1.0, st.time_scale))
        except subprocess.TimeoutExpired:
            c.kill()
            c.wait()
    for p in procs.values():
        if not alive(p.pid):
            raise RuntimeError(f"{p.name} (pid {p.pid}) exited during the run; see {p.log}")
    results = []
    gaps: array[int] = array("q")
    ttft: array[int] = array("q")
    for c, out in clients:
        if c.returncode != 0 or not out.exists():
            log_text = out.with_suffix(".log").read_text()[-2000:]
            raise RuntimeError(f"the stream client failed ({c.returncode}):\n{log_text}")
        results.append(json.loads(out.read_text()))
        gaps.frombytes(out.with_suffix(".gaps").read_bytes())
        ttft.frombytes(out.with_suffix(".ttft").read_bytes())
    errors: Counter[str] = Counter()
    for r in results:
        errors.update(r["errors"])
    started = sum(r["started"] for r in results)
    completed = sum(r["completed"] for r in results)
    chunks = sum(r["chunks_in_window"] for r in results)
    COMPLETED[hop] += completed
    cores = {name: round((cpu1[name] - cpu0[name]) / wall, 3) for name in cpu0}
    hop_group = "sim" if hop == "direct" else hop
    hop_cpu_s = cpu1[hop_group] - cpu0[hop_group]
    busy = (busy1 - busy0) / wall if busy0 is not None and busy1 is not None else None
    return {
        "hop": hop,
        "streams": streams,
        "client_procs": k,
        "window_s": round(wall, 3),
        "started": started,
        "completed": completed,
        "completed_in_window": sum(r["completed_in_window"] for r in results),
        "incomplete": started - completed,
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "first_error": next((r["first_error"] for r in results if r["first_error"]), ""),
        "chunks": chunks,
        "chunks_per_s": round(chunks / wall, 1),
        "itl_ms": summary_ms(gaps),
        "ttft_ms": summary_ms(ttft),
        "hop_cpu_s": round(hop_cpu_s, 4),
        "cpu_us_per_chunk": round(hop_cpu_s / chunks * 1e6, 3) if chunks else None,
        "cores": cores,
        "hop_cores": cores[hop_group],
        "machine_busy_cores": round(busy, 3) if busy is not None else None,
        "others_cores": round(max(0.0, busy - sum(cores.values())), 3) if busy is not None else None,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def show_run(r: dict[str, Any], label: str) -> None:
    itl = r["itl_ms"]
    console.print(
        f"  {label:22} {r['hop']:11} {r['streams']:5} streams  {r['chunks_per_s']:8,.0f} chunks/s  "
        f"ITL P50 {itl['p50']:6.2f} P99 {itl['p99']:6.2f} ms (same read {itl['coalesced']:4.0%})  "
        f"CPU/chunk {r['cpu_us_per_chunk'] or 0:6.1f} µs  "
        f"hop {r['hop_cores']:.2f} client {r['cores']['client']:.2f} sim {r['cores']['sim']:.2f} "
        f"others {_cores(r['others_cores'])} cores  errors {r['errors']} incomplete {r['incomplete']}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def check_run(checks: Checks, label: str, r: dict[str, Any], *, quick: bool = False) -> None:
    """Zero errors, every stream complete (all its chunks and ``[DONE]``), and chunks inside the measured window.
    ``--quick`` judges correctness only: a starved machine may deliver no chunk inside its 0.8 s window (a rate,
    left to the full benchmark), but every stream it started must still complete."""
    in_window = r["chunks"] > 0 or quick
    checks.add(
        f"{label}: zero errors, every stream complete, chunks relayed",
        r["errors"] == 0 and r["incomplete"] == 0 and r["completed"] > 0 and in_window,
        f"{r['completed']} of {r['started']} streams complete, {r['chunks']} chunks in the window, errors "
        f"{r['error_kinds']} {r['first_error']}",
    )


# -- the interleaved comparison --------------------------------------------------------------------


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 3) if xs else 0.0


def compare(
    st: Settings, level: int, hops: dict[str, str], procs: dict[str, Proc], workdir: Path, checks: Checks
) -> dict[str, Any]:
    """Every hop at ``level`` streams, ``st.rounds`` times; the order rotates per round."""
    names = list(hops)
    runs: dict[str, list[dict[str, Any]]] = {h: [] for h in names}
    for r in range(st.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for hop in order:
            res = run_load(hop, hops[hop], level, st, procs, workdir, f"{level}-{r}-{hop}")
            runs[hop].append(res)
            check_run(checks, f"{level} streams round {r + 1} {hop}", res, quick=st.quick)
            show_run(res, f"round {r + 1}")
    return summarize(level, runs)


def summarize(level: int, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    n = len(runs["direct"])
    hops: dict[str, Any] = {}
    for name, rs in runs.items():
        chunks = sum(r["chunks"] for r in rs)
        hops[name] = {
            "chunks": chunks,
            "chunks_per_s": round(chunks / sum(r["window_s"] for r in rs), 1),
            "completed": sum(r["completed"] for r in rs),
            "itl_p50_ms": _median([r["itl_ms"]["p50"] for r in rs]),
            "itl_p99_ms": _median([r["itl_ms"]["p99"] for r in rs]),
            "coalesced": _median([r["itl_ms"]["coalesced"] for r in rs]),
            "ttft_p50_ms": _median([r["ttft_ms"]["p50"] for r in rs]),
            "ttft_p99_ms": _median([r["ttft_ms"]["p99"] for r in rs]),
            # pooled: all the hop's CPU over all its chunks
            "cpu_us_per_chunk": round(sum(r["hop_cpu_s"] for r in rs) / chunks * 1e6, 3) if chunks else None,
            "hop_cores": _median([r["hop_cores"] for r in rs]),
            "sim_cores": _median([r["cores"]["sim"] for r in rs]),
            "client_cores": _median([r["cores"]["client"] for r in rs]),
            "redis_cores": _median([r["cores"].get("redis", 0.0) for r in rs]),
            "others_cores": _median([r["others_cores"] for r in rs if r["others_cores"] is not None]),
            "errors": sum(r["errors"] for r in rs),
            "incomplete": sum(r["incomplete"] for r in rs),
            "rounds": rs,
        }

    def added(hop: str, q: str) -> list[float]:
        return [runs[hop][i]["itl_ms"][q] - runs["direct"][i]["itl_ms"][q] for i in range(n)]

    for name in hops:
        if name != "direct":
            hops[name]["added_itl_p50_ms"] = _median(added(name, "p50"))
            hops[name]["added_itl_p99_ms"] = _median(added(name, "p99"))
            hops[name]["added_itl_p99_rounds"] = [round(x, 3) for x in added(name, "p99")]
    out: dict[str, Any] = {"streams": level, "hops": hops, "targets": {}}
    floor, gw = hops.get("floor"), hops.get("tailgate")
    if floor and gw and floor["cpu_us_per_chunk"] and gw["cpu_us_per_chunk"]:
        ratio = gw["cpu_us_per_chunk"] / floor["cpu_us_per_chunk"]
        per_round = [
            a["hop_cpu_s"] / a["chunks"] / (b["hop_cpu_s"] / b["chunks"])
            for a, b in zip(runs["tailgate"], runs["floor"], strict=True)
            if a["chunks"] and b["chunks"] and b["hop_cpu_s"] > 0
        ]
        out["cpu_ratio"] = round(ratio, 3)
        out["cpu_ratio_rounds"] = [round(x, 3) for x in per_round]
        out["targets"]["cpu_ratio"] = {
            "what": f"{level} streams: tailgate CPU per chunk <= {TARGET_CPU_RATIO} x floor's",
            "value": out["cpu_ratio"],
            "passed": ratio <= TARGET_CPU_RATIO,
        }
    if gw and level == TARGET_ITL_LEVEL:
        out["targets"]["added_itl_p99"] = {
            "what": f"{level} streams: tailgate added ITL P99 <= {TARGET_ADDED_ITL_P99_MS} ms",
            "value": gw["added_itl_p99_ms"],
            "passed": gw["added_itl_p99_ms"] <= TARGET_ADDED_ITL_P99_MS,
        }
    if "tailgate-w2" in hops and gw:
        w2 = hops["tailgate-w2"]
        out["workers"] = {
            "added_itl_p99_ms": {"w1": gw["added_itl_p99_ms"], "w2": w2["added_itl_p99_ms"]},
            "cpu_us_per_chunk": {"w1": gw["cpu_us_per_chunk"], "w2": w2["cpu_us_per_chunk"]},
            "hop_cores": {"w1": gw["hop_cores"], "w2": w2["hop_cores"]},
        }
    return out


# -- capacity --------------------------------------------------------------------------------------


def capacity(
    st: Settings,
    hops: dict[str, str],
    procs: dict[str, Proc],
    workdir: Path,
    checks: Checks,
    compared: dict[int, dict[str, Any]],
) -> dict[str, Any]:
    """Step the streams up until tailgate's added ITL P99 passes 5 ms; the last step that held is reported.

    If the first step already misses, halve it (twice at most, not below 25 streams) so that a busy
    machine still reports a number rather than none.
    """
    steps: list[dict[str, Any]] = []
    held: int | None = None
    todo = list(st.capacity_steps)
    halvings = 0
    i = 0
    while todo:
        level = todo.pop(0)
        step = (
            compared_step(level, compared)
            if level in compared
            else measured_step(st, level, i, hops, procs, workdir, checks)
        )
        i += 1
        step["held"] = step["added_itl_p99_ms"] <= CAPACITY_ADDED_ITL_P99_MS and step["errors"] == 0
        steps.append(step)
        console.print(
            f"  capacity: {level} streams, added ITL P99 {step['added_itl_p99_ms']:.2f} ms: "
            f"{'held' if step['held'] else 'missed'}",
            markup=False,
        )
        if step["held"]:
            held = level
            if halvings:
                break  # stepping down: the first that holds is the answer
        elif held is None and halvings < 2 and level // 2 >= 25:
            halvings += 1
            todo = [level // 2]
        else:
            break
    return {"limit_ms": CAPACITY_ADDED_ITL_P99_MS, "steps": steps, "held": held}


def compared_step(level: int, compared: dict[int, dict[str, Any]]) -> dict[str, Any]:
    gw = compared[level]["hops"]["tailgate"]
    return {
        "streams": level,
        "from": "compare",
        "added_itl_p99_ms": gw["added_itl_p99_ms"],
        "itl_p99_ms": gw["itl_p99_ms"],
        "direct_itl_p99_ms": compared[level]["hops"]["direct"]["itl_p99_ms"],
        "chunks_per_s": gw["chunks_per_s"],
        "hop_cores": gw["hop_cores"],
        "cpu_us_per_chunk": gw["cpu_us_per_chunk"],
        "others_cores": gw["others_cores"],
        "errors": max(gw["errors"], gw["incomplete"]),
    }


def measured_step(
    st: Settings, level: int, i: int, hops: dict[str, str], procs: dict[str, Proc], workdir: Path, checks: Checks
) -> dict[str, Any]:
    order = ["direct", "tailgate"] if i % 2 == 0 else ["tailgate", "direct"]
    res = {}
    for hop in order:
        res[hop] = run_load(hop, hops[hop], level, st, procs, workdir, f"cap-{level}-{hop}")
        check_run(checks, f"capacity {level} streams {hop}", res[hop], quick=st.quick)
        show_run(res[hop], "capacity")
    gw = res["tailgate"]
    return {
        "streams": level,
        "from": "step",
        "added_itl_p99_ms": round(gw["itl_ms"]["p99"] - res["direct"]["itl_ms"]["p99"], 3),
        "itl_p99_ms": gw["itl_ms"]["p99"],
        "direct_itl_p99_ms": res["direct"]["itl_ms"]["p99"],
        "chunks_per_s": gw["chunks_per_s"],
        "hop_cores": gw["hop_cores"],
        "cpu_us_per_chunk": gw["cpu_us_per_chunk"],
        "others_cores": gw["others_cores"],
        "errors": max(gw["errors"], gw["incomplete"]),
        "runs": res,
    }


# -- projection ------------------------------------------------------------------------------------


def projection(
    compared: dict[int, dict[str, Any]], cap: dict[str, Any] | None, time_scale: float
) -> dict[str, Any] | None:
    """Cores for 1,800 QPS of 4-second streams (7,200 in flight), from the measured numbers."""
    if not compared:
        return None
    level = TARGET_ITL_LEVEL if TARGET_ITL_LEVEL in compared else min(compared)
    gw = compared[level]["hops"]["tailgate"]
    in_flight = PROJECTION_QPS * PROJECTION_STREAM_S
    # Measured: each of our streams is ~4 s long (TTFT + 300 steps), so chunks per second per open stream
    # at this level is what a 4-second provider-a stream delivers.
    per_stream = gw["chunks_per_s"] / level * time_scale  # --quick runs the simulator faster
    chunks_per_s = in_flight * per_stream
    shape = preset("provider-a")
    upper = in_flight * 1000.0 / shape.step_ms  # every stream decoding at the preset's fastest step, all 4 s
    us = gw["cpu_us_per_chunk"] or 0.0
    out: dict[str, Any] = {
        "qps": PROJECTION_QPS,
        "stream_s": PROJECTION_STREAM_S,
        "in_flight": in_flight,
        "measured_at_streams": level,
        "chunks_per_s_per_stream": round(per_stream, 2),
        "chunks_per_s": round(chunks_per_s),
        "cpu_us_per_chunk": us,
        "cores_busy": round(chunks_per_s * us / 1e6, 2),
        "utilisation": PROJECTION_UTILISATION,
        "cores": round(chunks_per_s * us / 1e6 / PROJECTION_UTILISATION, 1),
        "upper_chunks_per_s": round(upper),
        "upper_cores": round(upper * us / 1e6 / PROJECTION_UTILISATION, 1),
    }
    if cap is not None and cap.get("held"):
        out["capacity_streams_per_process"] = cap["held"]
        out["processes_by_capacity"] = -(-int(in_flight) // int(cap["held"]))
    return out


# -- correctness -----------------------------------------------------------------------------------


def check_one(root: str, *, gateway: bool) -> tuple[bool, str]:
    """One stream is well-formed: 200, 300 content chunks, [DONE], no usage chunk; tailgate's headers."""
    req = urllib.request.Request(root + CHAT_PATH, data=chat_body().encode())  # noqa: S310 - loopback
    req.add_header("Authorization", f"Bearer {CLIENT_KEY}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
        status, headers, raw = int(resp.status), {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    frames = [f.removeprefix(b"data: ") for f in raw.split(b"\n\n") if f.startswith(b"data: ")]
    chunks = [json.loads(f)["choices"] for f in frames[:-1]]
    tokens = sum(1 for c in chunks if c and c[0]["delta"].get("content"))
    ok = status == 200 and tokens == TOKENS and bool(frames) and frames[-1] == b"[DONE]" and all(chunks)
    detail = f"status {status}, {tokens} content chunks, usage-only chunks {sum(1 for c in chunks if not c)}"
    if gateway:
        ok = ok and headers.get("x-tailgate-provider") == "sim"
        detail += f", x-tailgate-provider {headers.get('x-tailgate-provider')!r}"
    return ok, detail


def check_ledger(checks: Checks, name: str, db: Path, log_text: str, completed: int) -> dict[str, Any]:
    """After the gateway stopped: an ok row for every stream it completed, none dropped (every worker)."""
    flushed = [(int(a), int(b)) for a, b in re.findall(r"ledger flushed: (\d+) rows written, (\d+) dropped", log_text)]
    dropped = sum(b for _, b in flushed) if flushed else None
    rows = ok_rows = 0
    outcomes: dict[str, int] = {}
    try:
        with sqlite3.connect(db) as conn:
            rows, ok_rows = conn.execute("SELECT count(*), coalesce(sum(outcome = 'ok'), 0) FROM requests").fetchone()
            outcomes = dict(conn.execute("SELECT outcome, count(*) FROM requests GROUP BY outcome").fetchall())
    except sqlite3.Error as exc:
        checks.add(f"{name}: ledger readable", False, f"{type(exc).__name__}: {exc}")
    checks.add(
        f"{name}: ledger has a row for every completed stream, none dropped",
        ok_rows >= completed and dropped == 0,
        f"{rows:,} rows ({outcomes}) for {completed:,} completed streams; flushed {flushed}",
    )
    return {
        "rows": rows,
        "ok_rows": ok_rows,
        "outcomes": outcomes,
        "completed": completed,
        "flushed": flushed,
        "dropped": dropped,
    }


# -- report ----------------------------------------------------------------------------------------


def print_compare(sc: dict[str, Any], enforced: bool) -> None:
    h = sc["hops"]
    names = list(h)
    table = Table("", *names, title=f"{sc['streams']} concurrent streams of {TOKENS} tokens, provider-a pacing")

    def row(label: str, fmt: Any) -> None:
        table.add_row(label, *(fmt(h[n]) if fmt(h[n]) is not None else "-" for n in names))

    row("chunks/s relayed", lambda x: f"{x['chunks_per_s']:,.0f}")
    row("ITL P50 / P99 ms", lambda x: f"{x['itl_p50_ms']:.2f} / {x['itl_p99_ms']:.2f}")
    row(
        "added ITL P50 / P99 ms",
        lambda x: f"{x['added_itl_p50_ms']:.3f} / {x['added_itl_p99_ms']:.3f}" if "added_itl_p99_ms" in x else "-",
    )
    row("tokens in the same read as the last", lambda x: f"{x['coalesced']:.1%}")
    row("TTFT P50 / P99 ms", lambda x: f"{x['ttft_p50_ms']:.0f} / {x['ttft_p99_ms']:.0f}")
    row("hop CPU µs / chunk", lambda x: f"{x['cpu_us_per_chunk']:.2f}" if x["cpu_us_per_chunk"] else "-")
    row("hop CPU (cores)", lambda x: _cores(x["hop_cores"]))
    row("simulator CPU (cores)", lambda x: _cores(x["sim_cores"]))
    row("client CPU (cores)", lambda x: _cores(x["client_cores"]))
    row("redis CPU (cores)", lambda x: _cores(x["redis_cores"]))
    row("rest of the machine (cores)", lambda x: _cores(x["others_cores"]))
    row("errors; incomplete streams", lambda x: f"{x['errors']}; {x['incomplete']}")
    console.print(table)
    for t in sc["targets"].values():
        console.print(f"  {t['what']}: {t['value']}  {_verdict(t['passed'], enforced)}", highlight=False)
    if "cpu_ratio_rounds" in sc:
        console.print(f"  tailgate / floor CPU per chunk, per round: {sc['cpu_ratio_rounds']}", markup=False)


def print_capacity(cap: dict[str, Any]) -> None:
    table = Table(
        "streams",
        "direct ITL P99",
        "tailgate ITL P99",
        "added",
        "chunks/s",
        "tailgate cores",
        "µs/chunk",
        "others",
        "held",
    )
    for s in cap["steps"]:
        table.add_row(
            str(s["streams"]),
            f"{s['direct_itl_p99_ms']:.2f}",
            f"{s['itl_p99_ms']:.2f}",
            f"{s['added_itl_p99_ms']:.2f}",
            f"{s['chunks_per_s']:,.0f}",
            _cores(s["hop_cores"]),
            f"{s['cpu_us_per_chunk']:.2f}" if s["cpu_us_per_chunk"] else "-",
            _cores(s["others_cores"]),
            "yes" if s["held"] else "no",
        )
    table.title = f"one tailgate process: concurrent streams with added ITL P99 <= {cap['limit_ms']} ms"
    console.print(table)
    console.print(f"  held up to: {cap['held']} streams", markup=False)


def print_projection(p: dict[str, Any]) -> None:
    console.print(
        f"projection, {p['qps']:,} QPS of {p['stream_s']:.0f}-second streams = {p['in_flight']:,.0f} in flight: "
        f"{p['chunks_per_s_per_stream']} chunks/s per open stream (measured at {p['measured_at_streams']}) -> "
        f"{p['chunks_per_s']:,} chunks/s x {p['cpu_us_per_chunk']} µs = {p['cores_busy']} cores busy; "
        f"at <= {p['utilisation']:.0%} per core: {p['cores']} cores (every stream decoding at 8.4 ms steps for "
        f"all 4 s: {p['upper_chunks_per_s']:,} chunks/s, {p['upper_cores']} cores)"
        + (
            f"; by measured capacity ({p['capacity_streams_per_process']} streams per process): "
            f"{p['processes_by_capacity']} processes"
            if "processes_by_capacity" in p
            else ""
        ),
        markup=False,
        soft_wrap=True,
    )


# -- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--levels", default="300,1000", help="concurrent streams compared on every hop (default 300,1000)")
    ap.add_argument("--workers-level", type=int, default=1000, help="streams at which --workers 2 runs (default 1000)")
    ap.add_argument("--capacity-steps", default="300,600,1000,1500,2000", help="streams tried in the capacity search")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the comparison (default 2)")
    ap.add_argument("--ramp", type=float, default=4.0, help="seconds over which the streams start (default 4)")
    ap.add_argument("--measure", type=float, default=6.0, help="seconds measured per run (default 6)")
    ap.add_argument("--client-procs", type=int, default=1, help="client processes sharing the streams (default 1)")
    ap.add_argument("--only", action="append", choices=PARTS, default=None, help="run only this part (repeatable)")
    ap.add_argument(
        "--quick", action="store_true", help="tiny: 20 streams, a 5x faster simulator; targets not enforced"
    )
    ap.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    if find_redis_server() is None:
        console.print("[bold red]redis-server is not installed[/] (apt-get install redis-server)")
        return 2
    st = Settings(
        levels=[20] if args.quick else [int(x) for x in args.levels.split(",")],
        workers_level=20 if args.quick else args.workers_level,
        rounds=1 if args.quick else max(1, args.rounds),
        ramp_s=0.3 if args.quick else args.ramp,
        measure_s=0.8 if args.quick else args.measure,
        capacity_steps=[20, 40] if args.quick else [int(x) for x in args.capacity_steps.split(",")],
        client_procs=max(1, args.client_procs),
        time_scale=0.2 if args.quick else 1.0,
        quick=args.quick,
        parts=args.only or list(PARTS),
    )
    info = {
        "nproc": len(os.sched_getaffinity(0)),
        "python": sys.version.split()[0],
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
    }
    console.print(
        f"nproc {info['nproc']}, Python {info['python']}, load average {info['loadavg_before']}; "
        f"{TOKENS}-token streams, provider-a pacing (time_scale {st.time_scale}); compare at {st.levels} streams "
        f"x {st.rounds} round(s) (--workers 2 at {st.workers_level}); capacity steps {st.capacity_steps}; "
        f"each run: {st.ramp_s} s ramp, {st.measure_s} s measured, then drained",
        markup=False,
        soft_wrap=True,
    )
    checks = Checks()
    result: dict[str, Any] = {"machine": info, "settings": asdict(st), "compare": {}, "capacity": None}
    with tempfile.TemporaryDirectory(prefix="stream_relay-") as tmp, RedisServer() as redis:
        workdir = Path(tmp)
        sim_cfg = workdir / "sim.yaml"
        sim_cfg.write_text(_SIM_YAML.format(time_scale=st.time_scale))
        with servers(
            [("sim", [sys.executable, "-m", "tailgate", "mock", "--config", str(sim_cfg)], workdir / "sim.log", 1)]
        ) as sim_procs:
            sim = sim_procs["sim"]
            gw_specs: list[tuple[str, list[str], Path, int]] = []
            for name, workers in (("tailgate", 1), ("tailgate-w2", 2)):
                cfg = workdir / f"{name}.yaml"
                cfg.write_text(
                    _GATEWAY_YAML.format(
                        client_key=CLIENT_KEY,
                        upstream=sim.url,
                        upstream_key=UPSTREAM_KEY,
                        ledger=workdir / f"{name}.db",
                        redis=redis.url,
                        namespace=name.replace("-", "_"),
                    )
                )
                argv = [sys.executable, "-m", "tailgate", "serve", "--config", str(cfg)]
                argv += ["--port", str(free_port() if workers > 1 else 0), "--workers", str(workers)]
                gw_specs.append((name, argv, workdir / f"{name}.log", workers))
            floor_argv = [sys.executable, str(HERE / "_passthrough_proxy.py"), sim.url, "0", "16384"]
            with servers([("floor", floor_argv, workdir / "floor.log", 1), *gw_specs]) as hop_procs:
                procs = {"sim": sim, **hop_procs}
                assert redis.proc is not None
                procs["redis"] = Proc("redis", redis.proc, workdir / "redis.log")
                urls = {"direct": sim.url, **{n: p.url for n, p in hop_procs.items()}}
                with ThreadPoolExecutor(len(urls)) as pool:
                    futures = {n: pool.submit(check_one, u, gateway=n.startswith("tailgate")) for n, u in urls.items()}
                for n, fut in futures.items():
                    checks.guard(f"{n}: one stream is well-formed", fut.result)
                compared: dict[int, dict[str, Any]] = {}
                if "compare" in st.parts:
                    for level in st.levels:
                        hops = {h: urls[h] for h in ("direct", "floor", "tailgate")}
                        if level == st.workers_level:
                            hops["tailgate-w2"] = urls["tailgate-w2"]
                        console.print(f"{level} streams:", markup=False)
                        compared[level] = compare(st, level, hops, procs, workdir, checks)
                        print_compare(compared[level], not st.quick)
                    result["compare"] = {str(k): v for k, v in compared.items()}
                cap = None
                if "capacity" in st.parts:
                    cap = capacity(st, urls, procs, workdir, checks, compared)
                    result["capacity"] = cap
                    print_capacity(cap)
                result["projection"] = projection(compared, cap, st.time_scale)
                if result["projection"] is not None:
                    print_projection(result["projection"])
        for name in ("tailgate", "tailgate-w2"):
            result.setdefault("ledger", {})[name] = check_ledger(
                checks, name, workdir / f"{name}.db", (workdir / f"{name}.log").read_text(), COMPLETED[name]
            )
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    print_checks("stream_relay", {"checks": checks.items})
    targets = [t for sc in compared.values() for t in sc["targets"].values()]
    correct = checks.ok
    met = all(t["passed"] for t in targets)
    result.update(checks=checks.items, correct=correct, targets_met=met, enforced=not st.quick)
    return finish(console, result, args.json, correct=correct, met=met, quick=st.quick)


if __name__ == "__main__":
    sys.exit(main())
