"""Claim: a dead or hanging OpenTelemetry collector never slows or fails a request; what could not be sent is counted.

``tailgate serve`` (every default feature, ``telemetry:`` on: a span per request and per attempt, the GenAI
metrics) in front of the ``instant`` simulator exports to a sink collector (``_otlp_sink.py --decode``, which counts
the spans it receives) while ``wrk`` drives it, in phases of ``--seconds`` each:

- ``up``: the collector answers;
- ``down``: the collector's process killed (connections refused), ``--down refuse``; or a listening socket that
  never answers (``--down blackhole``: every export waits for its timeout); ``--down both`` runs one after the
  other, each followed by an ``up`` phase (the collector back on the same port);
- ``up`` again: the spans reach it again.

Per phase: requests, errors, latency P50 / P90 / P99 (wrk), spans the sink received, and the gateway's
``tailgate_otel_spans_dropped_total`` and ``tailgate_otel_export_failures_total`` (when it has them) moved.

Targets: 0 failed requests in every phase; in each down phase P50 and P90 <= 1.25 x the mean of the up phases
before and after it (a shared machine's drift over the run hits both; ``--quick`` reports, does not judge);
dropped spans counted (> 0) in each down phase; spans reach the collector again in the phase after it.

Usage: ``.venv/bin/python benchmarks/otel_collector_outage.py [--seconds 30] [--connections 20] [--down
refuse|blackhole|both] [--quick] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _overhead_hops import Hop, free_port, gateway_hop, metric_sum
from bench_sim import (
    Checks,
    Server,
    Wrk,
    _chat_body,
    check_wrk,
    finish,
    machine,
    print_checks,
    print_machine,
    server,
    sim_argv,
    stop_process,
)

HERE = Path(__file__).resolve().parent
console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
TARGET_LATENCY_RATIO = 1.25
_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
wrk.body = '{body}'
"""


class Collector:
    """The sink collector on a fixed port: started, killed, replaced by a socket that never answers."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port = port
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.hole: socket.socket | None = None
        self.received = 0
        """Spans received by earlier sink processes (each restart starts counting at zero)."""
        self._starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._starts += 1
        log = self.workdir / f"sink{self._starts}.log"
        argv = [sys.executable, str(HERE / "_otlp_sink.py"), str(self.port), "--decode"]
        with log.open("w") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while "listening on" not in log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the sink collector did not start:\n{log.read_text()}")
            time.sleep(0.05)

    def spans(self) -> int:
        """Spans received so far, over every sink process."""
        if self.proc is None:
            return self.received
        with urllib_open(self.url + "/sink/stats") as body:
            return self.received + int(json.loads(body)["items"].get("/v1/traces", 0))

    def kill(self) -> None:
        if self.proc is not None:
            self.received = self.spans()
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def blackhole(self) -> None:
        """Listen on the collector's port and never accept: connections open, exports wait for their timeout."""
        hole = socket.socket()
        hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hole.bind(("127.0.0.1", self.port))
        hole.listen(4096)
        self.hole = hole

    def close_hole(self) -> None:
        if self.hole is not None:
            self.hole.close()
            self.hole = None

    def stop(self) -> None:
        self.close_hole()
        if self.proc is not None:
            stop_process(self.proc, 5.0)
            self.proc = None


@contextlib.contextmanager
def urllib_open(url: str) -> Iterator[bytes]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - a loopback URL we built
        yield resp.read()


def counters(hop: Hop) -> dict[str, float]:
    """The gateway's own count of spans it could not export (and failed exports, when it has that series)."""
    import urllib.request

    req = urllib.request.Request(hop.server.url + "/metrics")  # noqa: S310
    req.add_header("Authorization", f"Bearer {hop.bearer}")
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310
        text = resp.read().decode()
    return {
        "dropped": metric_sum(text, "tailgate_otel_spans_dropped_total"),
        "export_failures": metric_sum(text, "tailgate_otel_export_failures_total"),
    }


