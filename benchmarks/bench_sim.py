"""Claims: the simulator is cheap enough to load-test through, and it keeps its own time under load.

1. ``instant`` preset, non-stream chat completions (max_tokens 20): >= 5,000 req/s.
2. ``instant`` preset, streamed chat completions (20 tokens each): >= 1,500 req/s.
3. 500 concurrent streams decoding together (provider-a shape, 512 slots, step ~ 13 ms): the engine's
   step lateness (actual - scheduled end of each decode step, ``GET /sim/state``) has P99 <= 1 ms.

The load generator is ``wrk`` (one thread, loopback), the simulator a real ``tailgate mock`` subprocess.
Claims 1 and 2 are measured beside a baseline driven by the identical wrk command in the same run: a
minimal aiohttp + uvloop server (``_baseline_server.py``) that returns fixed bytes, so ``sim / baseline``
is what the simulator costs relative to the least an aiohttp server can do, on this machine, today.

Correctness is checked too: every wrk run must report zero non-2xx responses and zero socket errors,
and the simulator's own ground truth (``GET /sim/truth``) must show status 200 and the right token
counts. Exit status: 0 when all checks pass and every target is met; 1 otherwise (with ``--quick``
the performance targets are reported but not enforced: 2-second runs on a shared box are noise).

Usage: ``.venv/bin/python benchmarks/bench_sim.py [--duration S] [--quick] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tailgate.sim.presets import preset

HERE = Path(__file__).resolve().parent
TARGET_NONSTREAM_RPS = 5000.0
TARGET_STREAM_RPS = 1500.0
TARGET_LATENESS_P99_MS = 1.0
TOKENS = 20
"""max_tokens of the throughput claims (and the number of chunks the baseline streams)."""
CONTENDED = 0.05
"""Flag the lateness run when the simulator spent more than this share of the window waiting for a CPU."""
LATENESS_TOKENS = (100, 400)
"""max_tokens range drawn per request in the lateness claim (see _LATENESS_LUA)."""
CHAT_PATH = "/v1/chat/completions"
SCENARIOS = ("nonstream", "stream", "lateness")
_LISTEN = re.compile(r"listening on http://127\.0\.0\.1:(\d+)/v1")

console = Console(highlight=False)


# -- wrk -------------------------------------------------------------------------------------------

# Every script ends with this done(): one machine-readable line beside wrk's own text report.
_DONE_LUA = r"""
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"max_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
"""

_FIXED_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{body}'
"""

# Random lengths: with identical max_tokens, 500 streams that start together also finish together,
# so every ~4 s one step would close 500 responses at once, a burst no real workload has.
_LATENESS_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
math.randomseed({seed})
local head = '{{"model": "bench", "messages": [{{"role": "user", "content": "Tell me a story."}}], '
request = function()
  local body = head .. '"max_tokens": ' .. math.random({lo}, {hi}) .. ', "stream": true}}'
  return wrk.format(nil, nil, nil, body)
end
"""


def _chat_body(*, stream: bool, max_tokens: int = TOKENS) -> str:
    body: dict[str, Any] = {
        "model": "bench",
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": max_tokens,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body)


@dataclass
class WrkResult:
    """One wrk run, from its ``done()`` line; ``text_*`` are parsed from wrk's own report as a check."""

    url: str
    connections: int
    duration_s: float
    requests: int
    rps: float
    bytes: int
    connect: int
    read: int
    write: int
    status: int
    timeout: int
    latency_ms: dict[str, float]
    text_rps: float
    text_non2xx: int
    text_socket_errors: int
    client_cpu: float | None = None
    """CPU wrk used, in cores (1.0 = one core busy for the whole run): is the client the bottleneck?"""
    server_cpu: float | None = None
    """CPU the server process used over the same run, in cores."""

    @property
    def errors(self) -> int:
        """Non-2xx/3xx responses plus socket errors (connect, read, write, timeout)."""
        socket = self.connect + self.read + self.write + self.timeout
        return max(self.status, self.text_non2xx) + max(socket, self.text_socket_errors)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"errors": self.errors}


