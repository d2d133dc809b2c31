"""The OpenTelemetry SDK behind one object: spans through a bounded batching queue, GenAI metrics, both over OTLP.

:class:`Exporter` is built once per process from :class:`~tailgate.telemetry.settings.Settings` (and a Prometheus
registry for its own counters). It imports the SDK and the OTLP exporter the settings name (HTTP/protobuf or
gRPC) when it is built, never before, so a process with telemetry off never loads them.

- **Spans** (:meth:`Exporter.emit`) go to the SDK's ``BatchSpanProcessor``: a bounded queue
  (``max_queue_size``) drained by its own thread every ``schedule_delay`` or once a batch is waiting. ``emit``
  only appends to that queue: a slow or dead collector never slows or fails the caller; when the queue is full
  the oldest span is dropped. Spans are handed over finished (``ReadableSpan``, the type the SDK's exporters
  take), built from what the caller recorded: the caller's ids and times, no live ``Span`` objects, locks or
  context switches per request.
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


def _span_exporter(settings: Settings, endpoint: str) -> SpanExporter:
    headers = dict(settings.headers) or None
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        return GrpcSpans(
            endpoint=endpoint,
            insecure=endpoint.startswith("http://"),
            headers=headers,
            timeout=settings.export_timeout_s,
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

    return HttpSpans(endpoint=endpoint, headers=headers, timeout=settings.export_timeout_s)


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
        from opentelemetry import trace as trace_api
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace.status import Status, StatusCode

        from tailgate import __version__

        self.settings = settings
        self.counts = _Counts(registry)
        self._resource = Resource.create(
            {"service.name": settings.service_name, "service.version": __version__, **(resource or {})}
        )
        self._scope = InstrumentationScope(scope, version or __version__)
        self._readable = ReadableSpan
        self._context = trace_api.SpanContext
        self._flags = trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED)
        self._state = trace_api.TraceState
        self._kinds = {
            "server": trace_api.SpanKind.SERVER,
            "client": trace_api.SpanKind.CLIENT,
            "internal": trace_api.SpanKind.INTERNAL,
        }
        self._ok = Status(StatusCode.UNSET)
        self._status = Status
        self._error = StatusCode.ERROR
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

        processor = BatchSpanProcessor(
            _counted(_span_exporter(settings, endpoint), self.counts),
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
        context, flags, scope, resource = self._context, self._flags, self._scope, self._resource
        for s in spans:
            state = self._state.from_header([s.tracestate]) if s.tracestate else None
            parent = (
                context(s.trace_id, s.parent_id, is_remote=s.remote_parent, trace_flags=flags, trace_state=state)
                if s.parent_id is not None
                else None
            )
            processor.on_end(
                self._readable(
                    s.name,
                    context=context(s.trace_id, s.span_id, is_remote=False, trace_flags=flags, trace_state=state),
                    parent=parent,
                    resource=resource,
                    attributes=s.attributes,
                    kind=self._kinds[s.kind],
                    status=self._ok if s.error is None else self._status(self._error, s.error),
                    start_time=s.start_ns,
                    end_time=s.end_ns,
                    instrumentation_scope=scope,
                )
            )

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