def phase(
    name: str, wrk: Wrk, script: Path, hop: Hop, collector: Collector, seconds: int, conns: int
) -> dict[str, Any]:
    before, spans0 = counters(hop), collector.spans()
    run = wrk.start(
        hop.server.url + "/v1/chat/completions", script, connections=conns, duration_s=seconds, timeout_s=10
    )
    res = run.finish(hop.server)
    time.sleep(1.5)  # the export's schedule delay (1 s): this phase's last spans are sent (or dropped) before reading
    after, spans1 = counters(hop), collector.spans()
    out = {
        "phase": name,
        "requests": res.requests,
        "rps": res.rps,
        "errors": res.errors,
        "latency_ms": res.latency_ms,
        "spans_received": spans1 - spans0,
        "spans_dropped": after["dropped"] - before["dropped"],
        "export_failures": after["export_failures"] - before["export_failures"],
        "wrk": res,
    }
    console.print(
        f"  {name:18} {res.requests:8,} requests  {res.rps:8,.0f} req/s  errors {res.errors}  "
        f"P50 {res.latency_ms['p50']:6.2f}  P90 {res.latency_ms['p90']:6.2f}  P99 {res.latency_ms['p99']:6.2f} ms  "
        f"spans received {out['spans_received']:,}  dropped {out['spans_dropped']:,.0f}",
        markup=False,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--seconds", type=int, default=30, help="seconds per phase (default 30)")
    ap.add_argument("--connections", type=int, default=20, help="wrk connections (default 20)")
    ap.add_argument("--down", choices=("refuse", "blackhole", "both"), default="both")
    ap.add_argument("--quick", action="store_true", help="5 s phases; targets reported, not enforced")
    ap.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    args = ap.parse_args(argv)
    wrk_binary = shutil.which("wrk")
    if wrk_binary is None:
        console.print("[bold red]wrk is not installed[/] (apt-get install wrk)")
        return 2
    seconds = 5 if args.quick else max(2, args.seconds)
    downs = ["refuse", "blackhole"] if args.down == "both" else [args.down]
    info = machine(wrk_binary)
    print_machine(console, info)
    console.print(
        f"wrk -c{args.connections}, phases of {seconds} s: up, "
        + ", ".join(f"down ({d}), up" for d in downs)
        + "; collector: _otlp_sink.py --decode",
        markup=False,
    )
    checks = Checks()
    phases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="otel_collector_outage-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        wrk = Wrk(wrk_binary, workdir, pin=False)
        sim: Server = stack.enter_context(
            server("sim (instant)", sim_argv("--preset", "instant", "--port", "0"), workdir / "sim.log", pin=False)
        )
        collector = Collector(free_port(), workdir)
        stack.callback(collector.stop)
        collector.start()
        telemetry = f'telemetry: {{endpoint: "{collector.url}", service_name: tailgate-collector-down}}\n'
        hop = stack.enter_context(gateway_hop(workdir, "tailgate", sim.url, extra_yaml=telemetry))
        script = wrk.script(_LUA.format(key=hop.bearer, body=_chat_body(stream=False)))
        warm = wrk.start(
            hop.server.url + "/v1/chat/completions", script, connections=args.connections, duration_s=2, timeout_s=10
        )
        check_wrk(checks, "warm-up", warm.finish(hop.server))
        phases.append(phase("up", wrk, script, hop, collector, seconds, args.connections))
        for down in downs:
            collector.kill()
            if down == "blackhole":
                collector.blackhole()
            phases.append(phase(f"down ({down})", wrk, script, hop, collector, seconds, args.connections))
            collector.close_hole()
            collector.start()
            phases.append(phase(f"up after {down}", wrk, script, hop, collector, seconds, args.connections))
    targets: list[dict[str, Any]] = []
    for i, ph in enumerate(phases):
        check_wrk(checks, f"{ph['phase']}: wrk", ph.pop("wrk"))
        checks.add(f"{ph['phase']}: 0 failed requests", ph["errors"] == 0, f"{ph['errors']} errors")
        if ph["phase"].startswith("down"):
            # Against the up phases on either side (their mean): a shared machine's drift over the run hits both.
            for q in ("p50", "p90"):
                up = (phases[i - 1]["latency_ms"][q] + phases[i + 1]["latency_ms"][q]) / 2
                ratio = ph["latency_ms"][q] / up if up else None
                ph[f"{q}_ratio"] = round(ratio, 3) if ratio is not None else None
                targets.append(
                    {
                        "what": f"{ph['phase']}: {q.upper()} <= {TARGET_LATENCY_RATIO} x the up phases' around it",
                        "value": ph[f"{q}_ratio"],
                        "passed": ratio is not None and ratio <= TARGET_LATENCY_RATIO,
                    }
                )
            checks.add(
                f"{ph['phase']}: dropped spans counted",
                ph["spans_dropped"] > 0,
                f"{ph['spans_dropped']:,.0f} dropped, {ph['export_failures']:,.0f} failed exports",
            )
            after = phases[i + 1]
            checks.add(
                f"{after['phase']}: spans reach the collector again",
                after["spans_received"] > 0,
                f"{after['spans_received']:,} spans",
            )
    table = Table(
        "phase", "requests", "req/s", "errors", "P50 ms", "P90 ms", "P99 ms", "÷ up: P50 / P90", "spans in", "dropped"
    )
    for ph in phases:
        ratio = f"{ph.get('p50_ratio', '-')} / {ph.get('p90_ratio', '-')}" if "p50_ratio" in ph else ""
        lat = ph["latency_ms"]
        table.add_row(
            ph["phase"],
            f"{ph['requests']:,}",
            f"{ph['rps']:,.0f}",
            str(ph["errors"]),
            f"{lat['p50']:.2f}",
            f"{lat['p90']:.2f}",
            f"{lat['p99']:.2f}",
            ratio,
            f"{ph['spans_received']:,}",
            f"{ph['spans_dropped']:,.0f}",
        )
    console.print(table)
    print_checks("otel_collector_outage", {"checks": checks.items})
    for t in targets:
        console.print(f"  {t['what']}: {t['value']} ({'met' if t['passed'] else 'missed'})", markup=False)
    met = all(t["passed"] for t in targets)
    result = {
        "machine": info,
        "settings": {"seconds": seconds, "connections": args.connections, "down": downs, "quick": args.quick},
        "phases": phases,
        "targets": targets,
        "checks": checks.items,
        "correct": checks.ok,
        "targets_met": met,
        "enforced": not args.quick,
    }
    return finish(console, result, args.json, correct=checks.ok, met=met, quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