class Wrk:
    """Runs wrk with fixed threads/timeout; ``pin`` puts it on CPU 1 (servers on CPU 0)."""

    def __init__(self, binary: str, workdir: Path, *, pin: bool) -> None:
        self.binary = binary
        self.workdir = workdir
        self.pin = pin
        self._n = 0

    def script(self, lua: str) -> Path:
        self._n += 1
        path = self.workdir / f"wrk{self._n}.lua"
        path.write_text(lua + _DONE_LUA)
        return path

    def start(self, url: str, script: Path, *, connections: int, duration_s: int, timeout_s: int) -> WrkRun:
        argv = [self.binary, "-t1", f"-c{connections}", f"-d{duration_s}s", f"--timeout={timeout_s}s"]
        argv += ["-s", str(script), url]
        if self.pin:
            argv = ["taskset", "-c", "1", *argv]
        return WrkRun(argv, url, connections)

    def run(
        self,
        srv: Server,
        script: Path,
        *,
        connections: int,
        duration_s: int,
        timeout_s: int,
        midway: Callable[[], None] | None = None,
    ) -> WrkResult:
        """One wrk run against ``srv``; ``midway`` is called half-way through, under full load."""
        run = self.start(
            srv.url + CHAT_PATH, script, connections=connections, duration_s=duration_s, timeout_s=timeout_s
        )
        run.watch(srv)
        try:
            if midway is not None:
                time.sleep(duration_s / 2)
                midway()
        finally:
            res = run.finish(srv)
        return res


class WrkRun:
    """A wrk process in flight; ``finish`` parses it and adds what client and server cost in CPU."""

    def __init__(self, argv: list[str], url: str, connections: int) -> None:
        self.url = url
        self.connections = connections
        self._children0 = _children_cpu_s()
        self._t0 = time.perf_counter()
        self._server0: dict[int, float | None] = {}
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def watch(self, srv: Server) -> None:
        """Start counting ``srv``'s CPU now (call right after start)."""
        self._server0[srv.pid] = proc_cpu_s(srv.pid)

    def finish(self, srv: Server) -> WrkResult:
        """Wait for wrk to end; parse it; CPU of wrk (waited-for children) and ``srv`` per wall second."""
        if srv.pid not in self._server0:
            self.watch(srv)
        out, _ = self.proc.communicate(timeout=600)
        wall = time.perf_counter() - self._t0
        server0, server1 = self._server0[srv.pid], proc_cpu_s(srv.pid)
        if self.proc.returncode != 0:
            raise RuntimeError(f"wrk failed ({self.proc.returncode}):\n{out}")
        res = parse_wrk(out, self.url, self.connections)
        res.client_cpu = round((_children_cpu_s() - self._children0) / wall, 3)
        if server0 is not None and server1 is not None:
            res.server_cpu = round((server1 - server0) / wall, 3)
        return res


def parse_wrk(out: str, url: str, connections: int) -> WrkResult:
    """Parse wrk's output: the ``WRK_JSON`` line of our done() and its plain-text summary."""
    line = next((ln for ln in out.splitlines() if ln.startswith("WRK_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no WRK_JSON line:\n{out}")
    d = json.loads(line.removeprefix("WRK_JSON "))
    text_rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    duration_s = d["duration_us"] / 1e6
    return WrkResult(
        url=url,
        connections=connections,
        duration_s=round(duration_s, 3),
        requests=d["requests"],
        rps=round(d["requests"] / duration_s, 1) if duration_s > 0 else 0.0,
        bytes=d["bytes"],
        connect=d["connect"],
        read=d["read"],
        write=d["write"],
        status=d["status"],
        timeout=d["timeout"],
        latency_ms={k: round(d[f"{k}_us"] / 1000.0, 3) for k in ("p50", "p90", "p99", "max", "mean")},
        text_rps=float(text_rps.group(1)) if text_rps else 0.0,
        text_non2xx=int(non2xx.group(1)) if non2xx else 0,
        text_socket_errors=sum(int(g) for g in sock.groups()) if sock else 0,
    )


# -- servers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    name: str
    url: str
    """Root URL (no ``/v1``)."""
    pid: int
    """With ``taskset`` the wrapper execs the server, so this is the server's own pid."""


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a running process (Linux ``/proc``; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_sched(pid: int) -> dict[str, float] | None:
    """Main-thread scheduler counters: CPU time, time runnable but waiting for a CPU, preemptions."""
    try:
        run_ns, wait_ns, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, ValueError):
        return None
    match = re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", status)
    return {
        "cpu_ms": int(run_ns) / 1e6,
        "runqueue_wait_ms": int(wait_ns) / 1e6,
        "preempted": float(match.group(1)) if match else 0.0,
    }


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def server(name: str, argv: list[str], log_path: Path, *, pin: bool) -> Iterator[Server]:
    """Start a server subprocess, wait for its ``listening on`` line, yield it, stop it."""
    if pin:
        argv = ["taskset", "-c", "0", *argv]
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=HERE.parent)
    try:
        deadline = time.monotonic() + 30.0
        while True:
            match = _LISTEN.search(log_path.read_text())
            if match:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{log_path.read_text()}")
            time.sleep(0.05)
        yield Server(name, f"http://127.0.0.1:{match.group(1)}", proc.pid)
    finally:
        stop_process(proc, 10.0)


def sim_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "tailgate", "mock", *args]


