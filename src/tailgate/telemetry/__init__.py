"""OpenTelemetry for tailgate's faces: traces and GenAI metrics over OTLP (docs/observability.md).

- ``settings``: the config section and the standard ``OTEL_*`` variables → :class:`Settings` (or off), pure;
- ``spans``: spans as plain data (:class:`SpanRecord`), W3C ``traceparent`` read and written, ids — no SDK;
- ``semconv``: the GenAI semantic conventions' names, units and buckets, and tailgate's own attributes;
- ``content``: message content for a span, only when asked: cut, then redacted by rule;
- ``export``: the OpenTelemetry SDK behind one :class:`Exporter` (a bounded batching queue for spans, the GenAI
  histograms, OTLP over HTTP/protobuf or gRPC, dropped spans counted in Prometheus); imports the SDK only when
  built.

A face records what happened as it always does and, after the request, describes it here; with telemetry off
nothing in this package runs (its caller holds None).
"""

from tailgate.telemetry.settings import Settings, SettingsError, resolve
from tailgate.telemetry.spans import Ids, SpanRecord, TraceParent, parse_traceparent, traceparent

__all__ = [
    "Ids",
    "Settings",
    "SettingsError",
    "SpanRecord",
    "TraceParent",
    "parse_traceparent",
    "resolve",
    "traceparent",
]
