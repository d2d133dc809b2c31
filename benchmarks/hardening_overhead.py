"""Claim: the hardening of issue 14 (body limits, deadline, access guard, connection cap, whole-body
validation) costs the gateway little: CPU per request within 5 % of the code before it, same run.

Two ``tailgate serve`` processes on one ``instant`` simulator: ``base`` runs the source tree of
``--base`` (default: the commit before issue 14, extracted with ``git archive`` and put first on
``PYTHONPATH``), ``new`` runs this checkout. wrk drives them in alternating order, ``--rounds`` times per
mode (non-stream and stream, ``--connections``), ``--duration`` seconds each; the ratios new/base of
req/s, of P50 and of the gateway's CPU seconds per request are taken per round, and the medians across
rounds are reported (drift on a shared machine hits both alike; CPU per request moves least).

Usage: ``.venv/bin/python benchmarks/hardening_overhead.py [--base REV] [--rounds 5] [--duration 3]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import yaml

from bench_sim import Server, Wrk, WrkResult, server, sim_argv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
_LISTEN = re.compile(r"listening on http://127\.0\.0\.1:(\d+)/v1")


def _lua(stream: bool) -> str:
    body = {"model": "bench", "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 20}
    if stream:
        body["stream"] = True
    text = json.dumps(body).replace("'", "\\'")
    return f"wrk.method = 'POST'\nwrk.headers['Content-Type'] = 'application/json'\nwrk.body = '{text}'\n"


@contextmanager
def gateway(name: str, config: Path, log: Path, pythonpath: str | None) -> Iterator[Server]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    argv = [sys.executable, "-m", "tailgate", "serve", "--config", str(config), "--port", "0"]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not (match := _LISTEN.search(log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield Server(name, f"http://127.0.0.1:{match.group(1)}", proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _cpu_per_req(res: WrkResult) -> float:
    assert res.server_cpu is not None
    return res.server_cpu / res.rps


def extract(rev: str, into: Path) -> Path:
    data = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="1b0d055", help="git revision to compare against")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=3)
    ap.add_argument("--connections", type=int, default=50)
    args = ap.parse_args()
    wrk_bin = shutil.which("wrk")
    if wrk_bin is None:
        print("wrk is not installed", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="tailgate-hardening-"))
    base_src = extract(args.base, tmp / "base")
    wrk = Wrk(wrk_bin, tmp, pin=False)
    results: dict[str, list[dict[str, float]]] = {}
    with ExitStack() as stack:
        sim = stack.enter_context(
            server("sim", sim_argv("--preset", "instant", "--port", "0"), tmp / "sim.log", pin=False)
        )
        config = tmp / "gateway.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "providers": {"p": {"base_url": sim.url + "/v1"}},
                    "models": {"bench": {"routes": [{"provider": "p", "model": "bench"}]}},
                    "routing": {"probes": {"enabled": False}},
                    "ledger": {"path": str(tmp / "ledger.db")},
                }
            )
        )
        hops = {
            "base": stack.enter_context(gateway("base", config, tmp / "base.log", str(base_src))),
            "new": stack.enter_context(gateway("new", config, tmp / "new.log", None)),
        }
        for mode, stream in (("nonstream", False), ("stream", True)):
            script = wrk.script(_lua(stream))
            for hop in hops.values():  # warm-up
                wrk.run(hop, script, connections=args.connections, duration_s=1, timeout_s=10)
            for r in range(args.rounds):
                order = ["base", "new"] if r % 2 == 0 else ["new", "base"]
                got = {}
                for name in order:
                    res = wrk.run(
                        hops[name], script, connections=args.connections, duration_s=args.duration, timeout_s=10
                    )
                    if res.errors:
                        raise SystemExit(f"{name} {mode}: {res.errors} errors")
                    got[name] = res
                results.setdefault(mode, []).append(
                    {
                        "base_rps": got["base"].rps,
                        "new_rps": got["new"].rps,
                        "rps_ratio": got["new"].rps / got["base"].rps,
                        "p50_ratio": got["new"].latency_ms["p50"] / got["base"].latency_ms["p50"],
                        # CPU seconds of the gateway process per request: what contention moves least
                        "cpu_per_req_ratio": _cpu_per_req(got["new"]) / _cpu_per_req(got["base"]),
                    }
                )
                print(mode, r, json.dumps(results[mode][-1]), flush=True)
    summary = {
        mode: {
            "median_rps_ratio": round(statistics.median(x["rps_ratio"] for x in rows), 3),
            "median_p50_ratio": round(statistics.median(x["p50_ratio"] for x in rows), 3),
            "median_cpu_per_req_ratio": round(statistics.median(x["cpu_per_req_ratio"] for x in rows), 3),
            "median_base_rps": round(statistics.median(x["base_rps"] for x in rows)),
            "median_new_rps": round(statistics.median(x["new_rps"] for x in rows)),
        }
        for mode, rows in results.items()
    }
    print(json.dumps({"base": args.base, "connections": args.connections, "summary": summary}, indent=2))
    return 0 if all(s["median_cpu_per_req_ratio"] <= 1.05 for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