def http(method: str, url: str, body: str | None = None) -> tuple[int, bytes]:
    data = body.encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - loopback URLs we built
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
        return int(resp.status), bytes(resp.read())


def http_json(method: str, url: str, body: str | None = None) -> Any:
    return json.loads(http(method, url, body)[1])


# -- checks ----------------------------------------------------------------------------------------


@dataclass
class Checks:
    items: list[dict[str, Any]] = field(default_factory=list)

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.items.append({"name": name, "ok": bool(ok), "detail": detail})

    def guard(self, name: str, fn: Any) -> None:
        """Run ``fn() -> (ok, detail)``; an exception is a failed check, not a crash."""
        try:
            ok, detail = fn()
        except Exception as exc:
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        self.add(name, ok, detail)

    @property
    def ok(self) -> bool:
        return all(c["ok"] for c in self.items)


def check_wrk(checks: Checks, label: str, res: WrkResult, *, need_requests: bool = True) -> None:
    """No error; and (``need_requests``) some request completed."""
    detail = (
        f"{res.requests} requests; non-2xx {max(res.status, res.text_non2xx)}, socket errors "
        f"connect {res.connect} read {res.read} write {res.write} timeout {res.timeout}"
    )
    checks.add(f"{label}: wrk reports zero errors", res.errors == 0 and (res.requests > 0 or not need_requests), detail)


def check_unary(root: str) -> tuple[bool, str]:
    status, raw = http("POST", root + CHAT_PATH, _chat_body(stream=False))
    body = json.loads(raw)
    choice = body["choices"][0]
    tokens = body["usage"]["completion_tokens"]
    ok = status == 200 and tokens == TOKENS and bool(choice["message"]["content"])
    return ok, f"status {status}, completion_tokens {tokens}, finish_reason {choice['finish_reason']}"


def check_stream(root: str) -> tuple[bool, str]:
    status, raw = http("POST", root + CHAT_PATH, _chat_body(stream=True))
    frames = [f.removeprefix(b"data: ") for f in raw.split(b"\n\n") if f.startswith(b"data: ")]
    content = 0
    for frame in frames[:-1]:
        choices = json.loads(frame)["choices"]
        if choices and choices[0]["delta"].get("content"):
            content += 1
    done = bool(frames) and frames[-1] == b"[DONE]"
    return status == 200 and content == TOKENS and done, (
        f"status {status}, {content} content chunks, ends with [DONE]: {done}"
    )


