"""The OTLP collector down under load (issue 43): requests fail? latency moves? spans lost counted?

One process: a simulated provider, a gateway and a closed-loop load of ``--clients`` connections, for
``--seconds`` per phase, four phases in turn, each on a fresh gateway over the same simulator:

- ``off``: no telemetry (the baseline);
- ``up``: telemetry to a live OTLP/HTTP receiver (answers every export);
- ``hang``: the collector accepts the connection and never answers (each export runs out its ``export_timeout``);
- ``refused``: the collector's port is closed (every export's connection refused).

    .venv/bin/python benchmarks/otel_collector_down.py [--quick] [--seconds 30] [--clients 20]

Telemetry phases export with ``export_timeout: 2s`` (``--quick``: 500 ms), a queue of 256 spans, batches of 64.
Prints per phase: requests, failed requests (anything but a complete 200), P50 / P99 latency (ms), requests/s, this
process's CPU per request (µs: load, gateway, simulator and the exporter's threads together; the phases differ by
the telemetry), and the spans dropped / exported (``tailgate_otel_spans_*``), then each phase's P50, P99 and CPU
per request ÷ the ``off`` phase's. Exits 1 when a request failed or a down phase counted no dropped span. The
ratios are this machine's: the load, the gateway and the simulator share one event loop (what the exporter's
threads take from it is what the ratios show). ``--quick``: 1 s per phase, a correctness smoke only.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.gateway.app import Gateway
from tailgate.gateway.http.listener import runner_kwargs
from tailgate.gateway.http.listener import site as limits_site
from tailgate.sim.presets import preset
from tailgate.sim.provider import ProviderSpec, SimProvider

PHASES = ("off", "up", "hang", "refused")


class Collector:
    """A bare OTLP/HTTP endpoint: answers 200 with an empty protobuf body, or never answers (``hang``)."""

    def __init__(self, hang: bool) -> None:
        self.hang = hang
        self.posts = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _post(self, request: web.Request) -> web.Response:
        self.posts += 1
        await request.read()
        if self.hang:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def start(self) -> Collector:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._post)
        app.router.add_post("/v1/metrics", self._post)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        await web.SockSite(self._runner, sock).start()
        return self

    async def stop(self) -> None:
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        if self._runner is not None:
            await self._runner.cleanup()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def _phase(
    name: str, sim_url: str, seconds: float, clients: int, db: Path, export_timeout: str = "2s"
) -> dict[str, Any]:
    collector: Collector | None = None
    telemetry: dict[str, Any] | None = None
    if name in ("up", "hang"):
        collector = await Collector(hang=name == "hang").start()
        telemetry = {"endpoint": collector.url}
    elif name == "refused":
        telemetry = {"endpoint": _closed_port()}
    if telemetry is not None:
        # a queue of 256 spans (the default holds 2048): a short --quick phase fills it too
        telemetry.update(
            {
                "export_timeout": export_timeout,
                "metric_interval": "5s",
                "max_queue_size": 256,
                "max_export_batch_size": 64,
            }
        )
    data: dict[str, Any] = {
        "providers": {"p": {"base_url": sim_url, "api_keys": ["sk-bench-0123456789"]}},
        "models": {"m": {"routes": [{"provider": "p", "model": "up"}]}},
        "routing": {"probes": {"enabled": False}},
        "ledger": {"path": str(db / f"{name}.db")},
    }
    if telemetry is not None:
        data["telemetry"] = telemetry
    cfg = validate_data(data, GatewayConfig, f"otel-{name}")
    gw = Gateway(cfg, resolve_providers(cfg))
    await gw.start()
    runner = web.AppRunner(gw.app(), handler_cancellation=True, access_log=None, **runner_kwargs(cfg.server))
    await runner.setup()
    site = limits_site(runner, "127.0.0.1", 0, cfg.server)
    await site.start()
    url = f"http://127.0.0.1:{site.port}/v1/chat/completions"
    latencies: list[float] = []
    failed = 0
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds

    async def client(session: aiohttp.ClientSession, n: int) -> None:
        nonlocal failed
        i = 0
        while loop.time() < until:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
            body["stream"] = (n + i) % 2 == 0
            t0 = time.perf_counter()
            try:
                async with session.post(url, json=body) as r:
                    await r.read()
                    ok = r.status == 200
            except aiohttp.ClientError:
                ok = False
            latencies.append((time.perf_counter() - t0) * 1000.0)
            failed += not ok
            i += 1

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0, cpu0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(client(session, n) for n in range(clients)))
        wall = time.perf_counter() - t0
        await gw.books.drain()
        if gw.otel is not None and name == "up":  # the spans of this phase's requests encoded and sent: their CPU too
            await asyncio.to_thread(gw.otel.force_flush)
        cpu = time.process_time() - cpu0
    await runner.cleanup()
    await gw.close()  # the last spans exported or counted lost (bounded: export_timeout + 1 s)
    reg = gw.metrics.registry
    dropped = sum(
        reg.get_sample_value("tailgate_otel_spans_dropped_total", {"reason": r}) or 0.0
        for r in ("queue_full", "export_failed", "shutdown")
    )
    exported = reg.get_sample_value("tailgate_otel_spans_exported_total") or 0.0
    if collector is not None:
        await collector.stop()
    q = statistics.quantiles(latencies, n=100)
    return {
        "phase": name,
        "requests": len(latencies),
        "failed": failed,
        "p50": q[49],
        "p99": q[98],
        "rps": len(latencies) / wall,
        "cpu_us": cpu / max(1, len(latencies)) * 1e6,
        "dropped": dropped,
        "exported": exported,
    }


async def run(seconds: float, clients: int, export_timeout: str) -> list[dict[str, Any]]:
    sim = SimProvider(ProviderSpec(name="instant", params=preset("instant"), preset="instant", port=0, models=("up",)))
    await sim.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return [await _phase(p, sim.url, seconds, clients, Path(tmp), export_timeout) for p in PHASES]
    finally:
        await sim.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--clients", type=int, default=20)
    args = ap.parse_args(argv)
    seconds = args.seconds or (1.0 if args.quick else 30.0)
    rows = asyncio.run(run(seconds, args.clients, "500ms" if args.quick else "2s"))
    head = ("requests", "failed", "p50 ms", "p99 ms", "req/s", "CPU µs", "dropped", "exported")
    print(f"{'phase':8} " + " ".join(f"{h:>8}" for h in head))
    for r in rows:
        print(
            f"{r['phase']:8} {r['requests']:8d} {r['failed']:8d} {r['p50']:8.2f} {r['p99']:8.2f} {r['rps']:8.1f} "
            f"{r['cpu_us']:8.0f} "
            f"{r['dropped']:8.0f} {r['exported']:8.0f}"
        )
    base = rows[0]
    for r in rows[1:]:
        print(
            f"{r['phase']} ÷ off: p50 {r['p50'] / base['p50']:.2f}, p99 {r['p99'] / base['p99']:.2f}, "
            f"CPU per request {r['cpu_us'] / base['cpu_us']:.2f} ({r['cpu_us'] - base['cpu_us']:+.0f} µs)"
        )
    bad = [r["phase"] for r in rows if r["failed"]]
    silent = [r["phase"] for r in rows if r["phase"] in ("hang", "refused") and r["dropped"] == 0]
    if bad or silent:
        print(f"FAILED: failed requests in {bad}; no dropped span counted in {silent}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
