"""A bench run as one OpenTelemetry trace (docs/observability.md, "The load tester and the monitor").

Off by default; on with ``--otlp-endpoint URL``, the ``--config``'s ``telemetry:`` section or the standard
``OTEL_*`` variables (as for the gateway). The run is one trace: a root span ``tailgate bench``, a span per phase
(a concurrency level, a rate, a stage) under it, and under that one client span per request, named
``chat {model}``, with the GenAI conventions' attributes (``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.model``, token usage, ``gen_ai.response.time_to_first_chunk``), the target (``tailgate.target``),
the outcome (``error.type``, the HTTP status, an error status) and the measurement core's TTFT, E2E and TPOT in
milliseconds. So a provider's slow requests can be found in Jaeger (``tailgate.target=NAME``, sorted by duration)
and opened. Each request carries its span's W3C ``traceparent``: a gateway under test that traces puts its spans
under the bench's.

Spans are plain records built after each request (ids chosen before it is sent) and exported by the gateway's own
exporter (a bounded batching queue drained by its own thread, at least 65,536 spans here); what could not be
exported is counted and printed at the end. With ``--workers N`` each worker exports its own spans under the
parent's root (handed over as a ``traceparent`` string).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailgate.telemetry.client import ClientExport, call_attributes, client_settings, client_span
from tailgate.telemetry.spans import AttrValue, Ids, SpanRecord, parse_traceparent, traceparent

if TYPE_CHECKING:
    from tailgate.config.telemetry_config import TelemetryConfig
    from tailgate.telemetry.settings import Settings
    from tailgate.upstream import CallResult

SERVICE = "tailgate-bench"
QUEUE = 65_536
"""The export queue's least size: a bench run makes thousands of spans a second, none worth losing to a burst."""


def trace_settings(endpoint: str | None, section: TelemetryConfig | None = None) -> Settings | None:
    """What ``--otlp-endpoint`` (or the config's ``telemetry:`` section, or ``OTEL_*``) asks for; None: off."""
    return client_settings(section, os.environ, service=SERVICE, endpoint=endpoint, min_queue=QUEUE)


@dataclass(frozen=True)
class TraceReport:
    """What the run exported: its trace id (hex, as Jaeger searches it), spans made, exported, dropped."""

    trace_id: str
    spans: int
    exported: int
    dropped: int

    def line(self) -> str:
        dropped = f", {self.dropped} dropped (collector unreachable or queue full)" if self.dropped else ""
        return f"trace {self.trace_id}: {self.exported} of {self.spans} spans exported{dropped}"


@dataclass(slots=True)
class Pending:
    """A request's span, sent and not yet ended: its id and when it started (Unix ns)."""

    span_id: int
    start_ns: int


class RunTrace:
    """The trace of one bench run (or of one worker's share, under ``parent``): phases and requests as spans."""

    def __init__(
        self,
        settings: Settings,
        *,
        attributes: dict[str, AttrValue] | None = None,
        parent: str | None = None,
    ) -> None:
        self.settings = settings
        self.export = ClientExport(settings, "tailgate.bench")
        self.ids = Ids()
        remote = parse_traceparent(parent)
        self.remote = remote is not None
        self.trace_id = remote.trace_id if remote is not None else self.ids.trace_id()
        self.root_id = remote.span_id if remote is not None else self.ids.span_id()
        self._root_start = time.time_ns()
        self._root_attrs = attributes or {}
        self._phase: tuple[int, int, dict[str, AttrValue]] | None = None
        self._workers = (0, 0, 0)

    def traceparent(self) -> str:
        """The root span's context as a W3C ``traceparent`` (for the worker processes)."""
        return traceparent(self.trace_id, self.root_id)

    def phase(self, label: str, attributes: dict[str, AttrValue] | None = None) -> None:
        """A new phase (level, rate, stage): the previous one's span ends, the requests that follow go under this."""
        self._end_phase()
        self._phase = (self.ids.span_id(), time.time_ns(), {"tailgate.phase": label, **(attributes or {})})

    def _end_phase(self) -> None:
        if self._phase is None:
            return
        span_id, start, attrs = self._phase
        self._phase = None
        label = str(attrs["tailgate.phase"])
        self.export.emit(
            [SpanRecord(label, "internal", self.trace_id, span_id, self.root_id, start, time.time_ns(), attrs,
                        remote_parent=self.remote)]
        )  # fmt: skip

    def start(self, headers: dict[str, str]) -> Pending:
        """A request is about to be sent: its span's id, and its ``traceparent`` in ``headers`` (sent with it)."""
        pending = Pending(self.ids.span_id(), time.time_ns())
        headers["traceparent"] = traceparent(self.trace_id, pending.span_id)
        return pending

    def finish(
        self,
        pending: Pending,
        result: CallResult,
        *,
        target: str,
        base_url: str,
        model: str,
        api: str,
        extra: dict[str, AttrValue] | None = None,
    ) -> None:
        """A request ended: its client span, with what the measurement core measured."""
        attrs = call_attributes(result, model=model, api=api, base_url=base_url)
        attrs["tailgate.target"] = target
        if extra:
            attrs.update(extra)
        parent = self._phase[0] if self._phase is not None else self.root_id
        remote = self._phase is None and self.remote
        ids = (self.trace_id, pending.span_id, parent)
        self.export.emit([client_span(f"chat {model}", ids, pending.start_ns, result, attrs, remote_parent=remote)])

    def add_worker_spans(self, spans: int, exported: int, dropped: int) -> None:
        """A worker process's spans (``--workers``), counted into this run's report."""
        w = self._workers
        self._workers = (w[0] + spans, w[1] + exported, w[2] + dropped)

    def close(self) -> TraceReport:
        """End the open spans, export what is left (bounded wait), and say how it went (workers' spans included)."""
        self._end_phase()
        if not self.remote:
            root = SpanRecord(
                "tailgate bench", "internal", self.trace_id, self.root_id, None, self._root_start, time.time_ns(),
                self._root_attrs,
            )  # fmt: skip
            self.export.emit([root])
        exported, dropped = self.export.close()
        w = self._workers
        return TraceReport(f"{self.trace_id:032x}", self.export.emitted + w[0], exported + w[1], dropped + w[2])


def run_attributes(targets: Sequence[tuple[str, str, str]], command: Sequence[str]) -> dict[str, AttrValue]:
    """The root span's attributes: the command line and the targets (name=base URL (model))."""
    return {
        "tailgate.command": " ".join(command),
        "tailgate.targets": tuple(f"{n}={u} ({m})" for n, u, m in targets),
    }


def open_run_trace(
    endpoint: str | None, config: Path | None, targets: Sequence[Any], command: Sequence[str]
) -> RunTrace | None:
    """The run's trace when ``--otlp-endpoint``, the ``--config``'s ``telemetry:`` section or ``OTEL_*`` ask for
    one (None: off). ``targets``: the run's ``TargetSpec`` s. Raises ValueError for an ``OTEL_*`` variable that
    cannot be used."""
    section = None
    if config is not None:
        from tailgate.config.resolve import load_resolved

        section = load_resolved(config)[0].telemetry
    settings = trace_settings(endpoint, section)
    if settings is None:
        return None
    return RunTrace(settings, attributes=run_attributes([(t.name, t.base_url, t.model) for t in targets], command))