def check_truth(root: str, *, stream: bool, tokens: tuple[int, int], need: int = 50) -> tuple[bool, str]:
    """The simulator's own record of its last 50 requests: all 200, streamed as asked, right lengths; at least
    ``need`` of them (``--quick``'s lateness run on a starved machine may finish few streams of 100-400 tokens in
    its window: each one that did must be right, how many is a rate)."""
    records = http_json("GET", root + "/sim/truth?limit=50")["requests"]
    bad = [
        r
        for r in records
        if r["status"] != 200
        or r["stream"] is not stream
        or not tokens[0] <= r.get("output_tokens", 0) <= tokens[1]
        or r.get("finish_reason") != "length"
    ]
    want = str(tokens[0]) if tokens[0] == tokens[1] else f"{tokens[0]}-{tokens[1]}"
    detail = f"{len(records)} records, {len(bad)} not (200, stream={stream}, {want} tokens, length)"
    if bad:
        detail += f"; first: {bad[0]}"
    return len(records) >= need and not bad, detail


# -- scenarios -------------------------------------------------------------------------------------


@dataclass
class Settings:
    duration_s: int
    warmup_s: int
    lateness_warmup_s: int
    lateness_measure_s: int
    connections: int
    streams: int
    quick: bool
    pin: bool


def throughput(wrk: Wrk, st: Settings, *, stream: bool, sim: Server, baseline: Server, target: float) -> dict[str, Any]:
    """Claims 1 and 2: the same wrk command against the baseline, then against the simulator."""
    label = "stream" if stream else "non-stream"
    checks = Checks()
    for who, srv in (("baseline", baseline), ("sim", sim)):
        checks.guard(f"{who}: one {label} request is well-formed", lambda u=srv.url: _one(u, stream))
    script = wrk.script(_FIXED_LUA.format(body=_chat_body(stream=stream)))
    runs: dict[str, WrkResult] = {}

    def truth() -> None:
        # Read under load: once wrk stops, the requests it leaves in flight are the newest records (499).
        checks.guard(
            "sim: /sim/truth of the last 50 (mid-run)",
            lambda: check_truth(sim.url, stream=stream, tokens=(TOKENS, TOKENS)),
        )

    for who, srv in (("baseline", baseline), ("sim", sim)):
        warm = wrk.run(srv, script, connections=st.connections, duration_s=st.warmup_s, timeout_s=10)
        check_wrk(checks, f"{who} warm-up", warm)
        runs[who] = res = wrk.run(
            srv,
            script,
            connections=st.connections,
            duration_s=st.duration_s,
            timeout_s=10,
            midway=truth if srv is sim else None,
        )
        check_wrk(checks, who, res)
    sim_rps, base_rps = runs["sim"].rps, runs["baseline"].rps
    return {
        "claim": f"instant preset, {label} chat completions (max_tokens {TOKENS}): >= {target:,.0f} req/s",
        "target": {"metric": "req/s", "op": ">=", "value": target},
        "value": sim_rps,
        "passed": sim_rps >= target,
        "sim": runs["sim"].as_dict(),
        "baseline": runs["baseline"].as_dict(),
        "ratio": round(sim_rps / base_rps, 4) if base_rps else None,
        "errors": runs["sim"].errors + runs["baseline"].errors,
        "correct": checks.ok,
        "checks": checks.items,
    }


def _one(root: str, stream: bool) -> tuple[bool, str]:
    return check_stream(root) if stream else check_unary(root)


