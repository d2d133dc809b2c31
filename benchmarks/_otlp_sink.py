"""A sink collector for the benchmarks: an OTLP/HTTP receiver that accepts every export and discards it.

``POST /v1/traces``, ``/v1/metrics``, ``/v1/logs`` answer 200 with an empty protobuf body (an empty
``Export*ServiceResponse``: all accepted), as a collector does, so the gateway's exporter does its whole
work (encode, send, read the answer) and nothing of the collector's own work is counted against the gateway:
the sink is a process of its own. ``GET /sink/stats``: requests and bytes received per path, and with
``--decode`` the spans and metric data points in them (decoded with the official ``opentelemetry-proto``
messages; this costs the sink, not the gateway).

Usage: ``python benchmarks/_otlp_sink.py [PORT] [--decode]``; prints ``listening on http://127.0.0.1:PORT/v1``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections import Counter

import uvloop
from aiohttp import web

_STATS: dict[str, Counter[str]] = {"requests": Counter(), "bytes": Counter(), "items": Counter()}


def _count(path: str, body: bytes) -> int:
    """Spans (traces) or data points (metrics) in one export, decoded with the OTLP protobuf messages."""
    if path == "/v1/traces":
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        traces = ExportTraceServiceRequest.FromString(body)
        return sum(len(s.spans) for r in traces.resource_spans for s in r.scope_spans)
    if path == "/v1/metrics":
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        metrics = ExportMetricsServiceRequest.FromString(body)
        points = 0
        for r in metrics.resource_metrics:
            for s in r.scope_metrics:
                for m in s.metrics:
                    kind = m.WhichOneof("data")
                    points += len(getattr(m, kind).data_points) if kind else 0
        return points
    return 0


def make_app(decode: bool) -> web.Application:
    async def export(request: web.Request) -> web.Response:
        body = await request.read()
        _STATS["requests"][request.path] += 1
        _STATS["bytes"][request.path] += len(body)
        if decode:
            _STATS["items"][request.path] += _count(request.path, body)
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def stats(_: web.Request) -> web.Response:
        return web.Response(text=json.dumps({k: dict(v) for k, v in _STATS.items()}), content_type="application/json")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    for path in ("/v1/traces", "/v1/metrics", "/v1/logs"):
        app.router.add_post(path, export)
    app.router.add_get("/sink/stats", stats)
    return app


async def serve(port: int, decode: bool) -> None:
    runner = web.AppRunner(make_app(decode), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=True)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"listening on http://127.0.0.1:{bound}/v1", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("port", type=int, nargs="?", default=0)
    ap.add_argument("--decode", action="store_true", help="count the spans and data points received")
    args = ap.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve(args.port, args.decode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
