"""tailgate's own OTLP span encoding (telemetry/otlp_wire.py) against the official SDK's: for the same spans the
two ``ExportTraceServiceRequest`` messages, decoded with the official ``opentelemetry-proto`` messages, are equal —
every kind, parent local / remote / none, tracestate, error status with and without a message, every attribute
value type (str with non-ASCII, bool, int small / large / negative, float, string arrays), ids at their extremes."""

from __future__ import annotations

import random

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace.status import Status, StatusCode

from tailgate.telemetry.otlp_wire import SpanEncoder
from tailgate.telemetry.spans import AttrValue, SpanRecord

_KINDS = {
    "server": trace_api.SpanKind.SERVER,
    "client": trace_api.SpanKind.CLIENT,
    "internal": trace_api.SpanKind.INTERNAL,
}


def _readable(s: SpanRecord, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    """The span as the SDK's own objects (what the exporter was handed before otlp_wire.py)."""
    flags = trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED)
    state = trace_api.TraceState.from_header([s.tracestate]) if s.tracestate else None
    ctx = trace_api.SpanContext
    parent = (
        ctx(s.trace_id, s.parent_id, is_remote=s.remote_parent, trace_flags=flags, trace_state=state)
        if s.parent_id is not None
        else None
    )
    return ReadableSpan(
        s.name,
        context=ctx(s.trace_id, s.span_id, is_remote=False, trace_flags=flags, trace_state=state),
        parent=parent,
        resource=resource,
        attributes=s.attributes,
        kind=_KINDS[s.kind],
        status=Status(StatusCode.UNSET) if s.error is None else Status(StatusCode.ERROR, s.error),
        start_time=s.start_ns,
        end_time=s.end_ns,
        instrumentation_scope=scope,
    )


def _random_spans(rng: random.Random, n: int) -> list[SpanRecord]:
    values: list[AttrValue] = [
        "chat",
        "",
        "gpt-4o-mini",
        "naïve — 模型 ✓",
        "x" * 300,
        True,
        False,
        0,
        1,
        127,
        128,
        2**40,
        2**63 - 1,
        -1,
        -(2**63),
        0.0,
        0.25,
        -3.5e-7,
        1e300,
        ("stop",),
        ("stop", "length"),
        (),
    ]
    out = []
    for _ in range(n):
        attrs: dict[str, AttrValue] = {
            f"gen_ai.k{j}.{'é' * (j % 2)}": rng.choice(values) for j in range(rng.randint(0, 30))
        }
        parent = rng.choice([None, rng.getrandbits(64) or 1, 1, 2**64 - 1])
        start = rng.randint(1, 2**63)
        out.append(
            SpanRecord(
                name=rng.choice(["chat fast", "chat gpt-4o-mini", "", "模型 " * 50]),
                kind=rng.choice(["server", "client", "internal"]),
                trace_id=rng.choice([1, 2**128 - 1, rng.getrandbits(128) or 1]),
                span_id=rng.choice([1, 2**64 - 1, rng.getrandbits(64) or 1]),
                parent_id=parent,
                start_ns=start,
                end_ns=start + rng.randint(0, 10**10),
                attributes=attrs,
                error=rng.choice([None, None, "http_5xx", ""]),
                remote_parent=parent is not None and rng.random() < 0.5,
                tracestate=rng.choice([None, None, "vendor=abc,other=1", "bad entry,ok=1", ""]),
            )
        )
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_request_equals_the_sdks(seed: int) -> None:
    """Decoded with opentelemetry-proto, our bytes and the SDK's encoder's are the same message."""
    rng = random.Random(seed)
    resource = Resource.create({"service.name": "tailgate-gateway", "service.version": "9.9.9", "extra": "é"})
    scope = InstrumentationScope("tailgate", "9.9.9")
    encoder = SpanEncoder(
        dict(resource.attributes),
        scope.name,
        scope.version,
        resource_schema_url=resource.schema_url,
        trace_state=lambda h: ",".join(f"{k}={v}" for k, v in trace_api.TraceState.from_header([h]).items()),
        unique_keys=("gen_ai.k3.é",),
    )
    spans = _random_spans(rng, rng.randint(1, 40))
    sdk = ExportTraceServiceRequest.FromString(
        encode_spans([_readable(s, resource, scope) for s in spans]).SerializeToString()
    )
    for _ in range(2):  # the second time from the encoder's cache of fields (True and 1 are not one field)
        ours = ExportTraceServiceRequest.FromString(encoder.request(spans))
        assert len(ours.resource_spans[0].scope_spans[0].spans) == len(spans)
        assert ours == sdk