def lateness(wrk: Wrk, st: Settings, workdir: Path) -> dict[str, Any]:
    """Claim 3: one long wrk run; stats reset after the warm-up, read before wrk stops."""
    shape = preset("provider-a")
    cfg = workdir / "sim-lateness.yaml"
    cfg.write_text(
        "seed: 1\n"
        "providers:\n"
        "  lateness:\n"
        "    preset: provider-a\n"
        "    port: 0\n"
        f"    engine: {{slots: {max(512, st.streams)}, pre_median_s: 0.05}}\n"
    )
    lo, hi = LATENESS_TOKENS
    script = wrk.script(_LATENESS_LUA.format(seed=1, lo=lo, hi=hi))
    checks = Checks()
    with server("sim (lateness)", sim_argv("--config", str(cfg)), workdir / "sim-lateness.log", pin=st.pin) as srv:
        # The snapshot is taken 1 s before wrk stops: the final disconnect of every stream is not measured. A quick
        # run gives wrk 30 s more and stops it (SIGINT: wrk reports as usual) once the snapshot is taken, since
        # this process, starved, may wake from its sleeps after wrk's end, when the streams are gone.
        total = st.lateness_warmup_s + st.lateness_measure_s + (30 if st.quick else 1)
        run = wrk.start(srv.url + CHAT_PATH, script, connections=st.streams, duration_s=total, timeout_s=60)
        run.watch(srv)
        try:
            time.sleep(st.lateness_warmup_s)
            before = http_json("GET", srv.url + "/sim/state")["engine"]
            http("DELETE", srv.url + "/sim/state")
            t0, sched0 = time.perf_counter(), proc_sched(srv.pid)
            time.sleep(st.lateness_measure_s)
            state = http_json("GET", srv.url + "/sim/state")["engine"]
            window_s, sched1 = time.perf_counter() - t0, proc_sched(srv.pid)
            under_load = run.proc.poll() is None
            checks.guard(
                "sim: /sim/truth of the last 50 (mid-run)",
                lambda: check_truth(srv.url, stream=True, tokens=(lo, hi), need=0 if st.quick else 50),
            )
        finally:
            if st.quick and run.proc.poll() is None:
                run.proc.send_signal(signal.SIGINT)
            res = run.finish(srv)
        checks.add("the snapshot was taken while wrk ran", under_load, f"wrk's {total} s had ended: {not under_load}")
        # One complete stream after the load (its truth record is read by no check above), so that even a quick
        # run that finished no stream inside its window shows the simulator streaming a whole answer.
        checks.guard("sim (lateness): one stream request is well-formed", lambda: check_stream(srv.url))
    check_wrk(checks, "sim", res, need_requests=not st.quick)  # how many long streams end in a quick run: a rate
    late = state["lateness_ms"]
    steps = int(state["steps"])
    checks.add("steps were measured", steps > 0 and late["count"] == steps, f"{steps} steps")
    # The full run's premise: its lateness is measured with (nearly) every stream in one batch. In a quick run on a
    # starved machine streams end before wrk sends their successors (439 of 500 seen): how many is a rate there.
    together, share = (0.9 * st.streams, "90%") if not st.quick else (1, "1")
    checks.add(
        f"streams decode together (>= {share} of {st.streams})",
        state["decoding"] >= together,
        f"{before['decoding']} decoding at the reset, {state['decoding']} at the snapshot",
    )
    sched = None
    if sched0 is not None and sched1 is not None:
        sched = {k: round(sched1[k] - sched0[k], 3) for k in sched0}
    contended = sched is not None and sched["runqueue_wait_ms"] > CONTENDED * window_s * 1000.0
    p99 = float(late["p99"])
    return {
        "claim": f"engine step lateness at {st.streams} concurrent streams: P99 <= {TARGET_LATENESS_P99_MS} ms",
        "target": {"metric": "lateness P99 ms", "op": "<=", "value": TARGET_LATENESS_P99_MS},
        "value": p99,
        "passed": p99 <= TARGET_LATENESS_P99_MS and late["count"] > 0,
        "lateness_ms": late,
        "steps": steps,
        "window_s": round(window_s, 3),
        "mean_step_ms": round(window_s * 1000.0 / steps, 3) if steps else None,
        "model_step_ms": round(shape.step_ms + shape.step_per_seq_ms * (state["decoding"] - 1), 3),
        "decoding": state["decoding"],
        "tokens_per_s": round(state["tokens_emitted"] / window_s, 1),
        "sim_sched": sched,
        "contended": contended,
        "sim": res.as_dict(),
        "errors": res.errors,
        "correct": checks.ok,
        "checks": checks.items,
    }


# -- report ----------------------------------------------------------------------------------------


def machine(wrk_binary: str) -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    wrk_version = subprocess.run([wrk_binary, "-v"], capture_output=True, text=True, check=False)
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "aiohttp": version("aiohttp"),
        "uvloop": version("uvloop"),
        "tailgate": version("tailgate"),
        "wrk": (wrk_version.stdout or wrk_version.stderr).split("Copyright")[0].strip(),
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
    }


def _verdict(passed: bool, enforced: bool) -> str:
    if passed:
        return "[bold green]PASS[/]"
    return "[bold red]FAIL[/]" if enforced else "[yellow]miss (not enforced)[/]"


