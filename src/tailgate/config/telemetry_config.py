"""The gateway's OpenTelemetry export (``telemetry:``): traces and GenAI metrics over OTLP (docs/observability.md).

Off unless this section is present (and not ``enabled: false``) or the standard ``OTEL_*`` environment variables
ask for an OTLP export; every field left unset here takes its ``OTEL_*`` variable, then the default
(``tailgate.telemetry.settings`` resolves both; docs/config.md, "telemetry").
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator

from tailgate.config.base import PositiveSeconds
from tailgate.config.base import StrictModel as _Strict
from tailgate.config.units import Fraction

__all__ = ["ContentConfig", "OtlpProtocol", "TelemetryConfig"]

OtlpProtocol = Literal["http/protobuf", "grpc"]


class ContentConfig(_Strict):
    """Message content on spans (``gen_ai.input.messages`` / ``gen_ai.output.messages``): never unless asked."""

    enabled: bool = False
    """Export the request's messages and a whole answer's text on the request's span (off: never any content)."""
    max_chars: Annotated[int, Field(ge=16, le=1_000_000)] = 2000
    """Each message part is cut to this many characters (``…`` marks a cut) before it is exported."""
    redact: list[str] = Field(default_factory=list)
    """Regular expressions whose matches are replaced by ``[REDACTED]``, after the built-in rules (API keys,
    bearer tokens, e-mail addresses: ``tailgate.telemetry.content.BUILT_IN``)."""

    @field_validator("redact")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return value


class TelemetryConfig(_Strict):
    """OTLP export of traces and GenAI metrics. Unset fields: the ``OTEL_*`` variable named, else the default."""

    enabled: bool | None = None
    """``false`` turns the export off whatever the environment says; unset: on (the section is present)."""
    endpoint: str | None = None
    """The collector's OTLP base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``; default ``http://localhost:4318`` for
    ``http/protobuf``, ``http://localhost:4317`` for ``grpc``). HTTP posts to ``/v1/traces`` and ``/v1/metrics``
    under it."""
    protocol: OtlpProtocol | None = None
    """``http/protobuf`` (default) or ``grpc`` (``OTEL_EXPORTER_OTLP_PROTOCOL``)."""
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    """Headers on every export, e.g. a vendor's API key (``OTEL_EXPORTER_OTLP_HEADERS``); secrets, never printed."""
    service_name: str | None = None
    """``service.name`` of the resource (``OTEL_SERVICE_NAME``; default ``tailgate-gateway``)."""
    traces: bool | None = None
    """Export spans (``OTEL_TRACES_EXPORTER=none`` turns them off; default on)."""
    metrics: bool | None = None
    """Export the GenAI metrics (``OTEL_METRICS_EXPORTER=none`` turns them off; default on)."""
    sample_ratio: Fraction | None = None
    """Of the requests that arrive without a ``traceparent``, the share traced (``OTEL_TRACES_SAMPLER_ARG`` with a
    ratio sampler; default 1). A request with one follows its caller's sampled flag."""
    max_queue_size: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Spans waiting for export (``OTEL_BSP_MAX_QUEUE_SIZE``; default 2048): a full queue drops the oldest,
    counted in ``tailgate_otel_spans_dropped_total{reason="queue_full"}``, and never slows a request."""
    max_export_batch_size: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """Spans per export (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``; default 512)."""
    schedule_delay: PositiveSeconds | None = None
    """How often waiting spans are exported (``OTEL_BSP_SCHEDULE_DELAY``; default 1 s)."""
    export_timeout: PositiveSeconds | None = None
    """The most one export may take, retries included (``OTEL_EXPORTER_OTLP_TIMEOUT``; default 10 s)."""
    metric_interval: PositiveSeconds | None = None
    """How often the metrics are exported (``OTEL_METRIC_EXPORT_INTERVAL``; default 10 s)."""
    content: ContentConfig = Field(default_factory=ContentConfig)

    @field_validator("endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL (the collector's OTLP endpoint)")
        return value
