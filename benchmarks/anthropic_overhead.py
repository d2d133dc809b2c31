"""Claim: translating Anthropic's Messages API to OpenAI chat costs the gateway little more than passing it through.

One ``tailgate mock`` (preset ``instant``: 0.1 ms decode steps, no queue; it speaks both protocols) behind one
``tailgate serve`` process (no keys, no ledger: the protocol path alone) with two aliases over the same simulator:

- ``pass``: a provider with ``anthropic_base_url`` → ``/v1/messages`` is passed through to the simulator's own
  ``/v1/messages`` (bytes relayed, Anthropic events measured);
- ``trans``: a provider without it → the request is translated to chat, the simulator's chat answer or chunks
  translated back (``gateway/apis/messages.py``).

The client (this process, one keep-alive connection, one request at a time) sends the same Anthropic request to
both, interleaved per round so drift on a shared machine hits both alike. Measured per mode, per round: the
gateway process's CPU (``/proc``: user + system) per request for a whole answer (16 tokens), for streams of 16
and 256 tokens, and for a 44 KB Claude-Code-shaped request (16 tools, 24 turns with thinking and tool use; a
16-token answer). **Per request** = the CPU of a 16-token whole answer (a small request, and the agent's);
**per chunk** = (CPU of a 256-token stream − CPU of a 16-token stream) ÷ 240. Also the client's median
end-to-end time per kind. The simulator's answer length is forced to ``max_tokens`` in both dialects (a huge
natural length, cut), so both modes relay the same number of tokens. Reported as medians over rounds,
translation − passthrough and their ratio.

Correctness (exit 1): every answer is a 200 with the expected content (a message, or a stream ending in
``message_stop`` with 16 / 256 text deltas) in both modes.

Usage: ``.venv/bin/python benchmarks/anthropic_overhead.py [--quick] [--rounds N] [--requests N] [--json F]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_anthropic_translate import agent_request
from stream_relay import servers, tree_cpu_s

HERE = Path(__file__).resolve().parent
_SIM_YAML = """\
seed: 1
providers:
  s:
    preset: instant
    port: 0
    # natural length far over max_tokens: both dialects stop at it; maas accepts the thinking switch
    engine: {default_output_tokens: 100000, dialect: maas, tool_call_rate: 0.0}
"""
_GW_YAML = """\
listen: {{host: 127.0.0.1, port: 0}}
providers:
  nat: {{base_url: "{sim}/v1", anthropic_base_url: "{sim}", api_keys: ["sk-bench-0123456789"]}}
  chat: {{base_url: "{sim}/v1", api_keys: ["sk-bench-0123456789"]}}
models:
  pass: {{routes: [{{provider: nat, model: up}}]}}
  trans: {{routes: [{{provider: chat, model: up}}]}}
