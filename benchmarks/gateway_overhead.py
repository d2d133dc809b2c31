"""Claim: the gateway, with every feature on, costs little more than the least a Python proxy can do.

Hops to the same ``instant`` simulator, driven by the identical wrk command, interleaved in one run so
that drift on a shared machine hits all of them alike:

- ``direct``: wrk -> simulator;
- ``floor``: wrk -> ``_passthrough_proxy.py`` (aiohttp + uvloop, pooled client, no features) -> simulator;
- ``tailgate``: wrk -> ``tailgate serve``, one worker, every default feature on (adaptive routing over two
  routes, probes, a store key with rpm/tpm/concurrency/budgets, upstream key, price, metrics, ledger and
  traffic aggregates in a temp dir, live stats windows) -> simulator;

and, besides (``--hops``; issue 15):

- ``litellm``: LiteLLM's proxy, one worker, a master key, no database (non-stream only; it runs when
  ``benchmarks/.venv-litellm`` holds the pinned version, which ``--litellm`` installs);
- ``workers2``: the tailgate config under ``tailgate serve --workers 2`` (c=50 only; CPU of both workers);
- ``redis``: the tailgate config with ``state: {backend: redis}`` on a throw-away redis-server;
- ``aiohttp-front``: the tailgate config with ``server: {http_front: aiohttp}`` (the /v1 POSTs through
  aiohttp's server, not the gateway's front door): the A/B of gateway/http/lean_connection.py;
- ``baseline`` (``--baseline SRC``): the tailgate config served by another tailgate tree (``SRC``, its ``src``
  directory, on ``PYTHONPATH``: e.g. a worktree of an older commit), interleaved like the others: a before /
  after of a change in one run (issue 27);
- ``otel`` (``--otel``; issue 43): the tailgate config with OpenTelemetry export on (``telemetry:``: a span per
  request and per attempt, the GenAI metrics) to a sink collector (``_otlp_sink.py``: an OTLP/HTTP receiver in a
  process of its own that accepts and discards), c=50 only: export on ÷ off (the ``tailgate`` hop);
- ``baseline-otel`` (``--otel`` with ``--baseline SRC``): the otel hop's config served by the baseline tree, to the
  same sink: a change to the export's cost, before / after in one run.

Modes: non-stream (max_tokens 20) and stream (20 token chunks) at 1 and 50 connections. Targets:

1. tailgate req/s >= 70 % of the floor's, in every mode;
2. at c=1, tailgate's added latency (hop P50 - direct P50, paired per round) <= 1.25 x the floor's;
3. at c=1, tailgate's added P99 (hop P99 - direct P99, paired per round) <= 2 ms;
4. the gateway's RSS stays within +-5 % over ``--rss-requests`` (default 200,000) more requests
   after a warm-up;
5. with the LiteLLM hop: tailgate req/s >= 45 x LiteLLM's, non-stream at c=50;
6. with the otel hop: its CPU per request <= 1.05 x tailgate's (export off), non-stream and stream at c=50.

The workers2, redis, aiohttp-front and baseline hops are reported (req/s and CPU per request against
tailgate's), not judged; with ``--baseline`` at the commit before telemetry, tailgate ÷ baseline is the cost of
export off.

Correctness: every wrk run (warm-ups included) has zero non-2xx and zero socket errors; one request
through each hop is well-formed; each gateway's ledger holds a row for every request it answered.
Exit status: 0 when all checks pass and every target is met; 1 otherwise (``--quick``: targets shown,
not enforced); 2 when wrk is missing.

Usage: ``.venv/bin/python benchmarks/gateway_overhead.py [--duration S] [--rounds N] [--quick] [--json F]
[--hops litellm,workers2,redis|none] [--litellm] [--baseline SRC] [--otel]``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _overhead_hops import (
    LITELLM_KEY,
    LITELLM_VERSION,
    Hop,
    gateway_hop,
    install_litellm,
    litellm_ready,
    litellm_server,
    litellm_version,
    metric_sum,
    redis_commands,
    tree_cpu_s,
    tree_pids,
)
from _overhead_report import (
    EXTRA_HOPS,
    HOP_MODES,
    HOPS,
    MODES,
    ONLY,
    TARGET_ADDED_P50_RATIO,
    TARGET_ADDED_P99_MS,
    TARGET_OTEL_CPU_RATIO,
    TARGET_RPS_RATIO,
    TARGET_RSS_GROWTH,
    TARGET_VS_LITELLM,
    _kib,
    console,
    print_mode,
    print_rss,
)
from bench_sim import (
    CHAT_PATH,
    TOKENS,
    Checks,
    Server,
    Wrk,
    WrkResult,
    _chat_body,
    _cores,
    check_wrk,
    finish,
    machine,
    print_checks,
    print_machine,
    proc_cpu_s,
    server,
    sim_argv,
)
from tailgate.state.server import RedisServer, find_redis_server

HERE = Path(__file__).resolve().parent

# The same request for every hop. The simulator and the floor ignore the bearer; tailgate and LiteLLM check it.
_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
wrk.body = '{body}'
"""


