"""Claims: fleet state on Redis costs a replica almost nothing, and a shared limit holds across replicas.

Part 1, overhead (issues 11 and 31): ``tailgate serve`` processes in front of one ``instant`` simulator, the
same config but ``state: local`` in one, ``state: redis`` (a private redis-server on loopback) in the next and
``state: redis`` through ``tests/delay_proxy.py`` (``--proxy-rtt-ms``, default 1: Redis a network hop away) in
the third. Every request passes a gateway key — by default the issue 31 tenant key (``rpm``, ``tpm``, a daily
and a monthly token budget, ``max_concurrency``; ``--key bench``: an ``rpm`` only) — and a provider with
``limits.rpm``, all large, so they never refuse: what is measured is the cost of deciding. The identical wrk
command runs against each, interleaved in rounds (the order rotates) so drift on a shared machine hits all
alike. Targets, for each Redis gateway against local:

1. req/s >= 0.9 x local req/s at 50 connections (median of the rounds' ratios);
2. added P50 at one connection (paired per round, median) <= 0.1 ms;
3. Redis calls per request (``tailgate_state_calls_total`` over a run ÷ requests) < 0.05 at 50 connections.

Part 2, accuracy: three ``state: redis`` replicas; an open-loop client offers 2x each key's limit,
round-robin over the replicas, for ``--accuracy-duration`` seconds (default 60): key ``hot`` has
``rpm: 6000`` (decided from leased slices), key ``small`` has ``rpm: 60`` (one Lua call per request).
Within one window of 60 s a key may admit at most its limit, so admitted / limit is the accuracy. Target:
4. 0.98 <= admitted / limit <= 1.02 for both keys (``--skip-accuracy`` leaves part 2 out).

Correctness: no non-2xx from wrk; in part 2 every answer is a 200 or a 429 (never an error). The output
also counts the calls the local fallback decided because Redis answered past ``state.timeout`` (part 1 runs
the default 5 ms; part 2 ``--accuracy-timeout``, default 50 ms: on a shared 2-core machine three replicas'
event loops lag more than 5 ms under 2x load, and every such call is decided locally).
Exit 0 when checks pass and targets are met (``--quick``: targets shown, not enforced); 2 without wrk.

Usage: ``nice -n 10 .venv/bin/python benchmarks/state_overhead.py [--duration S] [--rounds N] [--quick]
[--key tenant|bench] [--proxy-rtt-ms MS] [--skip-accuracy] [--accuracy-duration S] [--json F]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
from rich.console import Console
from rich.table import Table

from bench_sim import CHAT_PATH, Checks, Server, Wrk, _chat_body, check_wrk, finish, machine, print_machine, server
from tailgate.state.server import RedisServer, find_redis_server

HERE = Path(__file__).resolve().parent
console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
TARGET_RPS_RATIO = 0.9
TARGET_ADDED_P50_MS = 0.1
TARGET_CALLS_PER_REQUEST = 0.05
TARGET_ACCURACY = 0.02

_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
wrk.body = '{body}'
"""

_YAML = """\
listen: {{host: 127.0.0.1, port: 0}}
keys:
  - {{id: bench, key: tg-bench-key-000000, rpm: 10000000}}
  - {{id: tenant, key: tg-tenant-key-00000, rpm: 10000000, tpm: 1000000000, max_concurrency: 1000,
      budget: {{tokens_per_day: 100000000000, tokens_per_month: 1000000000000}}}}
  - {{id: hot, key: tg-hot-key-0000000, rpm: 6000}}
  - {{id: small, key: tg-small-key-000000, rpm: 60}}
providers:
  sim: {{base_url: "{upstream}/v1", limits: {{rpm: 10000000}}}}
models:
  bench: {{routes: [{{provider: sim, model: bench}}]}}
routing: {{probes: {{enabled: false}}}}
ledger: {{enabled: false}}
state: {state}
"""