def print_throughput(title: str, sc: dict[str, Any], enforced: bool) -> None:
    sim, base = sc["sim"], sc["baseline"]
    table = Table("", "sim", "baseline", "sim / baseline", "target", "result", title=title)
    ratio = f"{sc['ratio']:.3f}" if sc["ratio"] is not None else "-"
    table.add_row(
        "req/s",
        f"{sim['rps']:,.0f}",
        f"{base['rps']:,.0f}",
        ratio,
        f">= {sc['target']['value']:,.0f}",
        _verdict(sc["passed"], enforced),
    )
    for q in ("p50", "p99"):
        table.add_row(
            f"latency {q} ms",
            f"{sim['latency_ms'][q]:.2f}",
            f"{base['latency_ms'][q]:.2f}",
            f"{sim['latency_ms'][q] / base['latency_ms'][q]:.2f}" if base["latency_ms"][q] else "-",
            "",
            "",
        )
    table.add_row("requests", f"{sim['requests']:,}", f"{base['requests']:,}", "", "", "")
    table.add_row("server CPU (cores)", _cores(sim["server_cpu"]), _cores(base["server_cpu"]), "", "", "")
    table.add_row("wrk CPU (cores)", _cores(sim["client_cpu"]), _cores(base["client_cpu"]), "", "", "")
    table.add_row("errors", str(sim["errors"]), str(base["errors"]), "", "0", _verdict(sc["errors"] == 0, True))
    console.print(table)


def print_lateness(title: str, sc: dict[str, Any], enforced: bool) -> None:
    late = sc["lateness_ms"]
    table = Table("", "value", "target", "result", title=title)
    table.add_row(
        "step lateness P99 ms",
        f"{late['p99']:.3f}",
        f"<= {TARGET_LATENESS_P99_MS}",
        _verdict(sc["passed"], enforced),
    )
    for k in ("p50", "p90", "p95", "max", "mean"):
        table.add_row(f"step lateness {k} ms", f"{late[k]:.3f}", "", "")
    table.add_row("steps measured", f"{sc['steps']:,} in {sc['window_s']:.1f} s", "", "")
    table.add_row("mean step ms (model)", f"{sc['mean_step_ms']} ({sc['model_step_ms']})", "", "")
    table.add_row("sequences decoding", str(sc["decoding"]), "", "")
    table.add_row("tokens/s", f"{sc['tokens_per_s']:,.0f}", "", "")
    table.add_row("completed streams/s (wrk)", f"{sc['sim']['rps']:,.1f}", "", "")
    table.add_row(
        "sim / wrk CPU (cores)", f"{_cores(sc['sim']['server_cpu'])} / {_cores(sc['sim']['client_cpu'])}", "", ""
    )
    if sc["sim_sched"] is not None:
        sched = sc["sim_sched"]
        table.add_row(
            "sim waited for a CPU (window)",
            f"{sched['runqueue_wait_ms']:,.0f} ms, preempted {sched['preempted']:,.0f}×",
            "",
            "",
        )
    table.add_row("errors", str(sc["errors"]), "0", _verdict(sc["errors"] == 0, True))
    console.print(table)
    if sc["contended"]:
        console.print(
            f"[yellow]note:[/] the simulator waited {sc['sim_sched']['runqueue_wait_ms']:,.0f} ms for a CPU in the "
            f"{sc['window_s']:.0f} s window (other processes on this machine): lateness here measures the "
            "machine as much as the engine"
        )