@dataclass
class Settings:
    duration_s: int
    rounds: int
    warmup_s: int
    rss_warmup_requests: int
    rss_requests: int
    rss_chunk_s: int
    quick: bool


# -- one measured run ------------------------------------------------------------------------------


ANSWERED: Counter[int] = Counter()
"""Responses wrk counted per server pid, warm-ups included (the ledger must hold a row for each)."""


def busy_s() -> float | None:
    """CPU seconds the whole machine has been busy (all CPUs, ``/proc/stat``; None elsewhere)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    except (OSError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (Linux ``/proc``; True where there is none)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _per_s(a: float | None, b: float | None, wall: float) -> float | None:
    return round((b - a) / wall, 3) if a is not None and b is not None else None


def measure(
    wrk: Wrk,
    hop: Server,
    sim: Server,
    script: Path,
    *,
    connections: int,
    duration_s: int,
    helper: int | None = None,
) -> dict[str, Any]:
    """One wrk run against ``hop``, with the CPU that hop, simulator, wrk and the rest of the machine used.

    The hop's CPU is that of its whole process tree (``--workers 2``: both workers); ``helper`` is a process
    the hop depends on (the redis hop's redis-server), counted apart.
    """
    helper0 = proc_cpu_s(helper) if helper is not None else None
    hop0, sim0, busy0 = tree_cpu_s(hop.pid), proc_cpu_s(sim.pid), busy_s()
    t0 = time.perf_counter()
    run = wrk.start(hop.url + CHAT_PATH, script, connections=connections, duration_s=duration_s, timeout_s=10)
    res = run.finish(hop)
    wall = time.perf_counter() - t0
    hop1, sim1, busy1 = tree_cpu_s(hop.pid), proc_cpu_s(sim.pid), busy_s()
    helper1 = proc_cpu_s(helper) if helper is not None else None
    ANSWERED[hop.pid] += res.requests
    for srv in (hop, sim):
        if not alive(srv.pid):
            raise RuntimeError(
                f"{srv.name} (pid {srv.pid}) exited during the run; see its log. On a shared machine another "
                "session's clean-up may have stopped it: run the benchmark again."
            )
    res.server_cpu = _per_s(hop0, hop1, wall)
    out = res.as_dict()
    out["processes"] = len(tree_pids(hop.pid))
    out["sim_cpu"] = _per_s(sim0, sim1, wall)
    out["helper_cpu"] = _per_s(helper0, helper1, wall)
    # CPU the hop process spent per request: what one request costs the proxy (or the simulator, direct).
    out["cpu_us_per_request"] = (
        round((hop1 - hop0) / res.requests * 1e6, 1) if hop0 is not None and hop1 is not None and res.requests else None
    )
    # Everything else that ran meanwhile: kernel threads, and other people's work on a shared machine.
    busy, ours = _per_s(busy0, busy1, wall), [res.server_cpu, res.client_cpu]
    if hop is not sim:
        ours.append(out["sim_cpu"])
    ours.append(out["helper_cpu"])
    out["others_cpu"] = round(max(0.0, busy - sum(x for x in ours if x is not None)), 3) if busy is not None else None
    return out


def _result(d: dict[str, Any]) -> WrkResult:
    keep = {k: v for k, v in d.items() if k in WrkResult.__dataclass_fields__}
    return WrkResult(**keep)


def request(root: str, path: str, body: str | None = None, *, bearer: str) -> tuple[int, dict[str, str], bytes]:
    """One request with ``bearer`` (loopback URLs we built): status, headers, body."""
    req = urllib.request.Request(root + path, data=body.encode() if body else None)  # noqa: S310
    req.add_header("Authorization", f"Bearer {bearer}")
    if body:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
        return int(resp.status), {k.lower(): v for k, v in resp.headers.items()}, bytes(resp.read())


def check_one(hop: Hop, stream: bool) -> tuple[bool, str]:
    """One request is well-formed: 200, 20 tokens (usage, or 20 content chunks and [DONE]); tailgate's headers."""
    status, headers, raw = request(hop.server.url, CHAT_PATH, _chat_body(stream=stream), bearer=hop.bearer)
    if stream:
        frames = [f.removeprefix(b"data: ") for f in raw.split(b"\n\n") if f.startswith(b"data: ")]
        chunks = [json.loads(f)["choices"] for f in frames[:-1]]
        tokens = sum(1 for c in chunks if c and c[0]["delta"].get("content"))
        ok = bool(frames) and frames[-1] == b"[DONE]" and all(chunks)  # no usage-only chunk leaks through
    else:
        tokens = json.loads(raw)["usage"]["completion_tokens"]
        ok = True
    ok = ok and status == 200 and tokens == TOKENS
    detail = f"status {status}, {tokens} tokens"
    if hop.gateway:
        ok = ok and headers.get("x-tailgate-provider") in ("sim", "sim-b") and "x-tailgate-overhead-ms" in headers
        detail += f", x-tailgate-provider {headers.get('x-tailgate-provider')!r}"
    return ok, detail


def overhead_metric(hop: Hop) -> tuple[float, float]:
    """(count, sum in seconds) of the gateway's own ``tailgate_overhead_seconds`` histogram."""
    text = request(hop.server.url, "/metrics", bearer=hop.bearer)[2].decode()
    count = re.search(r'^tailgate_overhead_seconds_count\{alias="bench"\} (\S+)$', text, re.M)
    total = re.search(r'^tailgate_overhead_seconds_sum\{alias="bench"\} (\S+)$', text, re.M)
    return (float(count.group(1)) if count else 0.0, float(total.group(1)) if total else 0.0)


# -- the interleaved rounds ------------------------------------------------------------------------


def modes_of(hop: str) -> tuple[str, ...]:
    return HOP_MODES.get(hop, tuple(MODES))


def rounds(
    wrk: Wrk, st: Settings, hops: dict[str, Hop], sim: Server, modes: list[str], checks: Checks
) -> dict[str, Any]:
    """Every mode, every hop of it, ``st.rounds`` times; the hop order rotates per round (A B C, B C A, C A B)."""
    scripts: dict[tuple[str, bool], Path] = {}

    def script(hop: Hop, stream: bool) -> Path:
        if (hop.bearer, stream) not in scripts:
            lua = _LUA.format(key=hop.bearer, body=_chat_body(stream=stream))
            scripts[hop.bearer, stream] = wrk.script(lua)
        return scripts[hop.bearer, stream]

    for stream in sorted({MODES[m][0] for m in modes}):
        for name, hop in hops.items():
            if not any(MODES[m][0] == stream for m in modes_of(name) if m in modes):
                continue
            warm = measure(
                wrk, hop.server, sim, script(hop, stream), connections=50, duration_s=st.warmup_s, helper=hop.helper
            )
            check_wrk(checks, f"{name} warm-up ({'stream' if stream else 'non-stream'})", _result(warm))
    in_mode = {m: [h for h in hops if m in modes_of(h)] for m in modes}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {h: [] for h in in_mode[m]} for m in modes}
    self_overhead: dict[str, list[float]] = {m: [0.0, 0.0] for m in modes}
    for r in range(st.rounds):
        for mode in modes:
            stream, conns = MODES[mode]
            names = in_mode[mode]
            for name in names[r % len(names) :] + names[: r % len(names)]:
                hop = hops[name]
                before = overhead_metric(hop) if name == "tailgate" else None
                res = measure(
                    wrk,
                    hop.server,
                    sim,
                    script(hop, stream),
                    connections=conns,
                    duration_s=st.duration_s,
                    helper=hop.helper,
                )
                if before is not None:
                    after = overhead_metric(hop)
                    self_overhead[mode][0] += after[0] - before[0]
                    self_overhead[mode][1] += after[1] - before[1]
                runs[mode][name].append(res)
                check_wrk(checks, f"{mode} round {r + 1} {name}", _result(res))
                console.print(
                    f"  round {r + 1} {mode:14} {name:9} {res['rps']:9,.0f} req/s  "
                    f"P50 {res['latency_ms']['p50']:6.2f} ms  P99 {res['latency_ms']['p99']:6.2f} ms  "
                    f"errors {res['errors']}  others' CPU {_cores(res['others_cpu'])}",
                    markup=False,
                    highlight=False,
                )
    return {m: summarize(m, runs[m], self_overhead[m]) for m in modes}


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 3) if xs else 0.0


