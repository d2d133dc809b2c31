"""Traces of the client faces — the load tester and the monitor — over OTLP (docs/observability.md).

A bench run or a monitor round describes each request after it ended as a :class:`SpanRecord` (its ids chosen
before it was sent, so its ``traceparent`` can go with it), with the attributes read from the measurement core's
:class:`~tailgate.upstream.CallResult` in the GenAI semantic conventions' names, and exports them through the
gateway's own :class:`~tailgate.telemetry.export.Exporter` (:class:`ClientExport`). The SDK is imported only when
an export is built.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol
from urllib.parse import urlsplit

from tailgate.config.telemetry_config import TelemetryConfig
from tailgate.telemetry import semconv
from tailgate.telemetry.settings import Settings, resolve
from tailgate.telemetry.spans import AttrValue, SpanRecord


class CallResult(Protocol):
    """What a span reads of a measured call: the fields of :class:`tailgate.upstream.CallResult` (named here, not
    imported: the measurement core sits beside this package, not below it)."""

    @property
    def status(self) -> int | None: ...
    @property
    def error_class(self) -> str | None: ...
    @property
    def started_at(self) -> float: ...
    @property
    def stream(self) -> bool: ...
    @property
    def request_id(self) -> str | None: ...
    @property
    def ttft_ms(self) -> float | None: ...
    @property
    def e2e_ms(self) -> float | None: ...
    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def tokens_estimated(self) -> bool: ...
    @property
    def reasoning_tokens(self) -> int | None: ...
    @property
    def cached_tokens(self) -> int | None: ...
    @property
    def tpot_ms(self) -> float | None: ...


__all__ = ["CallResult", "ClientExport", "call_attributes", "client_settings", "client_span"]


def client_settings(
    section: TelemetryConfig | None,
    env: Mapping[str, str],
    *,
    service: str,
    endpoint: str | None = None,
    min_queue: int = 2048,
) -> Settings | None:
    """The export a client face asks for: ``endpoint`` (a ``--otlp-endpoint`` flag) turns it on, else the config
    section and the ``OTEL_*`` environment decide as for the gateway (:func:`~tailgate.telemetry.settings.resolve`).
    Spans only (the GenAI metrics are the gateway's); ``service`` unless the config or ``OTEL_SERVICE_NAME`` names
    one; a queue of at least ``min_queue`` spans."""
    if endpoint is not None:
        section = (section or TelemetryConfig()).model_copy(update={"endpoint": endpoint, "enabled": True})
    settings = resolve(section, env)
    if settings is None or settings.traces_endpoint is None:
        return None
    named = (section is not None and section.service_name) or env.get("OTEL_SERVICE_NAME")
    return replace(
        settings,
        metrics_endpoint=None,
        service_name=settings.service_name if named else service,
        max_queue_size=max(settings.max_queue_size, min_queue),
    )


class ClientExport:
    """A client face's span export: the gateway's :class:`~tailgate.telemetry.export.Exporter` (a bounded batching
    queue drained by its own thread: a slow or dead collector costs spans, counted, never the caller's time) on a
    registry of its own, whose counts the face prints at the end instead of serving them."""

    def __init__(self, settings: Settings, scope: str) -> None:
        from prometheus_client import CollectorRegistry

        from tailgate.telemetry.export import Exporter

        self.settings = settings
        self.registry = CollectorRegistry()
        self.exporter = Exporter(settings, self.registry, scope=scope)
        self.emitted = 0

    def emit(self, spans: Sequence[SpanRecord]) -> None:
        """Queue finished spans (never blocks; a full queue drops the oldest, counted)."""
        self.emitted += len(spans)
        self.exporter.emit(spans)

    def close(self) -> tuple[int, int]:
        """Export what waits (bounded by the export timeout) and stop; (spans exported, spans dropped)."""
        self.exporter.shutdown()
        exported = self.registry.get_sample_value("tailgate_otel_spans_exported_total") or 0.0
        dropped = sum(
            self.registry.get_sample_value("tailgate_otel_spans_dropped_total", {"reason": r}) or 0.0
            for r in ("queue_full", "export_failed", "shutdown")
        )
        return int(exported), int(dropped)


def client_span(
    name: str,
    ids: tuple[int, int, int | None],
    start_ns: int,
    result: CallResult,
    attributes: dict[str, AttrValue],
    *,
    remote_parent: bool = False,
) -> SpanRecord:
    """A measured call's client span (``ids``: trace, span, parent), from ``start_ns`` (just before it was sent) to
    its end (its start + E2E on the measurement core's clock); an error status names its error class."""
    end = time.time_ns() if result.e2e_ms is None else int((result.started_at + result.e2e_ms / 1000.0) * 1e9)
    trace_id, span_id, parent_id = ids
    return SpanRecord(
        name,
        "client",
        trace_id,
        span_id,
        parent_id,
        start_ns,
        max(end, start_ns),
        attributes,
        error=result.error_class,
        remote_parent=remote_parent,
    )


def call_attributes(
    result: CallResult, *, model: str, api: str, base_url: str, operation: str = "chat"
) -> dict[str, AttrValue]:
    """A client span's attributes for one measured call, in the GenAI conventions' names where they have one
    (``gen_ai.*``, ``server.*``, ``error.type``) and ``tailgate.*`` for the rest of the measurement. The provider
    is named by the protocol spoken (``openai`` or ``anthropic``); the face adds which target it was."""
    parts = urlsplit(base_url)
    provider = "anthropic" if api == "anthropic" else "openai"
    attrs: dict[str, AttrValue] = {
        semconv.OPERATION: operation,
        semconv.PROVIDER: provider,
        semconv.SYSTEM: provider,
        semconv.REQUEST_MODEL: model,
        semconv.REQUEST_STREAM: result.stream,
        semconv.SERVER_ADDRESS: parts.hostname or "",
        semconv.SERVER_PORT: parts.port or (443 if parts.scheme == "https" else 80),
        semconv.OUTPUT_TOKENS: result.output_tokens,
        semconv.TOKENS_ESTIMATED: result.tokens_estimated,
        semconv.OUTCOME: result.error_class or "ok",
    }
    if result.status is not None:
        attrs[semconv.HTTP_STATUS] = result.status
    if result.error_class is not None:
        attrs[semconv.ERROR_TYPE] = result.error_class
    if result.prompt_tokens is not None:
        attrs[semconv.INPUT_TOKENS] = result.prompt_tokens
    if result.cached_tokens is not None:
        attrs[semconv.CACHE_READ_INPUT_TOKENS] = result.cached_tokens
    if result.reasoning_tokens is not None:
        attrs[semconv.REASONING_OUTPUT_TOKENS] = result.reasoning_tokens
    if result.ttft_ms is not None:
        attrs[semconv.TIME_TO_FIRST_CHUNK] = result.ttft_ms / 1000.0
        attrs["tailgate.ttft_ms"] = result.ttft_ms
    if result.e2e_ms is not None:
        attrs["tailgate.e2e_ms"] = result.e2e_ms
    if (tpot := result.tpot_ms) is not None:
        attrs["tailgate.tpot_ms"] = tpot
    if result.request_id is not None:
        attrs[semconv.REQUEST_ID] = result.request_id
    return attrs