def gateway_argv(config: Path) -> list[str]:
    return [sys.executable, "-m", "tailgate", "serve", "--config", str(config), "--port", "0"]


@contextlib.contextmanager
def gateways(workdir: Path, name: str, upstream: str, state: str, n: int) -> Iterator[list[Server]]:
    config = workdir / f"{name}.yaml"
    config.write_text(_YAML.format(upstream=upstream, state=state))
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(server(f"{name}{i}", gateway_argv(config), workdir / f"{name}{i}.log", pin=False))
            for i in range(n)
        ]


def overhead(
    wrk: Wrk, hops: dict[str, Server], st: argparse.Namespace, checks: Checks, redis_url: str
) -> dict[str, Any]:
    """Each hop (``local`` first, then the Redis ones) under the identical wrk command, interleaved in rounds
    (the order rotates each round); every Redis hop's numbers are ratios to ``local``'s in the same round.
    Redis calls per request: the gateway's ``tailgate_state_calls_total`` over a run ÷ the requests wrk
    completed (every round trip for requests and their background work; the sync loop's 4 per second not).
    Beside it, Lua script calls per request as Redis counts them (``INFO commandstats``: ``evalsha`` + ``eval``,
    every gateway on that Redis and their syncs included), which a tree without that metric can be measured by
    (``PYTHONPATH=OLD/src``)."""
    key = {"tenant": "tg-tenant-key-00000", "bench": "tg-bench-key-000000"}[st.key]
    script = wrk.script(_LUA.format(key=key, body=_chat_body(stream=False)))
    for name, hop in hops.items():  # warm-up: connections, pools, leases
        check_wrk(checks, f"{name} warm-up", wrk.run(hop, script, connections=50, duration_s=2, timeout_s=10))
    names = list(hops)
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    for r in range(st.rounds):
        for conns in (1, 50):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                before, scripts_before = state_calls(hops[name]), script_calls(redis_url)
                res = wrk.run(hops[name], script, connections=conns, duration_s=st.duration, timeout_s=10)
                calls = state_calls(hops[name]) - before
                scripts = script_calls(redis_url) - scripts_before
                check_wrk(checks, f"round {r + 1} c{conns} {name}", res)
                cpu_us = res.server_cpu / res.rps * 1e6 if res.server_cpu and res.rps else float("nan")
                done = res.rps * st.duration
                runs.setdefault((name, conns), []).append(
                    {
                        "rps": res.rps,
                        "p50": res.latency_ms["p50"],
                        "p99": res.latency_ms["p99"],
                        "cpu_us": cpu_us,
                        "redis_calls_per_request": calls / done if done else float("nan"),
                        "redis_scripts_per_request": scripts / done if done else float("nan"),
                    }
                )
    out: dict[str, Any] = {"runs": {f"{k[0]}-c{k[1]}": v for k, v in runs.items()}}
    for name in names[1:]:
        out[name] = {
            "rps_ratio_c50": statistics.median(
                b["rps"] / a["rps"] for a, b in zip(runs[("local", 50)], runs[(name, 50)], strict=True)
            ),
            "rps_ratios_c50": [b["rps"] / a["rps"] for a, b in zip(runs[("local", 50)], runs[(name, 50)], strict=True)],
            "added_p50_ms_c1": statistics.median(
                b["p50"] - a["p50"] for a, b in zip(runs[("local", 1)], runs[(name, 1)], strict=True)
            ),
            "added_p50s_ms_c1": [b["p50"] - a["p50"] for a, b in zip(runs[("local", 1)], runs[(name, 1)], strict=True)],
            "cpu_per_request_ratio_c50": statistics.median(
                b["cpu_us"] / a["cpu_us"] for a, b in zip(runs[("local", 50)], runs[(name, 50)], strict=True)
            ),
            "redis_calls_per_request_c50": statistics.median(x["redis_calls_per_request"] for x in runs[(name, 50)]),
            "redis_calls_per_request_c1": statistics.median(x["redis_calls_per_request"] for x in runs[(name, 1)]),
        }
    return out


