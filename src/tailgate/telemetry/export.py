"""The OpenTelemetry SDK behind one object: spans through a bounded batching queue, GenAI metrics, both over OTLP.

:class:`Exporter` is built once per process from :class:`~tailgate.telemetry.settings.Settings` (and a Prometheus
registry for its own counters). It imports the SDK and the OTLP exporter the settings name (HTTP/protobuf or
gRPC) when it is built, never before, so a process with telemetry off never loads them.

- **Spans** (:meth:`Exporter.emit`) go to the SDK's ``BatchSpanProcessor``: a bounded queue
  (``max_queue_size``) drained by its own thread every ``schedule_delay`` or once a batch is waiting. ``emit``
  only appends to that queue: a slow or dead collector never slows or fails the caller; when the queue is full
  the oldest span is dropped. Spans are queued finished, as the caller's plain records (no live ``Span``, no
  ``ReadableSpan``, locks or context switches per request), and the official OTLP exporter sends each batch
  encoded by otlp_wire.py from those records: the request the SDK's encoder would build, at a fraction of its
  cost on the export thread (which holds the GIL the event loop needs).
- **Dropped spans are counted** in Prometheus (``tailgate_otel_spans_dropped_total{reason}``), not logged one
  by one (the SDK's warning per dropped span is silenced): ``queue_full`` (the processor dropped one: counted where
  the SDK counts it, its processor-metrics hook), ``export_failed`` (an export the collector refused or never
  answered within ``export_timeout``, retries included), ``shutdown`` (emitted after the stop). Exported ones:
  ``tailgate_otel_spans_exported_total``.
- **Metrics**: the GenAI conventions' histograms (semconv.py) with their recommended buckets, aggregated in place
  (aggregates.py: a bisect and a few increments a point) and handed to the SDK's OTLP metric exporter every
  ``metric_interval`` (its own thread).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter

from tailgate.telemetry import semconv
from tailgate.telemetry.otlp_wire import SpanEncoder
from tailgate.telemetry.settings import Settings
from tailgate.telemetry.spans import AttrValue, SpanRecord

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from tailgate.telemetry.aggregates import Histogram, MetricPump

__all__ = ["Exporter"]

log = logging.getLogger("tailgate.telemetry")

_QUEUE_LOGGER = "opentelemetry.sdk._shared_internal"
"""The SDK's batching processor's logger (its "Queue full, dropping Span." warning)."""


class _Queued:
    """A finished span as the SDK's batching processor queues it: the processor reads only ``context`` (sampled:
    ours are, the sampling was decided when the request began); the exporter (``_span_exporter``) encodes
    ``record``. No ``ReadableSpan``, ``SpanContext`` or ``Status`` is built per span."""

    __slots__ = ("record",)

    class context:  # the attribute the processor reads
        class trace_flags:
            sampled = True

    def __init__(self, record: SpanRecord) -> None:
        self.record = record


class _Counts:
    """The Prometheus side of the export (the registry's ``tailgate_otel_*`` series)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped = Counter(
            "tailgate_otel_spans_dropped_total",
            "Spans never delivered to the OTLP collector, by reason: queue_full (the bounded export queue was "
            "full), export_failed (the collector refused or did not answer in time), shutdown.",
            ["reason"],
            registry=registry,
        )
        self.exported = Counter(
            "tailgate_otel_spans_exported_total",
            "Spans the OTLP collector accepted.",
            registry=registry,
        )
        for reason in ("queue_full", "export_failed", "shutdown"):
            self.dropped.labels(reason)


class _ProcessorCounts:
    """The batching processor's own metrics hook (its ``drop_items`` / ``finish_items`` / queue size), counted in
    Prometheus: the SDK calls ``drop_items`` exactly where its queue drops a span."""

    def __init__(self, counts: _Counts) -> None:
        self._full = counts.dropped.labels("queue_full")
        self._shutdown = counts.dropped.labels("shutdown")
        self.queue_size: Callable[[], int] = lambda: 0

    def register_queue_size(self, get_queue_size: Callable[[], int]) -> None:
        self.queue_size = get_queue_size

    def drop_items(self, count: int, error_type: str = "queue_full") -> None:
        (self._shutdown if error_type == "already_shutdown" else self._full).inc(count)

    def finish_items(self, count: int) -> None:
        pass  # handed to the exporter: counted there (exported, or export_failed)


