"""A load tester nobody here wrote, run unmodified against ``tailgate mock`` and through the gateway.

ModelScope's ``evalscope perf`` (what many teams serving DeepSeek/Qwen use; it sends vLLM's ``min_tokens``)
runs at concurrency 1 against a ``provider-a`` simulator (MaaS dialect) and against ``tailgate serve``
in front of it. Its median TTFT and median latency must be within 5 % of the simulator's own ground truth
(``/sim/truth``) over the same requests, with zero failed requests.

    python benchmarks/third_party_loadtester.py [--evalscope PATH] [--requests 30] [--time-scale 0.5] [--json OUT]

``evalscope`` is not a tailgate dependency (it pulls in pandas, transformers, datasets …): install it into
its own venv (``python -m venv /tmp/lt && /tmp/lt/bin/pip install 'evalscope[perf]'``) and pass its path.
Exit code 1 when a check fails, 2 when evalscope is not installed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_sim import http, http_json, server, sim_argv

_GATEWAY_YAML = """\
listen: {{host: 127.0.0.1, port: 0}}
providers:
  sim:
    base_url: "{upstream}/v1"
    api_keys: ["sk-upstream-0123456789"]
models:
  m:
    routes:
      - {{provider: sim, model: m}}
ledger: {{enabled: false}}
"""
TOLERANCE = 0.05


def run_evalscope(evalscope: str, url: str, requests: int, out: Path) -> dict[str, Any]:
    """One evalscope perf run at concurrency 1; its p50 TTFT (ms) and latency (ms), and its failures."""
    argv = [
        evalscope,
        "perf",
        "--url",
        f"{url}/v1/chat/completions",
        "--api",
        "openai",
        "--model",
        "m",
        "--parallel",
        "1",
        "--number",
        str(requests),
        "--prompt",
        "Tell me about the weather in Paris today.",
        "--max-tokens",
        "40",
        "--min-tokens",
        "40",
        "--stream",
        "--no-test-connection",
        "--outputs-dir",
        str(out),
        "--no-timestamp",
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"evalscope failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    run_dir = next(out.glob("m/parallel_1_number_*"))
    percentiles = json.loads((run_dir / "benchmark_percentile.json").read_text())
    summary = json.loads((run_dir / "benchmark_summary.json").read_text())
    p50 = next(p for p in percentiles if p["Percentiles"] in ("50%", "p50"))
    return {
        "ttft_p50_ms": float(p50["TTFT (ms)"]),
        "e2e_p50_ms": float(p50["Latency (s)"]) * 1000.0,
        "succeeded": summary.get("Success Requests"),
        "failed": summary.get("Failed Requests"),
        "argv": " ".join(argv[1:]),
    }


def truth_medians(sim_url: str) -> dict[str, Any]:
    rows = http_json("GET", f"{sim_url}/sim/truth")["requests"]
    # The gateway's own active health probes reach the simulator too; they carry x-request-id probe-….
    rows = [r for r in rows if not (r.get("client_request_id") or "").startswith("probe-")]
    ok = [r for r in rows if r["status"] == 200]
    return {
        "requests": len(rows),
        "ok": len(ok),
        "ttft_p50_ms": statistics.median(r["ttft_ms"] for r in ok),
        "e2e_p50_ms": statistics.median(r["e2e_ms"] for r in ok),
    }


def compare(name: str, ours: dict[str, Any], truth: dict[str, Any], requests: int) -> dict[str, Any]:
    checks = {
        "zero errors": ours["failed"] == 0 and ours["succeeded"] == truth["ok"] == truth["requests"] == requests,
        "TTFT p50 within 5%": abs(ours["ttft_p50_ms"] / truth["ttft_p50_ms"] - 1) <= TOLERANCE,
        "E2E p50 within 5%": abs(ours["e2e_p50_ms"] / truth["e2e_p50_ms"] - 1) <= TOLERANCE,
    }
    row = {"target": name, "evalscope": ours, "truth": truth, "checks": checks}
    ratio_t = ours["ttft_p50_ms"] / truth["ttft_p50_ms"]
    ratio_e = ours["e2e_p50_ms"] / truth["e2e_p50_ms"]
    print(
        f"{name:8} evalscope TTFT p50 {ours['ttft_p50_ms']:8.1f} ms  truth {truth['ttft_p50_ms']:8.1f} ms  "
        f"ratio {ratio_t:.3f} | E2E p50 {ours['e2e_p50_ms']:8.1f} ms  truth {truth['e2e_p50_ms']:8.1f} ms  "
        f"ratio {ratio_e:.3f} | failed {ours['failed']}  "
        + ", ".join(f"{k}: {'OK' if v else 'FAIL'}" for k, v in checks.items())
    )
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--evalscope", default=shutil.which("evalscope"), help="path of the evalscope executable")
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--time-scale", type=float, default=0.5, help="of the provider-a preset (0.5: TTFT ≈ 370 ms)")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    if not args.evalscope or not Path(args.evalscope).exists():
        print("evalscope is not installed: python -m venv /tmp/lt && /tmp/lt/bin/pip install 'evalscope[perf]'")
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="third_party-") as tmp:
        work = Path(tmp)
        sim_cmd = sim_argv("--preset", "provider-a", "--port", "0", "--time-scale", str(args.time_scale))
        with server("sim", sim_cmd, work / "sim.log", pin=False) as sim:
            cfg = work / "gateway.yaml"
            cfg.write_text(_GATEWAY_YAML.format(upstream=sim.url))
            gw_cmd = [sys.executable, "-m", "tailgate", "serve", "--config", str(cfg), "--port", "0"]
            with server("gateway", gw_cmd, work / "gateway.log", pin=False) as gw:
                for name, url in (("mock", sim.url), ("gateway", gw.url)):
                    http("DELETE", f"{sim.url}/sim/truth")
                    ours = run_evalscope(args.evalscope, url, args.requests, work / name)
                    results.append(compare(name, ours, truth_medians(sim.url), args.requests))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(all(r["checks"].values()) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