def summarize(mode: str, runs: dict[str, list[dict[str, Any]]], self_overhead: list[float]) -> dict[str, Any]:
    stream, conns = MODES[mode]
    hops: dict[str, Any] = {}
    for name, rs in runs.items():
        requests = sum(r["requests"] for r in rs)
        seconds = sum(r["duration_s"] for r in rs)
        cpu = [r["cpu_us_per_request"] for r in rs if r["cpu_us_per_request"] is not None]
        hops[name] = {
            "rps": round(requests / seconds, 1) if seconds else 0.0,
            "requests": requests,
            "p50_ms": _median([r["latency_ms"]["p50"] for r in rs]),
            "p99_ms": _median([r["latency_ms"]["p99"] for r in rs]),
            "hop_cpu": _median([r["server_cpu"] for r in rs if r["server_cpu"] is not None]),
            "sim_cpu": _median([r["sim_cpu"] for r in rs if r["sim_cpu"] is not None]),
            "wrk_cpu": _median([r["client_cpu"] for r in rs if r["client_cpu"] is not None]),
            "helper_cpu": _median([r["helper_cpu"] for r in rs if r["helper_cpu"] is not None]),
            "others_cpu": _median([r["others_cpu"] for r in rs if r["others_cpu"] is not None]),
            "cpu_us_per_request": _median(cpu),
            "errors": sum(r["errors"] for r in rs),
            "processes": max((r["processes"] for r in rs), default=0),
            "rounds": rs,
        }
    n = len(runs["direct"])

    def added(hop: str, q: str) -> list[float]:
        """Per round: hop percentile - direct percentile (the three runs of one mode in a round are back to back)."""
        return [runs[hop][i]["latency_ms"][q] - runs["direct"][i]["latency_ms"][q] for i in range(n)]

    others = [h for h in runs if h != "direct"]
    ratios = [runs["tailgate"][i]["rps"] / runs["floor"][i]["rps"] for i in range(n) if runs["floor"][i]["rps"] > 0]
    rps_ratio = hops["tailgate"]["rps"] / hops["floor"]["rps"] if hops["floor"]["rps"] else 0.0
    floor_cpu, gw_cpu = hops["floor"]["cpu_us_per_request"], hops["tailgate"]["cpu_us_per_request"]
    out: dict[str, Any] = {
        "stream": stream,
        "connections": conns,
        "hops": hops,
        "rps_ratio": round(rps_ratio, 4),
        "rps_ratio_rounds": [round(x, 4) for x in ratios],
        "cpu_per_request_ratio": round(gw_cpu / floor_cpu, 3) if floor_cpu else None,
        "added_p50_ms": {h: _median(added(h, "p50")) for h in others},
        "added_p99_ms": {h: _median(added(h, "p99")) for h in others},
        "added_p50_rounds": {h: [round(x, 3) for x in added(h, "p50")] for h in others},
        "vs_tailgate": {h: _vs_tailgate(runs, hops, h) for h in runs if h in EXTRA_HOPS},
        "gateway_self_overhead_mean_ms": (
            round(self_overhead[1] / self_overhead[0] * 1000.0, 4) if self_overhead[0] else None
        ),
    }
    targets: dict[str, dict[str, Any]] = {
        "rps_ratio": {
            "what": f"tailgate req/s >= {TARGET_RPS_RATIO:.0%} of floor",
            "value": out["rps_ratio"],
            "passed": rps_ratio >= TARGET_RPS_RATIO,
        }
    }
    if conns == 1:
        floor_added, gw_added = out["added_p50_ms"]["floor"], out["added_p50_ms"]["tailgate"]
        limit = TARGET_ADDED_P50_RATIO * max(floor_added, 0.0)
        targets["added_p50"] = {
            "what": f"added P50 <= {TARGET_ADDED_P50_RATIO} x floor's ({limit:.3f} ms)",
            "value": gw_added,
            "limit": round(limit, 3),
            "ratio_to_floor": round(gw_added / floor_added, 3) if floor_added > 0 else None,
            "passed": gw_added <= limit,
        }
        targets["added_p99"] = {
            "what": f"added P99 <= {TARGET_ADDED_P99_MS} ms",
            "value": out["added_p99_ms"]["tailgate"],
            "passed": out["added_p99_ms"]["tailgate"] <= TARGET_ADDED_P99_MS,
        }
    if "otel" in runs:
        ratio = out["vs_tailgate"]["otel"]["cpu_per_request_ratio"]
        targets["otel_cpu"] = {
            "what": f"CPU per request with export on <= {TARGET_OTEL_CPU_RATIO:g} x export off",
            "value": ratio,
            "passed": ratio is not None and ratio <= TARGET_OTEL_CPU_RATIO,
        }
    if "litellm" in runs and conns == 50 and not stream:
        over = out["vs_tailgate"]["litellm"]["tailgate_over_hop"]
        targets["vs_litellm"] = {
            "what": f"tailgate req/s >= {TARGET_VS_LITELLM:g} x LiteLLM's",
            "value": over,
            "passed": over is not None and over >= TARGET_VS_LITELLM,
        }
    out["targets"] = targets
    out["errors"] = sum(h["errors"] for h in hops.values())
    return out


