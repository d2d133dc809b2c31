"""``telemetry.protocol: grpc``: the gateway's spans and GenAI metrics reach a real OTLP/gRPC receiver (a grpcio server
on 127.0.0.1 port 0 serving the official opentelemetry-proto TraceService and MetricsService)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from concurrent import futures
from typing import Any

import aiohttp
import grpc  # type: ignore[import-untyped]  # grpcio ships no type information
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from conftest import GatewayHandle, SimFactory
from otlp_receiver import attrs

GwFactory = Callable[..., Awaitable[GatewayHandle]]


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    def Export(self, request: Any, context: Any) -> Any:  # the generated service's name
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                self.spans.extend({"name": s.name, "trace": s.trace_id.hex(), **attrs(s.attributes)} for s in ss.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def Export(self, request: Any, context: Any) -> Any:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                self.names.update(m.name for m in sm.metrics)
        return metrics_service_pb2.ExportMetricsServiceResponse()


@pytest.fixture
def grpc_receiver() -> Iterator[tuple[str, _Traces, _Metrics]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    traces, metrics = _Traces(), _Metrics()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(traces, server)  # type: ignore[no-untyped-call]
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(metrics, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"http://127.0.0.1:{port}", traces, metrics
    server.stop(grace=None)


async def test_grpc_export(grpc_receiver: tuple[str, _Traces, _Metrics], sim: SimFactory, gateway: GwFactory) -> None:
    """With ``protocol: grpc`` one request's server and client spans and the GenAI histograms arrive over gRPC."""
    endpoint, traces, metrics = grpc_receiver
    p = await sim("instant", models=("up",))
    gw = await gateway(
        {
            "providers": {"p": {"base_url": p.url, "api_keys": ["sk-p-0123456789"]}},
            "models": {"m": {"routes": [{"provider": "p", "model": "up"}]}},
            "routing": {"probes": {"enabled": False}},
            "telemetry": {"endpoint": endpoint, "protocol": "grpc", "schedule_delay": "50ms"},
        }
    )
    async with aiohttp.ClientSession() as session:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        async with session.post(f"{gw.url}/chat/completions", json=body, headers={"x-request-id": "grpc-1"}) as r:
            assert r.status == 200
    await gw.gateway.books.drain()
    assert gw.gateway.otel is not None
    await asyncio.to_thread(gw.gateway.otel.force_flush)
    (server,) = [s for s in traces.spans if s.get("tailgate.request_id") == "grpc-1"]
    mine = [s for s in traces.spans if s["trace"] == server["trace"]]
    assert sorted(s["name"] for s in mine) == ["chat m", "chat up"]
    assert {s["gen_ai.operation.name"] for s in mine} == {"chat"}
    assert {"gen_ai.client.operation.duration", "gen_ai.client.token.usage"} <= metrics.names