ledger: {{enabled: false}}
"""
KINDS = {"unary16": (16, False), "stream16": (16, True), "stream256": (256, True), "agent16": (16, False)}
"""(max_tokens, stream); ``agent16``: a 44 KB Claude-Code-shaped request (bench_anthropic_translate.agent_request)."""
MODES = ("pass", "trans")


def body(alias: str, tokens: int, stream: bool, agent: bool = False) -> bytes:
    if agent:
        obj = json.loads(agent_request())
        return json.dumps({**obj, "model": alias, "max_tokens": tokens, "stream": stream}).encode()
    return json.dumps(
        {
            "model": alias,
            "max_tokens": tokens,
            "system": "You are a coding agent.",
            "messages": [{"role": "user", "content": "Write the function, then explain it briefly."}],
            "stream": stream,
        }
    ).encode()


def check(raw: bytes, tokens: int, stream: bool, agent: bool = False) -> None:
    if not stream:
        msg = json.loads(raw)
        assert msg["type"] == "message", raw[:200]
        assert msg["usage"]["output_tokens"] == tokens or agent, raw[:200]  # the agent's: thinking + text
        return
    text = raw.decode()
    assert text.rstrip().endswith('data: {"type":"message_stop"}'), text[-200:]
    assert text.count('"type":"text_delta"') == tokens, text.count('"type":"text_delta"')


def one(conn: http.client.HTTPConnection, payload: bytes) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    conn.request("POST", "/v1/messages", payload, {"Content-Type": "application/json", "x-api-key": "none"})
    resp = conn.getresponse()
    raw = resp.read()
    e2e = time.perf_counter() - t0
    assert resp.status == 200, raw[:300]
    return e2e, raw


def block(conn: http.client.HTTPConnection, gw_pid: int, alias: str, kind: str, n: int) -> tuple[float, float]:
    """``n`` requests of one kind: (gateway CPU µs per request, median client E2E ms)."""
    tokens, stream = KINDS[kind]
    agent = kind.startswith("agent")
    payload = body(alias, tokens, stream, agent)
    e2es = []
    cpu0 = tree_cpu_s(gw_pid)
    for _ in range(n):
        e2e, raw = one(conn, payload)
        e2es.append(e2e)
    cpu = tree_cpu_s(gw_pid) - cpu0
    check(raw, tokens, stream, agent)
    return cpu / n * 1e6, statistics.median(e2es) * 1000.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=300, help="per mode, kind and round (streams of 256: ÷ 3)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quick", action="store_true", help="1 round of 30: the flow and the checks, not the numbers")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.requests = 1, 30
    results: dict[str, dict[str, list[tuple[float, float]]]] = {m: {k: [] for k in KINDS} for m in MODES}
    with tempfile.TemporaryDirectory(prefix="anthropic_overhead-") as tmp:
        work = Path(tmp)
        (work / "sim.yaml").write_text(_SIM_YAML)
        sim_argv = [sys.executable, "-m", "tailgate", "mock", "--config", str(work / "sim.yaml")]
        with servers([("sim", sim_argv, work / "sim.log", 1)]) as sims:
            sim_root = sims["sim"].url
            (work / "gw.yaml").write_text(_GW_YAML.format(sim=sim_root))
            gw_argv = [sys.executable, "-m", "tailgate", "serve", "--config", str(work / "gw.yaml"), "--port", "0"]
            with servers([("gw", gw_argv, work / "gw.log", 1)]) as gws:
                gw = gws["gw"]
                host, port = gw.url.removeprefix("http://").split(":")
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                for mode in MODES:  # warm-up: both paths, every kind
                    for kind in KINDS:
                        block(conn, gw.pid, mode, kind, 20)
                for r in range(a.rounds):
                    for mode in MODES if r % 2 == 0 else MODES[::-1]:
                        for kind in KINDS:
                            n = a.requests // 3 if kind == "stream256" else a.requests
                            results[mode][kind].append(block(conn, gw.pid, mode, kind, n))
                conn.close()
    med = {
        m: {k: (statistics.median(c for c, _ in v), statistics.median(e for _, e in v)) for k, v in ks.items()}
        for m, ks in results.items()
    }
    chunks = KINDS["stream256"][0] - KINDS["stream16"][0]
    out: dict[str, Any] = {"rounds": a.rounds, "requests": a.requests, "modes": {}}
    for m in MODES:
        per_req = med[m]["unary16"][0]
        per_chunk = (med[m]["stream256"][0] - med[m]["stream16"][0]) / chunks
        out["modes"][m] = {
            "cpu_us_per_request": round(per_req, 1),
            "cpu_us_per_stream16": round(med[m]["stream16"][0], 1),
            "cpu_us_per_agent_request": round(med[m]["agent16"][0], 1),
            "cpu_us_per_chunk": round(per_chunk, 2),
            "e2e_ms": {k: round(med[m][k][1], 3) for k in KINDS},
        }
    p, t = out["modes"]["pass"], out["modes"]["trans"]
    out["translation_minus_passthrough"] = {
        "cpu_us_per_request": round(t["cpu_us_per_request"] - p["cpu_us_per_request"], 1),
        "cpu_us_per_chunk": round(t["cpu_us_per_chunk"] - p["cpu_us_per_chunk"], 2),
        "cpu_us_per_agent_request": round(t["cpu_us_per_agent_request"] - p["cpu_us_per_agent_request"], 1),
        "ratio_per_request": round(t["cpu_us_per_request"] / p["cpu_us_per_request"], 2),
        "ratio_per_chunk": round(t["cpu_us_per_chunk"] / p["cpu_us_per_chunk"], 2) if p["cpu_us_per_chunk"] else None,
    }
    print(json.dumps(out, indent=2))
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