def _vs_tailgate(runs: dict[str, list[dict[str, Any]]], hops: dict[str, Any], name: str) -> dict[str, Any]:
    """An extra hop against tailgate's one worker: req/s both ways (pooled, and per round), CPU per request."""
    mine, gw = hops[name], hops["tailgate"]
    per_round = [a["rps"] / b["rps"] for a, b in zip(runs[name], runs["tailgate"], strict=True) if b["rps"] > 0]
    cpu = mine["cpu_us_per_request"] / gw["cpu_us_per_request"] if gw["cpu_us_per_request"] else None
    return {
        "rps_ratio": round(mine["rps"] / gw["rps"], 4) if gw["rps"] else None,
        "rps_ratio_rounds": [round(x, 4) for x in per_round],
        "tailgate_over_hop": round(gw["rps"] / mine["rps"], 2) if mine["rps"] else None,
        "cpu_per_request_ratio": round(cpu, 3) if cpu is not None else None,
    }


def redis_usage(hop: Hop, port: int, before: dict[str, int] | None, answered0: int) -> dict[str, Any]:
    """What the Redis hop asked of Redis over the rounds (the background sync and publish ticks included),
    and how many shared-limit decisions were made locally: from a leased slice, or by the fallback when a
    Redis call took longer than ``state.timeout`` (5 ms) or Redis was marked down."""
    after = redis_commands(port)
    answered = ANSWERED[hop.server.pid] - answered0
    text = request(hop.server.url, "/metrics", bearer=hop.bearer)[2].decode()
    log = hop.log.read_text() if hop.log is not None else ""

    def per_request(key: str) -> float | None:
        if before is None or after is None or not answered:
            return None
        return round((after[key] - before[key]) / answered, 2)

    out = {
        "requests": answered,
        "redis_commands": after["commands"] - before["commands"] if before and after else None,
        "commands_per_request": per_request("commands"),
        "script_calls_per_request": per_request("scripts"),
        "fallback_decisions": metric_sum(text, "tailgate_state_fallback_total"),
        "limit_takes_local": metric_sum(text, "tailgate_state_limit_takes_total", 'where="local"'),
        "limit_takes_backend": metric_sum(text, "tailgate_state_limit_takes_total", 'where="backend"'),
        "marked_down": log.count("Redis unavailable"),
        "answers_again": log.count("Redis answers again"),
    }
    console.print(
        f"  redis hop over {answered:,} requests: {out['script_calls_per_request']} Lua calls and "
        f"{out['commands_per_request']} Redis commands per request; shared-limit takes from a leased slice "
        f"{out['limit_takes_local']:,.0f}, via Redis {out['limit_takes_backend']:,.0f}; decisions by the local "
        f"fallback {out['fallback_decisions']:,.0f}; Redis marked down {out['marked_down']} time(s)",
        markup=False,
    )
    return out