def _cores(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def print_checks(name: str, sc: dict[str, Any]) -> None:
    for c in sc["checks"]:
        if not c["ok"]:
            what = escape(f"[{name}] {c['name']}: {c['detail']}")
            console.print(f"[bold red]check failed[/] {what}")


def print_machine(console: Console, info: dict[str, Any]) -> None:
    """The machine line every benchmark prints first (numbers mean nothing without it)."""
    console.print(
        f"nproc {info['nproc']} ({info['cpu']}), Python {info['python']}, aiohttp {info['aiohttp']}, "
        f"uvloop {info['uvloop']}, {info['wrk']}; load average {info['loadavg_before']}",
        markup=False,
        soft_wrap=True,
    )


def stop_process(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace_s``; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def finish(
    console: Console, result: dict[str, Any], json_path: Path | None, *, correct: bool, met: bool, quick: bool
) -> int:
    """Write the JSON, print the verdict, return the exit code (1: a failed check, or a missed target unless quick)."""
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    summary = "all correctness checks passed" if correct else "[bold red]correctness checks FAILED[/]"
    summary += "; targets met" if met else "; [bold red]targets missed[/]"
    if quick:
        summary += " (quick run: targets not enforced)"
    console.print(summary)
    return 0 if correct and (met or quick) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run (default 10)")
    ap.add_argument("--quick", action="store_true", help="2 s runs; targets reported, not enforced")
    ap.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    ap.add_argument("--connections", type=int, default=64, help="wrk connections for claims 1-2")
    ap.add_argument("--streams", type=int, default=500, help="concurrent streams for claim 3")
    ap.add_argument("--pin", action="store_true", help="taskset: servers on CPU 0, wrk on CPU 1")
    ap.add_argument("--only", action="append", choices=SCENARIOS, default=None, help="run only this claim (repeatable)")
    args = ap.parse_args(argv)
    only = set(args.only or SCENARIOS)

    wrk_binary = shutil.which("wrk")
    if wrk_binary is None:
        console.print("[bold red]wrk is not installed[/] (apt-get install wrk)")
        return 2
    if args.pin and (shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2):
        console.print("[bold red]--pin needs taskset and 2 CPUs[/]")
        return 2
    d = 2 if args.quick else max(1, args.duration)
    st = Settings(
        duration_s=d,
        warmup_s=max(1, d // 5),
        lateness_warmup_s=max(1, d // 2),
        lateness_measure_s=d if args.quick else 2 * d,
        connections=args.connections,
        streams=args.streams,
        quick=args.quick,
        pin=args.pin,
    )
    info = machine(wrk_binary)
    print_machine(console, info)
    console.print(
        f"wrk -t1 -c{st.connections} -d{st.duration_s}s after a {st.warmup_s} s warm-up; "
        f"lateness: -c{st.streams}, {st.lateness_warmup_s} s warm-up, {st.lateness_measure_s} s measured",
        markup=False,
        soft_wrap=True,
    )
    scenarios: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_sim-") as tmp:
        workdir = Path(tmp)
        wrk = Wrk(wrk_binary, workdir, pin=st.pin)
        base_argv = [sys.executable, str(HERE / "_baseline_server.py"), "0"]
        sim_instant = sim_argv("--preset", "instant", "--port", "0")
        if "nonstream" in only or "stream" in only:
            with (
                server("baseline", base_argv, workdir / "baseline.log", pin=st.pin) as baseline,
                server("sim (instant)", sim_instant, workdir / "sim.log", pin=st.pin) as sim,
            ):
                for name, stream, target, title in (
                    ("nonstream", False, TARGET_NONSTREAM_RPS, "1. non-stream, instant preset"),
                    ("stream", True, TARGET_STREAM_RPS, f"2. stream ({TOKENS} tokens), instant preset"),
                ):
                    if name in only:
                        scenarios[name] = throughput(wrk, st, stream=stream, sim=sim, baseline=baseline, target=target)
                        print_throughput(title, scenarios[name], not st.quick)
        if "lateness" in only:
            scenarios["lateness"] = lateness(wrk, st, workdir)
            print_lateness(f"3. engine step lateness, {st.streams} streams", scenarios["lateness"], not st.quick)

    for name, sc in scenarios.items():
        print_checks(name, sc)
    correct = all(sc["correct"] and sc["errors"] == 0 for sc in scenarios.values())
    met = all(sc["passed"] for sc in scenarios.values())
    result = {
        "machine": info,
        "settings": asdict(st),
        "scenarios": scenarios,
        "correct": correct,
        "targets_met": met,
        "enforced": not st.quick,
    }
    return finish(console, result, args.json, correct=correct, met=met, quick=st.quick)


if __name__ == "__main__":
    sys.exit(main())
