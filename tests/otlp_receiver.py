"""A real OTLP/HTTP receiver for tests: an aiohttp server on 127.0.0.1 port 0 that decodes what it is sent with the
official ``opentelemetry-proto`` messages (``ExportTraceServiceRequest``, ``ExportMetricsServiceRequest``) and keeps
the spans and metric points as plain values. ``mode`` plants a collector's failure: ``refuse`` answers 503,
``hang`` never answers (until stopped)."""

from __future__ import annotations

import asyncio
import gzip
import socket
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

KIND = {Span.SPAN_KIND_SERVER: "server", Span.SPAN_KIND_CLIENT: "client", Span.SPAN_KIND_INTERNAL: "internal"}


def value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return tuple(value(x) for x in v.array_value.values)
    return getattr(v, which) if which is not None else None


def attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


@dataclass
class GotSpan:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int
    resource: dict[str, Any]
    scope: str


@dataclass
class GotPoint:
    metric: str
    unit: str
    attributes: dict[str, Any]
    count: int
    sum: float


@dataclass
class Receiver:
    mode: Literal["ok", "refuse", "hang"] = "ok"
    spans: list[GotSpan] = field(default_factory=list)
    points: dict[str, list[GotPoint]] = field(default_factory=dict)
    """The latest export's points per metric (cumulative: the latest is the total)."""
    posts: int = 0
    posted: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by the first export received (whatever the mode answers)."""
    _runner: web.AppRunner | None = None
    hung: list[asyncio.Future[None]] = field(default_factory=list)
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _body(self, request: web.Request) -> bytes:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return body

    async def _stall(self) -> web.Response | None:
        self.posts += 1
        self.posted.set()
        if self.mode == "refuse":
            return web.Response(status=503)
        if self.mode == "hang":
            waiter = asyncio.get_running_loop().create_future()
            self.hung.append(waiter)
            await waiter
            return web.Response(status=503)
        return None

    async def traces(self, request: web.Request) -> web.Response:
        if (stalled := await self._stall()) is not None:
            return stalled
        req = ExportTraceServiceRequest.FromString(await self._body(request))
        for rs in req.resource_spans:
            resource = attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        GotSpan(
                            name=s.name,
                            kind=KIND.get(s.kind, str(s.kind)),
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            attributes=attrs(s.attributes),
                            status_code=s.status.code,
                            resource=resource,
                            scope=ss.scope.name,
                        )
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    async def metrics(self, request: web.Request) -> web.Response:
        if (stalled := await self._stall()) is not None:
            return stalled
        req = ExportMetricsServiceRequest.FromString(await self._body(request))
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.WhichOneof("data") != "histogram":
                        continue
                    self.points[m.name] = [
                        GotPoint(m.name, m.unit, attrs(p.attributes), p.count, p.sum) for p in m.histogram.data_points
                    ]
        return web.Response(
            body=ExportMetricsServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    async def start(self) -> Receiver:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self.traces)
        app.router.add_post("/v1/metrics", self.metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return self

    async def stop(self) -> None:
        for waiter in self.hung:
            if not waiter.done():
                waiter.set_result(None)
        if self._runner is not None:
            await self._runner.cleanup()

    def tree(self, request_id: str) -> tuple[GotSpan, list[GotSpan]]:
        """The request's server span and its client children (in start order)."""
        server = [s for s in self.spans if s.kind == "server" and s.attributes.get("tailgate.request_id") == request_id]
        assert len(server) == 1, f"{len(server)} server spans for {request_id}"
        kids = [s for s in self.spans if s.parent_id == server[0].span_id and s.trace_id == server[0].trace_id]
        return server[0], sorted(kids, key=lambda s: s.start_ns)