def sink_usage(checks: Checks, sink: Server, hop: Hop) -> dict[str, Any]:
    """What the otel hop exported to the sink collector, and what it could not (its dropped-span counter)."""
    stats = json.loads(request(sink.url, "/sink/stats", bearer="")[2])
    text = request(hop.server.url, "/metrics", bearer=hop.bearer)[2].decode()
    out = {
        "answered": ANSWERED[hop.server.pid],
        "trace_exports": stats["requests"].get("/v1/traces", 0),
        "trace_bytes": stats["bytes"].get("/v1/traces", 0),
        "metric_exports": stats["requests"].get("/v1/metrics", 0),
        "spans_dropped": metric_sum(text, "tailgate_otel_spans_dropped_total"),
    }
    checks.add(
        "otel hop: spans reached the sink collector",
        out["trace_exports"] > 0,
        f"{out['trace_exports']} trace exports ({out['trace_bytes']:,} bytes) for {out['answered']:,} requests; "
        f"{out['spans_dropped']:,.0f} spans dropped",
    )
    console.print(
        f"  otel hop: {out['trace_exports']} trace exports, {out['trace_bytes'] / max(1, out['answered']):.0f} "
        f"bytes per request, {out['metric_exports']} metric exports, {out['spans_dropped']:,.0f} spans dropped",
        markup=False,
    )
    return out


# -- RSS -------------------------------------------------------------------------------------------