def _counted(inner: SpanExporter, counts: _Counts) -> SpanExporter:
    """``inner`` with every export's spans counted: accepted, or dropped as ``export_failed``."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Counted(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            try:
                result = inner.export(spans)
            except Exception:  # the exporter's own bug: the spans are lost all the same
                log.exception("OTLP span export failed")
                result = SpanExportResult.FAILURE
            if result is SpanExportResult.SUCCESS:
                counts.exported.inc(len(spans))
            else:
                counts.dropped.labels("export_failed").inc(len(spans))
            return result

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return inner.force_flush(timeout_millis)

    return Counted()


def _span_exporter(settings: Settings, endpoint: str, encoder: SpanEncoder) -> SpanExporter:
    """The official OTLP span exporter the settings name, the batch encoded by ``encoder`` (otlp_wire.py) from the
    queued records instead of the SDK's encoder: the same request (tests/telemetry/test_otlp_wire.py), the
    exporter's own transport, retries and timeouts. What this relies on (the HTTP exporter's ``_client`` and
    ``_shutdown``, the gRPC one's ``_translate_data``) is exercised by test_otel_export.py and test_otel_grpc.py:
    they fail if an SDK upgrade moves it."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    headers = dict(settings.headers) or None
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        parse = ExportTraceServiceRequest.FromString

        class Grpc(GrpcSpans):
            def _translate_data(self, data: Sequence[Any]) -> ExportTraceServiceRequest:
                request: ExportTraceServiceRequest = parse(encoder.request(q.record for q in data))
                return request  # parsed in C (upb): the message the stub serialises and sends

        return Grpc(
            endpoint=endpoint,
            insecure=endpoint.startswith("http://"),
            headers=headers,
            timeout=settings.export_timeout_s,
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

    class Http(HttpSpans):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            if self._shutdown:
                return SpanExportResult.FAILURE
            data = encoder.request(q.record for q in spans)
            limit = getattr(self, "_max_request_size", None)
            if limit is not None and len(data) > limit:
                log.warning("OTLP span batch of %d bytes over the exporter's limit (%d): dropped", len(data), limit)
                return SpanExportResult.FAILURE
            ok = self._client.export(data).success
            return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    return Http(endpoint=endpoint, headers=headers, timeout=settings.export_timeout_s)


def _metric_exporter(settings: Settings, endpoint: str) -> Any:
    headers = dict(settings.headers) or None
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        return GrpcMetrics(
            endpoint=endpoint,
            insecure=endpoint.startswith("http://"),
            headers=headers,
            timeout=settings.export_timeout_s,
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics

    return HttpMetrics(endpoint=endpoint, headers=headers, timeout=settings.export_timeout_s)


class Exporter:
    """Spans and GenAI metrics to an OTLP collector (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry,
        *,
        scope: str = "tailgate",
        version: str | None = None,
        resource: Mapping[str, str] | None = None,
    ) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from tailgate import __version__

        self.settings = settings
        self.counts = _Counts(registry)
        self._resource = Resource.create(
            {"service.name": settings.service_name, "service.version": __version__, **(resource or {})}
        )
        self._scope = InstrumentationScope(scope, version or __version__)
        self._processor: Any = None
        self._meters: MetricPump | None = None
        self.queue_size: Callable[[], int] = lambda: 0
        if settings.traces_endpoint is not None:
            self._start_spans(settings, settings.traces_endpoint)
        self.duration: Histogram | None = None
        self.tokens: Histogram | None = None
        self.ttft: Histogram | None = None
        self.tpot: Histogram | None = None
        if settings.metrics_endpoint is not None:
            self._start_metrics(settings, settings.metrics_endpoint)

    @property
    def traces(self) -> bool:
        return self._processor is not None

    @property
    def metrics(self) -> bool:
        return self._meters is not None

    def _start_spans(self, settings: Settings, endpoint: str) -> None:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import TraceState

        def trace_state(header: str) -> str:  # as the SDK's encoder writes a span's parsed TraceState
            return ",".join(f"{k}={v}" for k, v in TraceState.from_header([header]).items())

        encoder = SpanEncoder(
            dict(self._resource.attributes),
            self._scope.name,
            self._scope.version,
            resource_schema_url=self._resource.schema_url or "",
            scope_schema_url=self._scope.schema_url or "",
            trace_state=trace_state,
            unique_keys=(semconv.REQUEST_ID, semconv.RESPONSE_ID, semconv.INPUT_MESSAGES, semconv.OUTPUT_MESSAGES),
        )
        processor = BatchSpanProcessor(
            _counted(_span_exporter(settings, endpoint, encoder), self.counts),
            max_queue_size=settings.max_queue_size,
            schedule_delay_millis=settings.schedule_delay_s * 1000.0,
            max_export_batch_size=settings.max_export_batch_size,
            export_timeout_millis=settings.export_timeout_s * 1000.0,
        )
        # The processor counts its drops through its metrics hook (``drop_items``); ours counts them in Prometheus.
        # tests/telemetry/test_otel_export.py fails if an SDK upgrade moves the hook. Its warning per dropped span
        # ("Queue full, dropping Span.": a log record built for each, ~40 µs, on the caller's thread while a
        # collector is down) says nothing the counter does not: that logger keeps its errors only.
        logging.getLogger(_QUEUE_LOGGER).setLevel(logging.ERROR)
        inner = getattr(processor, "_batch_processor", None)
        if inner is not None and hasattr(inner, "_metrics"):
            hook = _ProcessorCounts(self.counts)
            queue = getattr(inner, "_queue", None)
            if queue is not None:
                hook.register_queue_size(lambda: len(queue))
            inner._metrics = hook
            self.queue_size = hook.queue_size
        self._processor = processor

    def _start_metrics(self, settings: Settings, endpoint: str) -> None:
        from tailgate.telemetry.aggregates import Aggregates, MetricPump

        # Aggregated here (a bisect and a few increments a point), exported by the SDK's OTLP metric exporter:
        # aggregates.py. The names, units, buckets and attributes are the conventions'.
        agg = Aggregates(self._resource, self._scope)
        self.duration = agg.histogram(
            semconv.OPERATION_DURATION, "s", "GenAI operation duration.", semconv.DURATION_BUCKETS
        )
        self.tokens = agg.histogram(
            semconv.TOKEN_USAGE, "{token}", "Number of input and output tokens used.", semconv.TOKEN_BUCKETS
        )
        self.ttft = agg.histogram(
            semconv.SERVER_TTFT, "s", "Time to generate first token for successful responses.", semconv.TTFT_BUCKETS
        )
        self.tpot = agg.histogram(
            semconv.SERVER_TPOT,
            "s",
            "Time per output token generated after the first token for successful responses.",
            semconv.TPOT_BUCKETS,
        )
        self._meters = MetricPump(
            agg, _metric_exporter(settings, endpoint), settings.metric_interval_s, settings.export_timeout_s
        )

    # -- spans ----------------------------------------------------------------------------------------------------

    def emit(self, spans: Sequence[SpanRecord]) -> None:
        """Queue finished spans for export (a full queue drops the oldest, counted); never blocks."""
        processor = self._processor
        if processor is None:
            return
        for s in spans:
            processor.on_end(_Queued(s))

    # -- metrics --------------------------------------------------------------------------------------------------

    def record(self, histogram: Histogram | None, value: float, attributes: Mapping[str, AttrValue]) -> None:
        """One point on one of the GenAI histograms (``duration``, ``tokens``, ``ttft``, ``tpot``)."""
        if histogram is not None:
            histogram.record(value, attributes)

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def force_flush(self, timeout_s: float = 5.0) -> None:
        """Export what waits now (blocking: call it in a thread)."""
        if self._processor is not None:
            self._processor.force_flush(int(timeout_s * 1000))
        if self._meters is not None:
            self._meters.export()

    def shutdown(self) -> None:
        """Export what waits and stop the export threads (blocking, bounded by ``export_timeout`` per signal: call
        it in a thread, bounded by the caller's stop step)."""
        if self._processor is not None:
            self._processor.shutdown()
        if self._meters is not None:
            self._meters.shutdown(self.settings.export_timeout_s)
