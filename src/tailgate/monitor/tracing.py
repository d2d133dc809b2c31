"""The monitor's rounds as OpenTelemetry traces (docs/observability.md, "The load tester and the monitor").

On with the gateway config's ``telemetry:`` section or the standard ``OTEL_*`` variables, as for the gateway
(service ``tailgate-monitor`` unless named). Each round is one trace: a root span ``monitor round N`` and under it
one client span per probe (``chat {model}``, the GenAI conventions' attributes, the provider, the workload, the
canary's grade, the outcome), so a provider's slow or failing probes can be opened in Jaeger beside the
gateway's own traces. A probe carries its span's ``traceparent`` only to providers whose config sets
``propagate_trace`` (the gateway's rule: a third party learns nothing of the trace otherwise).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tailgate.telemetry.client import ClientExport, call_attributes, client_settings, client_span
from tailgate.telemetry.spans import Ids, SpanRecord, traceparent

if TYPE_CHECKING:
    from tailgate.config.telemetry_config import TelemetryConfig
    from tailgate.telemetry.settings import Settings
    from tailgate.telemetry.spans import AttrValue
    from tailgate.upstream import CallResult

__all__ = ["RoundSpan", "RoundTracer", "round_tracer"]

SERVICE = "tailgate-monitor"


@dataclass(slots=True)
class RoundSpan:
    """A round's trace: its ids and start (Unix ns)."""

    trace_id: int
    span_id: int
    index: int
    start_ns: int


@dataclass(slots=True)
class ProbeSpan:
    """A probe's span, sent and not yet ended."""

    span_id: int
    start_ns: int


class RoundTracer:
    """Spans for the monitor's rounds and probes; :meth:`close` exports what is left."""

    def __init__(self, settings: Settings) -> None:
        self.export = ClientExport(settings, "tailgate.monitor")
        self.ids = Ids()

    def round(self, index: int) -> RoundSpan:
        """A round starts: a new trace."""
        return RoundSpan(self.ids.trace_id(), self.ids.span_id(), index, time.time_ns())

    def probe(self, headers: dict[str, str] | None, parent: RoundSpan) -> ProbeSpan:
        """A probe is about to be sent; ``headers`` (when given) get its ``traceparent``."""
        span = ProbeSpan(self.ids.span_id(), time.time_ns())
        if headers is not None:
            headers["traceparent"] = traceparent(parent.trace_id, span.span_id)
        return span

    def end_probe(
        self,
        parent: RoundSpan,
        span: ProbeSpan,
        result: CallResult,
        *,
        provider: str,
        model: str,
        api: str,
        base_url: str,
        workload: str,
        accuracy_ok: bool | None,
    ) -> None:
        attrs = call_attributes(result, model=model, api=api, base_url=base_url)
        attrs |= {"tailgate.provider": provider, "tailgate.workload": workload, "tailgate.round": parent.index}
        if accuracy_ok is not None:
            attrs["tailgate.accuracy_ok"] = accuracy_ok
        ids = (parent.trace_id, span.span_id, parent.span_id)
        self.export.emit([client_span(f"chat {model}", ids, span.start_ns, result, attrs)])

    def end_round(self, span: RoundSpan, *, probes: int, failed: int, skipped: int) -> None:
        attrs: dict[str, AttrValue] = {
            "tailgate.round": span.index,
            "tailgate.probes": probes,
            "tailgate.failed": failed,
            "tailgate.skipped": skipped,
        }
        name = f"monitor round {span.index}"
        record = SpanRecord(name, "internal", span.trace_id, span.span_id, None, span.start_ns, time.time_ns(), attrs)
        self.export.emit([record])

    def close(self) -> tuple[int, int]:
        """Export what is left (bounded by the export timeout); (spans exported, dropped)."""
        return self.export.close()


def round_tracer(section: TelemetryConfig | None, env: Mapping[str, str] | None = None) -> RoundTracer | None:
    """The monitor's tracer when the config's ``telemetry:`` section or ``OTEL_*`` turn it on; None: off. Raises
    ValueError for an ``OTEL_*`` variable that cannot be used."""
    settings = client_settings(section, os.environ if env is None else env, service=SERVICE)
    return RoundTracer(settings) if settings is not None else None