def state_calls(srv: Server) -> float:
    """Redis round trips the gateway has made for requests and their background work
    (``tailgate_state_calls_total``; the sync loop's one per tick is not counted)."""
    with urllib.request.urlopen(srv.url + "/metrics", timeout=10) as resp:  # noqa: S310 - loopback
        text = resp.read().decode()
    return sum(float(v) for v in re.findall(r"^tailgate_state_calls_total(?:\{[^}]*\})? (\S+)", text, re.M))


def script_calls(url: str) -> int:
    """Lua script calls the redis-server has run (``INFO commandstats``: ``evalsha`` + ``eval``)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
        return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))
    finally:
        client.close()


@contextlib.contextmanager
def delay_proxy(redis_url: str, rtt_ms: float, log_path: Path) -> Iterator[str]:
    """``tests/delay_proxy.py`` in front of the redis-server, as its own process; yields its redis:// URL."""
    host_port = redis_url.split("//", 1)[1].split("/", 1)[0]
    argv = [sys.executable, str(HERE.parent / "tests" / "delay_proxy.py"), host_port, "--rtt-ms", str(rtt_ms)]
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20.0
        while not (m := re.search(r"listening on 127\.0\.0\.1:(\d+)", log_path.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"delay proxy did not start: {log_path.read_text()[-400:]}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{m.group(1)}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def round_trip_ms(url: str, n: int = 200) -> float:
    """Median wall time of a PING through ``url`` (ms): what the delay proxy adds, as measured."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.ping()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            client.ping()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    finally:
        client.close()


async def _accuracy(replicas: list[Server], duration_s: float) -> dict[str, Any]:
    keys = {"hot": ("tg-hot-key-0000000", 6000), "small": ("tg-small-key-000000", 60)}
    body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    counts: dict[str, Counter[int]] = {k: Counter() for k in keys}
    conn = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def one(name: str, url: str) -> None:
            headers = {"Authorization": f"Bearer {keys[name][0]}"}
            try:
                async with session.post(url + CHAT_PATH, json=body, headers=headers) as resp:
                    await resp.read()
                    counts[name][resp.status] += 1
            except aiohttp.ClientError:
                counts[name][0] += 1

        async def offer(name: str) -> None:
            rate = 2 * keys[name][1] / 60.0  # 2x the limit
            t0 = time.perf_counter()
            tasks, i = [], 0
            while (due := t0 + i / rate) < t0 + duration_s:
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                tasks.append(asyncio.create_task(one(name, replicas[i % len(replicas)].url)))
                i += 1
            await asyncio.gather(*tasks)

        await asyncio.gather(*(offer(k) for k in keys))
    out: dict[str, Any] = {}
    for name, (_, limit) in keys.items():
        offered = sum(counts[name].values())
        expected = min(limit, offered)  # one window: at most the limit
        out[name] = {
            "limit": limit,
            "offered": offered,
            "admitted": counts[name][200],
            "refused": counts[name][429],
            "other": {str(k): v for k, v in counts[name].items() if k not in (200, 429)},
            "accuracy": counts[name][200] / expected,
        }
    return out


async def call_cost(url: str, n: int = 4000) -> dict[str, float]:
    """Part 0: one Lua ``take`` through ``RedisState`` (redis-py asyncio + hiredis), in this process, at 1 and
    16 in flight: wall µs per call (what leased slices save per request)."""
    from tailgate.config.schema import StateConfig
    from tailgate.state.redis import RedisState

    cfg = StateConfig.model_validate({"backend": "redis", "url": url, "namespace": "calls", "timeout": 1.0})
    state = RedisState(cfg, replica="bench")
    await state.start()
    out: dict[str, float] = {}
    try:
        for conc in (1, 16):

            async def worker(k: int, conc: int = conc) -> None:
                for _ in range(n // conc):
                    await state.take(f"k{k % 4}", 1, 1e12, 60.0)

            t0 = time.perf_counter()
            await asyncio.gather(*(worker(k) for k in range(conc)))
            out[f"us_per_take_c{conc}"] = (time.perf_counter() - t0) / n * 1e6
    finally:
        await state.close()
    out |= await pool_cost(url, n)
    return out


async def pool_cost(url: str, n: int = 4000) -> dict[str, float]:
    """Part 0b: the same script straight through redis-py, with its default pool and with the bounded
    ``BlockingConnectionPool`` RedisState uses (redis-py issue #3692: pool-lock contention under load)."""
    import redis.asyncio as aioredis

    from tailgate.state import _lua

    out: dict[str, float] = {}
    pools = {
        "default_pool": aioredis.ConnectionPool.from_url(url),
        "blocking_pool": aioredis.BlockingConnectionPool.from_url(url, max_connections=16, timeout=None),
    }
    for label, pool in pools.items():
        client = aioredis.Redis(connection_pool=pool)
        take = client.register_script(_lua.TAKE)
        await asyncio.gather(*(client.ping() for _ in range(16)))  # warm: 16 connections open
        for conc in (1, 16):

            async def worker(k: int, conc: int = conc, take: Any = take) -> None:
                for _ in range(n // conc):
                    await take(keys=[f"pool:{k % 4}"], args=[1, 1e12, 60])

            t0 = time.perf_counter()
            await asyncio.gather(*(worker(k) for k in range(conc)))
            out[f"us_per_call_{label}_c{conc}"] = (time.perf_counter() - t0) / n * 1e6
        await client.aclose(close_connection_pool=True)
    return out


def fallbacks(servers: list[Server]) -> int:
    """Calls the replicas' fallback decided instead of Redis (``tailgate_state_fallback_total``), summed."""
    total = 0.0
    for srv in servers:
        with urllib.request.urlopen(srv.url + "/metrics", timeout=10) as resp:  # noqa: S310 - loopback
            text = resp.read().decode()
        total += sum(float(v) for v in re.findall(r"^tailgate_state_fallback_total(?:\{[^}]*\})? (\S+)", text, re.M))
    return int(total)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=int, default=5, help="seconds per wrk run (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--accuracy-duration", type=float, default=60.0, help="part 2 seconds (default 60, max 60)")
    ap.add_argument(
        "--accuracy-timeout",
        default="50ms",
        help="state.timeout of the part 2 replicas (default 50ms: three replicas, Redis, the simulator and the "
        "client share this machine; a call past the budget is decided by the fallback, counted in the output)",
    )
    ap.add_argument("--quick", action="store_true", help="2 s runs, 1 round, 35 s accuracy; targets not enforced")
    ap.add_argument("--calls-only", action="store_true", help="only part 0: the cost of one Lua take")
    ap.add_argument(
        "--key",
        choices=("tenant", "bench"),
        default="tenant",
        help="part 1's key: tenant (rpm, tpm, daily and monthly token budgets, max_concurrency; default) or "
        "bench (an rpm only)",
    )
    ap.add_argument(
        "--proxy-rtt-ms",
        type=float,
        default=1.0,
        help="round trip the delay proxy (tests/delay_proxy.py) adds in front of Redis for the third gateway "
        "(default 1; 0 leaves the proxy out)",
    )
    ap.add_argument("--skip-accuracy", action="store_true", help="part 1 only (no 3-replica accuracy run)")
    ap.add_argument("--json", type=Path, default=None)
    st = ap.parse_args(argv)
    if st.quick:
        st.duration, st.rounds, st.accuracy_duration = 2, 1, 35.0
    st.accuracy_duration = min(60.0, st.accuracy_duration)
    wrk_binary = shutil.which("wrk")
    if wrk_binary is None:
        console.print("wrk is not installed (apt-get install wrk)")
        return 2
    if find_redis_server() is None:
        console.print("redis-server is not installed (apt-get install redis-server)")
        return 2
    info = machine(wrk_binary)
    print_machine(console, info)
    checks = Checks()
    result: dict[str, Any] = {"machine": info}
    with tempfile.TemporaryDirectory(prefix="tailgate-state-bench-") as tmp, RedisServer() as redis:
        result["calls"] = asyncio.run(call_cost(redis.url))
        console.print(
            f"part 0: one Lua take via RedisState: {result['calls']['us_per_take_c1']:.0f} µs at 1 in flight, "
            f"{result['calls']['us_per_take_c16']:.0f} µs per call at 16 in flight"
        )
        c = result["calls"]
        console.print(
            "part 0b: the script straight through redis-py, µs per call at 1 / 16 in flight: default pool "
            f"{c['us_per_call_default_pool_c1']:.0f} / {c['us_per_call_default_pool_c16']:.0f}, "
            f"BlockingConnectionPool(16) {c['us_per_call_blocking_pool_c1']:.0f} / "
            f"{c['us_per_call_blocking_pool_c16']:.0f}"
        )
        if st.calls_only:
            return 0
        workdir = Path(tmp)
        wrk = Wrk(wrk_binary, workdir, pin=False)
        sim_cmd = [sys.executable, "-m", "tailgate", "mock", "--preset", "instant", "--port", "0"]
        with server("sim", sim_cmd, workdir / "sim.log", pin=False) as sim:
            redis_state = f'{{backend: redis, url: "{redis.url}", namespace: bench}}'
            with contextlib.ExitStack() as stack:
                hops = {
                    "local": stack.enter_context(gateways(workdir, "local", sim.url, "{backend: local}", 1))[0],
                    "redis": stack.enter_context(gateways(workdir, "redis", sim.url, redis_state, 1))[0],
                }
                result["redis_rtt_ms"] = {"loopback": round_trip_ms(redis.url)}
                if st.proxy_rtt_ms > 0:
                    far = stack.enter_context(delay_proxy(redis.url, st.proxy_rtt_ms, workdir / "proxy.log"))
                    result["redis_rtt_ms"]["proxy"] = round_trip_ms(far)
                    far_state = f'{{backend: redis, url: "{far}", namespace: benchfar}}'
                    hops["redis+proxy"] = stack.enter_context(gateways(workdir, "far", sim.url, far_state, 1))[0]
                console.print(
                    "Redis round trip (PING, median): "
                    + ", ".join(f"{k} {v:.3f} ms" for k, v in result["redis_rtt_ms"].items())
                )
                result["overhead"] = overhead(wrk, hops, st, checks, redis.url)
                result["overhead"]["redis_fallbacks"] = fallbacks([hops[n] for n in hops if n != "local"])
            if not st.skip_accuracy:
                acc_state = (
                    f'{{backend: redis, url: "{redis.url}", namespace: accuracy, timeout: "{st.accuracy_timeout}"}}'
                )
                with gateways(workdir, "fleet", sim.url, acc_state, 3) as fleet:
                    time.sleep(1.0)  # the replicas learn of each other
                    result["accuracy"] = asyncio.run(_accuracy(fleet, st.accuracy_duration))
                    result["accuracy_fallbacks"] = fallbacks(fleet)
            else:
                result["accuracy"], result["accuracy_fallbacks"] = {}, 0
    for name, a in result["accuracy"].items():
        checks.add(f"accuracy {name}: only 200 or 429", not a["other"], str(a["other"]))
    ov, acc = result["overhead"], result["accuracy"]
    hops_r = [n for n in ov if n not in ("runs", "redis_fallbacks")]
    met_rps = all(ov[n]["rps_ratio_c50"] >= TARGET_RPS_RATIO for n in hops_r)
    met_p50 = all(ov[n]["added_p50_ms_c1"] <= TARGET_ADDED_P50_MS for n in hops_r)
    met_acc = all(abs(a["accuracy"] - 1.0) <= TARGET_ACCURACY for a in acc.values())
    table = Table(title=f"state: redis vs state: local (one replica, key {st.key}), and limit accuracy at 3 replicas")
    for col in ("claim", "measured", "target", "verdict"):
        table.add_column(col)
    enforced = not st.quick
    for n in hops_r:
        o = ov[n]
        table.add_row(
            f"{n}: req/s ÷ local (c=50)",
            f"{o['rps_ratio_c50']:.3f} ({', '.join(f'{x:.3f}' for x in o['rps_ratios_c50'])})",
            f">= {TARGET_RPS_RATIO}",
            _v(o["rps_ratio_c50"] >= TARGET_RPS_RATIO, enforced),
        )
        table.add_row(
            f"{n}: added P50 (c=1)",
            f"{o['added_p50_ms_c1']:+.3f} ms ({', '.join(f'{x:+.3f}' for x in o['added_p50s_ms_c1'])})",
            f"<= +{TARGET_ADDED_P50_MS} ms",
            _v(o["added_p50_ms_c1"] <= TARGET_ADDED_P50_MS, enforced),
        )
        table.add_row(
            f"{n}: Redis calls per request (c=50 / c=1)",
            f"{o['redis_calls_per_request_c50']:.3f} / {o['redis_calls_per_request_c1']:.3f}",
            f"< {TARGET_CALLS_PER_REQUEST}",
            _v(o["redis_calls_per_request_c50"] < TARGET_CALLS_PER_REQUEST, enforced),
        )
    for name, a in acc.items():
        table.add_row(
            f"key {name} (rpm {a['limit']}): admitted ÷ limit",
            f"{a['accuracy']:.3f} ({a['admitted']} of {a['offered']} offered)",
            f"1 ± {TARGET_ACCURACY}",
            _v(abs(a["accuracy"] - 1.0) <= TARGET_ACCURACY, enforced),
        )
    console.print(table)
    console.print(
        f"  calls decided by the fallback: overhead (redis replicas, timeout 5ms) {ov['redis_fallbacks']}; "
        f"accuracy (3 replicas, timeout {st.accuracy_timeout}) {result['accuracy_fallbacks']}"
    )
    for n in hops_r:
        console.print(
            f"  gateway CPU per request, {n} ÷ local (c=50, median of rounds): "
            f"{ov[n]['cpu_per_request_ratio_c50']:.3f} (robust to other load on the machine, unlike req/s)"
        )
    for mode, runs in ov["runs"].items():
        rps = ", ".join(f"{r['rps']:.0f}" for r in runs)
        p50 = ", ".join(f"{r['p50']:.3f}" for r in runs)
        cpu = ", ".join(f"{r['cpu_us']:.0f}" for r in runs)
        calls = ", ".join(f"{r['redis_calls_per_request']:.3f}" for r in runs)
        lua = ", ".join(f"{r['redis_scripts_per_request']:.3f}" for r in runs)
        console.print(
            f"  {mode}: req/s {rps}; P50 ms {p50}; gateway CPU µs/request {cpu}; Redis calls/req {calls}; "
            f"Lua scripts/req (INFO) {lua}"
        )
    for c in checks.items:
        if not c["ok"]:
            console.print(f"[red]FAILED[/] {c['name']}: {c['detail']}")
    return finish(console, result, st.json, correct=checks.ok, met=met_rps and met_p50 and met_acc, quick=st.quick)


def _v(ok: bool, enforced: bool) -> str:
    if ok:
        return "[green]met[/]"
    return "[red]missed[/]" if enforced else "[yellow]missed (not enforced)[/]"


if __name__ == "__main__":
    sys.exit(main())