def rss_kib(pid: int) -> dict[str, int] | None:
    """VmRSS and its parts (RssAnon: heap; RssFile: mapped files) in KiB, from ``/proc/PID/status``."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out = {k: int(v) for k, v in re.findall(r"^(VmRSS|RssAnon|RssFile|RssShmem):\s+(\d+) kB", status, re.M)}
    return out if "VmRSS" in out else None


def rss_phase(wrk: Wrk, st: Settings, hop: Hop, sim: Server, checks: Checks) -> dict[str, Any]:
    """Warm up for ``rss_warmup_requests``, read RSS, then ``rss_requests`` more; non-stream/stream alternate.

    Every run is ``wrk -c50`` for ``rss_chunk_s`` seconds; RSS is read after each (the warm-up's readings
    are kept too, so the report shows where the curve flattens).
    """
    gateway = hop.server
    scripts = [wrk.script(_LUA.format(key=hop.bearer, body=_chat_body(stream=s))) for s in (False, True)]
    samples: list[dict[str, Any]] = [{"phase": "start", "requests": 0, "rss_kib": rss_kib(gateway.pid)}]
    done = errors = runs = 0
    t0 = time.perf_counter()
    baseline: dict[str, int] | None = None
    measured_from = served_before = 0
    for phase in ("warm-up", "measured"):
        goal = st.rss_warmup_requests
        if phase == "measured":
            baseline, measured_from = rss_kib(gateway.pid), done
            served_before = ANSWERED[gateway.pid]
            samples.append({"phase": "baseline", "requests": done, "rss_kib": baseline})
            goal = done + st.rss_requests
        while done < goal or (phase == "warm-up" and runs < 2):  # both bodies at least once before the baseline
            res = measure(wrk, gateway, sim, scripts[runs % 2], connections=50, duration_s=st.rss_chunk_s)
            check_wrk(checks, f"rss {phase} run {runs + 1}", _result(res))
            done += res["requests"]
            errors += res["errors"]
            runs += 1
            samples.append({"phase": phase, "requests": done, "rss_kib": rss_kib(gateway.pid)})
    last: dict[str, int] | None = samples[-1]["rss_kib"]
    first: dict[str, int] | None = samples[0]["rss_kib"]

    def growth(key: str) -> float | None:
        if baseline is None or last is None or not baseline.get(key):
            return None
        return round((last.get(key, 0) - baseline[key]) / baseline[key], 4)

    rss = growth("VmRSS")
    passed = rss is not None and abs(rss) <= TARGET_RSS_GROWTH
    measured = done - measured_from
    warm_growth = (
        round((baseline["VmRSS"] - first["VmRSS"]) / first["VmRSS"], 4) if baseline is not None and first else None
    )
    console.print(
        f"  rss: {_kib(baseline)} KiB after {measured_from:,} warm-up requests -> {_kib(last)} KiB "
        f"after {measured:,} more ({rss:+.2%})"
        if rss is not None
        else "  rss: not readable",
        markup=False,
    )
    return {
        "warmup_requests": measured_from,
        "served_before_baseline": served_before,
        "requests": measured,
        "seconds": round(time.perf_counter() - t0, 1),
        "first_kib": first,
        "start_kib": baseline,
        "end_kib": last,
        "max_kib": max((x["rss_kib"]["VmRSS"] for x in samples if x["rss_kib"]), default=None),
        "growth": rss,
        "growth_anon": growth("RssAnon"),
        "warmup_growth": warm_growth,
        "samples": samples,
        "errors": errors,
        "target": {"what": f"RSS growth within +-{TARGET_RSS_GROWTH:.0%}", "value": rss, "passed": passed},
    }


# -- correctness -----------------------------------------------------------------------------------


def check_ledger(checks: Checks, db: Path, log_text: str, answered: int, *, hop: str = "tailgate") -> dict[str, Any]:
    """After the gateway stopped: a ledger row for every request wrk saw answered, none dropped.

    ``--workers N``: each worker logs its own flush line; they are added up.
    """
    flushed = re.findall(r"ledger flushed: (\d+) rows written, (\d+) dropped", log_text)
    written = sum(int(w) for w, _ in flushed) if flushed else None
    dropped = sum(int(d) for _, d in flushed) if flushed else None
    rows = ok_rows = 0
    try:
        with sqlite3.connect(db) as conn:
            rows, ok_rows = conn.execute("SELECT count(*), coalesce(sum(outcome = 'ok'), 0) FROM requests").fetchone()
    except sqlite3.Error as exc:
        checks.add(f"{hop} ledger readable", False, f"{type(exc).__name__}: {exc}")
    label = "" if hop == "tailgate" else f" ({hop})"
    checks.add(
        f"ledger{label}: a row for every answered request, none dropped",
        ok_rows >= answered and dropped == 0,
        f"{rows:,} rows ({ok_rows:,} ok) for {answered:,} answered requests; log says written {written}, "
        f"dropped {dropped}",
    )
    return {"rows": rows, "ok_rows": ok_rows, "answered": answered, "written": written, "dropped": dropped}


# -- report ----------------------------------------------------------------------------------------


def _install_litellm(log: Path) -> tuple[bool, str]:
    install_litellm(log)
    return litellm_ready(), f"litellm[proxy]=={LITELLM_VERSION} in benchmarks/.venv-litellm"


def pick_hops(hops: str | None, *, litellm: bool, quick: bool) -> list[str]:
    """The extra hops to run: ``--hops`` when given; else workers2 and redis, and LiteLLM when its venv is
    installed (not with ``--quick``: it takes ~15 s to start); ``--litellm`` adds it in any case."""
    if hops is not None:
        names = {x.strip() for x in hops.split(",") if x.strip()}
        unknown = names - {*HOPS, *EXTRA_HOPS, "none"}
        if unknown:
            raise SystemExit(
                f"--hops: unknown hop(s) {', '.join(sorted(unknown))}; known: {', '.join(HOPS + EXTRA_HOPS)}"
            )
    else:
        names = {"workers2", "redis"} | ({"litellm"} if litellm_ready() and not quick else set())
    if litellm:
        names.add("litellm")
    names.discard("baseline")  # only with --baseline (it needs a tree)
    names.discard("baseline-otel")  # only with --baseline and --otel
    return [h for h in EXTRA_HOPS if h in names]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--duration", type=int, default=5, help="seconds per measured wrk run (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every hop and mode (default 3)")
    ap.add_argument("--rss-requests", type=int, default=200_000, help="requests in the RSS phase (default 200000)")
    ap.add_argument(
        "--rss-warmup-requests",
        type=int,
        default=300_000,
        help="requests before the RSS baseline, after the rounds (default 300000: the gateway's bounded caches — "
        "SQLite's page cache, routing and stats windows — fill over the first ~300k requests; docs/benchmarks.md)",
    )
    ap.add_argument("--quick", action="store_true", help="1 s runs, 1 round, 5,000 RSS requests; targets not enforced")
    ap.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    ap.add_argument("--only", action="append", choices=ONLY, default=None, help="run only this mode (repeatable)")
    ap.add_argument(
        "--hops",
        default=None,
        help="comma-separated hops besides direct, floor and tailgate (which always run): litellm, workers2, "
        "redis, aiohttp-front, or none (default: workers2,redis, plus litellm when benchmarks/.venv-litellm is "
        "installed)",
    )
    ap.add_argument(
        "--litellm",
        action="store_true",
        help=f"add LiteLLM's proxy as a hop; installs litellm[proxy]=={LITELLM_VERSION} into "
        "benchmarks/.venv-litellm first if needed (about a minute, from the package index)",
    )
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="SRC",
        help="add a 'baseline' hop: the tailgate config served by the tailgate package in SRC (a src directory, "
        "e.g. of a worktree at an older commit), interleaved with the others (before / after in one run)",
    )
    ap.add_argument(
        "--otel",
        action="store_true",
        help="add an 'otel' hop: the tailgate config with OpenTelemetry export on to a sink collector "
        "(_otlp_sink.py), c=50 non-stream and stream; judged: CPU per request <= 1.05 x the tailgate hop's",
    )
    args = ap.parse_args(argv)
    only = args.only or list(ONLY)
    modes = [m for m in MODES if m in only]
    extras = pick_hops(args.hops, litellm=args.litellm, quick=args.quick) if modes else []
    if modes and args.otel and "otel" not in extras:
        extras.append("otel")
    if modes and args.baseline is not None:
        if not (args.baseline / "tailgate" / "__init__.py").is_file():
            raise SystemExit(f"--baseline {args.baseline}: no tailgate package there (give a src directory)")
        extras.append("baseline")
        if "otel" in extras:
            extras.append("baseline-otel")

    wrk_binary = shutil.which("wrk")
    if wrk_binary is None:
        console.print("[bold red]wrk is not installed[/] (apt-get install wrk)")
        return 2
    st = Settings(
        duration_s=1 if args.quick else max(1, args.duration),
        rounds=1 if args.quick else max(1, args.rounds),
        warmup_s=1 if args.quick else 2,
        rss_warmup_requests=2000 if args.quick else args.rss_warmup_requests,
        rss_requests=5000 if args.quick else args.rss_requests,
        rss_chunk_s=1 if args.quick else 10,
        quick=args.quick,
    )
    info = machine(wrk_binary)
    print_machine(console, info)
    checks = Checks()
    skipped: dict[str, str] = {}
    if "redis" in extras and find_redis_server() is None:
        skipped["redis"] = "redis-server is not installed"
    if "litellm" in extras and not litellm_ready():
        console.print(f"installing litellm[proxy]=={LITELLM_VERSION} into benchmarks/.venv-litellm ...", markup=False)
        with tempfile.TemporaryDirectory(prefix="gateway_overhead-pip-") as tmp:
            checks.guard(f"litellm {LITELLM_VERSION} installed", lambda: _install_litellm(Path(tmp) / "pip.log"))
        if not litellm_ready():
            skipped["litellm"] = "install failed (see the checks)"
    extras = [h for h in extras if h not in skipped]
    for name, why in skipped.items():
        console.print(f"hop {name} skipped: {why}", markup=False)
    if modes and "litellm" not in extras and args.hops is None and not args.quick:
        console.print("no litellm hop: benchmarks/.venv-litellm is not installed (--litellm installs it)", markup=False)
    plan: list[str] = []
    if modes:
        plan.append(
            f"wrk -t1 -c1|-c50 -d{st.duration_s}s, {st.rounds} interleaved round(s) of {len(modes)} mode(s); "
            f"hops: {', '.join(HOPS + tuple(extras))}"
        )
    if "rss" in only:
        plan.append(f"RSS over {st.rss_requests:,} requests after {st.rss_warmup_requests:,} more warm-up requests")
    console.print("; ".join(plan), markup=False, soft_wrap=True)
    result: dict[str, Any] = {
        "machine": info,
        "settings": asdict(st),
        "hops": [*HOPS, *extras],
        "skipped_hops": skipped,
        "litellm_version": litellm_version() if "litellm" in extras else None,
        "modes": {},
        "rss": None,
    }
    with tempfile.TemporaryDirectory(prefix="gateway_overhead-") as tmp:
        workdir = Path(tmp)
        wrk = Wrk(wrk_binary, workdir, pin=False)
        with contextlib.ExitStack() as stack:
            sim_log = workdir / "sim.log"
            sim = stack.enter_context(
                server("sim (instant)", sim_argv("--preset", "instant", "--port", "0"), sim_log, pin=False)
            )
            floor_argv = [sys.executable, str(HERE / "_passthrough_proxy.py"), sim.url, "0"]
            hops: dict[str, Hop] = {
                "direct": Hop("direct", sim),
                "floor": Hop(
                    "floor", stack.enter_context(server("floor", floor_argv, workdir / "floor.log", pin=False))
                ),
                "tailgate": stack.enter_context(gateway_hop(workdir, "tailgate", sim.url)),
            }
            if "litellm" in extras:
                hops["litellm"] = Hop(
                    "litellm", stack.enter_context(litellm_server(workdir, sim.url)), bearer=LITELLM_KEY
                )
            if "workers2" in extras:
                hops["workers2"] = stack.enter_context(gateway_hop(workdir, "workers2", sim.url, workers=2))
            if "aiohttp-front" in extras:
                hops["aiohttp-front"] = stack.enter_context(
                    gateway_hop(workdir, "aiohttp-front", sim.url, extra_yaml="server: {http_front: aiohttp}\n")
                )
            if "baseline" in extras:
                hops["baseline"] = stack.enter_context(
                    gateway_hop(workdir, "baseline", sim.url, pythonpath=args.baseline.resolve())
                )
            if "otel" in extras:
                sink_argv = [sys.executable, str(HERE / "_otlp_sink.py"), "0"]
                sink = stack.enter_context(server("otlp sink", sink_argv, workdir / "sink.log", pin=False))
                telemetry = f'telemetry: {{endpoint: "{sink.url}", service_name: tailgate-bench-otel}}\n'
                hops["otel"] = stack.enter_context(gateway_hop(workdir, "otel", sim.url, extra_yaml=telemetry))
                if "baseline-otel" in extras:
                    hops["baseline-otel"] = stack.enter_context(
                        gateway_hop(
                            workdir, "baseline-otel", sim.url, extra_yaml=telemetry, pythonpath=args.baseline.resolve()
                        )
                    )
            if "redis" in extras:
                redis = stack.enter_context(RedisServer())  # stops after the gateway that uses it
                hop = stack.enter_context(gateway_hop(workdir, "redis", sim.url, redis_url=redis.url))
                hops["redis"] = dataclasses.replace(hop, helper=redis.proc.pid if redis.proc else None)
            gateway = hops["tailgate"]
            result["gateway_rss_at_start_kib"] = rss_kib(gateway.server.pid)
            for name, hop in hops.items():
                for stream in (False, True) if name != "litellm" else (False,):
                    label = f"{name}: one {'stream' if stream else 'non-stream'} request is well-formed"
                    checks.guard(label, lambda h=hop, s=stream: check_one(h, s))
            if modes:
                redis0 = (redis_commands(redis.port), ANSWERED[hops["redis"].server.pid]) if "redis" in hops else None
                result["modes"] = rounds(wrk, st, hops, sim, modes, checks)
                for mode, sc in result["modes"].items():
                    print_mode(mode, sc, not st.quick)
                if redis0 is not None:
                    result["redis_state"] = redis_usage(hops["redis"], redis.port, *redis0)
                if "otel" in hops:
                    result["otel_sink"] = sink_usage(checks, sink, hops["otel"])
            if "rss" in only:
                result["rss"] = rss_phase(wrk, st, gateway, sim, checks)
                print_rss(result["rss"], not st.quick)
            answered = {name: ANSWERED[h.server.pid] for name, h in hops.items() if h.gateway}
        # Every server has stopped: the gateways have flushed their ledgers.
        result["ledgers"] = {
            name: check_ledger(checks, h.ledger, h.log.read_text(), answered[name], hop=name)
            for name, h in hops.items()
            if h.gateway and h.ledger is not None and h.log is not None
        }
        result["ledger"] = result["ledgers"]["tailgate"]

    print_checks("gateway_overhead", {"checks": checks.items})
    targets = [t for sc in result["modes"].values() for t in sc["targets"].values()]
    if result["rss"] is not None:
        targets.append(result["rss"]["target"])
    correct = checks.ok
    met = all(t["passed"] for t in targets)
    result.update(checks=checks.items, correct=correct, targets_met=met, enforced=not st.quick)
    return finish(console, result, args.json, correct=correct, met=met, quick=st.quick)


if __name__ == "__main__":
    sys.exit(main())
