"""A request's OpenTelemetry spans and GenAI metric points, from its books (docs/observability.md).

:class:`OtelBooks` is one of the books' sinks (request_path/bookkeeping.py): once a request has ended it gets the
request's context and its ledger row, the same numbers the row says, and hands the telemetry exporter
(tailgate.telemetry.export) the request's spans — one server span, one client span per upstream attempt — and its
metric points. It runs with the rest of the books, a moment after the request, never on its path; the export
itself is the exporter's threads'.

The server span carries the request as the client saw it: ``gen_ai.request.model`` the alias it asked for,
``gen_ai.response.model`` / ``gen_ai.response.id`` what answered (from the answer's body, or a stream's first
event), the ledger row's token counts, why it ended. Each attempt's span carries its route, why it was tried
(``tailgate.route.reason``, ``tailgate.attempt.role``), the conversation's affinity key source, its outcome and
the attempt's own usage.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec

from tailgate.telemetry import semconv as sc
from tailgate.telemetry.content import Redactor, input_messages, output_messages
from tailgate.telemetry.spans import AttrValue, SpanRecord

if TYPE_CHECKING:
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.gateway.request_path.request_context import Ctx
    from tailgate.gateway.request_path.tracing import AttemptTrace, RequestTrace
    from tailgate.ledger import LedgerRow
    from tailgate.telemetry.export import Exporter

__all__ = ["UNKNOWN_MODEL", "OtelBooks"]

UNKNOWN_MODEL = "_other"
"""``gen_ai.request.model`` on a metric point of a request for an alias the gateway does not serve."""

log = logging.getLogger("tailgate.gateway")

_NOT_FAILURES = frozenset({None, "cancelled"})
"""Attempt outcomes that are not errors on their span: complete, or cancelled (a lost race, a client gone)."""


class _Choice(msgspec.Struct):
    finish_reason: str | None = None


class _Inner(msgspec.Struct):
    id: str | None = None
    model: str | None = None


class _Answer(msgspec.Struct):
    """The few fields of an answer (a chat completion, an Anthropic message, a Responses object) or of a stream's
    first event that a span names."""

    id: str | None = None
    model: str | None = None
    choices: list[_Choice] | None = None
    stop_reason: str | None = None
    status: str | None = None
    message: _Inner | None = None
    """Anthropic's ``message_start``."""
    response: _Inner | None = None
    """The Responses API's ``response.created``."""


_decode_answer = msgspec.json.Decoder(_Answer).decode


def _answer(body: bytes | None, head: bytes | None) -> _Answer | None:
    """The answer's fields: a whole body, else the first ``data:`` line of a stream's first bytes."""
    raw = body
    if raw is None and head:
        for line in head.split(b"\n"):
            if line.startswith((b"data: {", b"data:{")):
                raw = line[5:].strip()
                break
    if not raw:
        return None
    try:
        out = _decode_answer(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    inner = out.message or out.response
    if inner is not None:
        out.id, out.model = out.id or inner.id, out.model or inner.model
    return out


def _finish_reasons(answer: _Answer) -> tuple[str, ...]:
    if answer.choices:
        return tuple(c.finish_reason for c in answer.choices if c.finish_reason)
    if answer.stop_reason:
        return (answer.stop_reason,)
    return ()


class OtelBooks:
    """Spans and metric points of ended requests (see the module docstring)."""

    def __init__(
        self, exporter: Exporter, *, content_patterns: tuple[str, ...] = (), content_chars: int = 2000
    ) -> None:
        self.exporter = exporter
        self._redact = Redactor(content_patterns, content_chars)
        self._servers: dict[str, tuple[str | None, int | None]] = {}

    def record(self, ctx: Ctx, row: LedgerRow, now: float) -> None:
        """The books of one ended request (``now``: its end, ``time.perf_counter()``)."""
        provider = ctx.provider
        operation = sc.operation(ctx.endpoint)
        gen_provider = _provider_name(provider)
        trace = ctx.trace
        answer = None
        if trace is not None:
            served = next((a for a in trace.attempts if a.served), None)
            answer = _answer(served.answer if served is not None else None, trace.head)
        if self.exporter.metrics:
            self._metrics(ctx, row, operation, gen_provider)
        if trace is not None and self.exporter.traces:
            self.exporter.emit(self._spans(ctx, trace, row, now, operation, gen_provider, answer))

    # -- metrics ----------------------------------------------------------------------------------------------------

    def _metrics(self, ctx: Ctx, row: LedgerRow, operation: str, provider: str | None) -> None:
        ex = self.exporter
        # an alias the gateway does not serve is "_other": a client's made-up model names never grow the series
        model = row.alias if row.alias in ctx.table.aliases else UNKNOWN_MODEL
        attrs: dict[str, AttrValue] = {sc.OPERATION: operation, sc.REQUEST_MODEL: model}
        if provider is not None:
            attrs[sc.PROVIDER] = provider
            attrs[sc.PROVIDER_CONFIG] = row.provider or ""
        if row.upstream_model is not None:
            attrs[sc.RESPONSE_MODEL] = row.upstream_model  # the route's: the same series whether traced or not
        failed = row.outcome != "ok" or row.status != 200
        error = row.outcome if row.outcome != "ok" else str(row.status)
        e2e_ms = row.e2e_ms or 0.0
        ex.record(ex.duration, e2e_ms / 1000.0, {**attrs, sc.ERROR_TYPE: error} if failed else attrs)
        if row.prompt_tokens is not None:
            ex.record(ex.tokens, row.prompt_tokens, {**attrs, sc.TOKEN_TYPE: "input"})
        if row.output_tokens is not None and (row.output_tokens or row.prompt_tokens is not None):
            ex.record(ex.tokens, row.output_tokens, {**attrs, sc.TOKEN_TYPE: "output"})
        if not failed and ctx.stream and row.ttft_ms is not None:
            ex.record(ex.ttft, row.ttft_ms / 1000.0, attrs)
            if row.output_tokens is not None and row.output_tokens >= 2:
                tpot = (e2e_ms - row.ttft_ms) / 1000.0 / (row.output_tokens - 1)
                ex.record(ex.tpot, max(0.0, tpot), attrs)

    # -- spans ------------------------------------------------------------------------------------------------------

    def _spans(
        self,
        ctx: Ctx,
        trace: RequestTrace,
        row: LedgerRow,
        now: float,
        operation: str,
        provider: str | None,
        answer: _Answer | None,
    ) -> list[SpanRecord]:
        wall_ns = int(ctx.wall * 1e9)

        def at(t: float) -> int:  # perf_counter → epoch ns, on the request's own clock pair
            return wall_ns + int((t - ctx.t0) * 1e9)

        policy_name = ctx.table.policy_for(ctx.alias).name if ctx.alias in ctx.table.aliases else None
        source = self._affinity_source(ctx, trace) if ctx.affinity_key is not None else None
        a: dict[str, AttrValue] = {
            sc.OPERATION: operation,
            sc.REQUEST_MODEL: row.alias,
            sc.REQUEST_STREAM: row.stream,
            sc.REQUEST_ID: row.request_id,
            sc.OUTCOME: row.outcome,
            sc.ATTEMPTS: row.attempts,
            sc.HTTP_STATUS: row.status,
        }
        if provider is not None:
            a[sc.PROVIDER] = a[sc.SYSTEM] = provider
        if row.provider is not None:
            a[sc.PROVIDER_CONFIG] = row.provider
            if ctx.route is not None:
                a[sc.ROUTE] = f"{ctx.route.provider}/{ctx.route.model}"
        if row.upstream_model is not None:
            a[sc.RESPONSE_MODEL] = answer.model if answer is not None and answer.model else row.upstream_model
        if answer is not None:
            if answer.id:
                a[sc.RESPONSE_ID] = answer.id
            if reasons := _finish_reasons(answer):
                a[sc.FINISH_REASONS] = reasons
        _usage(a, row.prompt_tokens, row.output_tokens, row.cached_tokens, row.reasoning_tokens)
        for key, value in (
            (sc.KEY_ID, row.key_id),
            (sc.TRAFFIC_CLASS, row.traffic_class),
            (sc.COST, row.cost),
            (sc.OVERHEAD_MS, row.overhead_ms),
            (sc.POLICY, policy_name),
            (sc.AFFINITY_SOURCE, source),
        ):
            if value is not None:
                a[key] = value
        if row.tokens_estimated:
            a[sc.TOKENS_ESTIMATED] = True
        if ctx.hedged:
            a[sc.HEDGED] = True
        if row.stream and row.ttft_ms is not None:
            a[sc.TIME_TO_FIRST_CHUNK] = row.ttft_ms / 1000.0
        if row.outcome != "ok":
            a[sc.ERROR_TYPE] = row.outcome
        if trace.body is not None:  # content: only when asked (telemetry.content.enabled)
            self._content(a, trace.body, next((t for t in trace.attempts if t.served), None))
        server = SpanRecord(
            name=f"{operation} {row.alias}",
            kind="server",
            trace_id=trace.trace_id,
            span_id=trace.span_id,
            parent_id=trace.parent_id,
            start_ns=wall_ns,
            end_ns=at(now),
            attributes=a,
            error=row.outcome if row.status >= 500 or row.status == 0 else None,
            remote_parent=trace.parent_id is not None,
            tracestate=trace.tracestate,
        )
        spans = [server]
        for attempt in trace.attempts:
            spans.append(self._attempt_span(ctx, trace, attempt, operation, source, answer, at, now))
        return spans

    def _attempt_span(
        self,
        ctx: Ctx,
        trace: RequestTrace,
        attempt: AttemptTrace,
        operation: str,
        source: str | None,
        answer: _Answer | None,
        at: Any,
        now: float,
    ) -> SpanRecord:
        route, result = attempt.route, attempt.result
        provider = attempt.provider
        gen = _provider_name(provider)
        try:
            rank = trace.order.index(route)
        except ValueError:
            rank = None
        if attempt.role == "primary":
            reason = "affinity" if ctx.affinity_key is not None else "policy"
        else:
            reason = attempt.role
        error_class = result.error_class if result is not None else "cancelled"
        # its error first: a stream that failed after its first token reached the client is no "served"
        outcome = error_class if error_class is not None else ("served" if attempt.served else "ok")
        a: dict[str, AttrValue] = {
            sc.OPERATION: operation,
            sc.REQUEST_MODEL: route.model,
            sc.PROVIDER_CONFIG: route.provider,
            sc.ROUTE: f"{route.provider}/{route.model}",
            sc.ROUTE_REASON: reason,
            sc.ATTEMPT: attempt.number,
            sc.ATTEMPT_ROLE: attempt.role,
            sc.ATTEMPT_OUTCOME: outcome,
        }
        if gen is not None:
            a[sc.PROVIDER] = gen
        if rank is not None:
            a[sc.ROUTE_RANK] = rank
        if source is not None:
            a[sc.AFFINITY_SOURCE] = source
        host, port = self._server(provider)
        if host is not None:
            a[sc.SERVER_ADDRESS] = host
            if port is not None:
                a[sc.SERVER_PORT] = port
        if result is not None:
            if result.status is not None:
                a[sc.HTTP_STATUS] = result.status
            if error_class is None or attempt.served:
                _usage(a, result.prompt_tokens, result.output_tokens, result.cached_tokens, result.reasoning_tokens)
            if ctx.stream and result.ttft_ms is not None:
                a[sc.TIME_TO_FIRST_CHUNK] = result.ttft_ms / 1000.0
        if attempt.served and answer is not None:
            a[sc.RESPONSE_MODEL] = answer.model or route.model
            if answer.id:
                a[sc.RESPONSE_ID] = answer.id
            if reasons := _finish_reasons(answer):
                a[sc.FINISH_REASONS] = reasons
        if error_class is not None:
            a[sc.ERROR_TYPE] = error_class
        return SpanRecord(
            name=f"{operation} {route.model}",
            kind="client",
            trace_id=trace.trace_id,
            span_id=attempt.span_id,
            parent_id=trace.span_id,
            start_ns=at(attempt.started),
            end_ns=at(attempt.ended if attempt.ended is not None else now),
            attributes=a,
            error=None if error_class in _NOT_FAILURES else error_class,
            tracestate=trace.tracestate,
        )

    def _content(self, a: dict[str, AttrValue], body: bytes, served: object) -> None:
        try:
            obj = msgspec.json.decode(body)
        except msgspec.DecodeError:
            return
        if (messages := input_messages(obj, self._redact)) is not None:
            a[sc.INPUT_MESSAGES] = messages
        answer = getattr(served, "answer", None)
        if isinstance(answer, bytes):
            try:
                out = output_messages(msgspec.json.decode(answer), self._redact)
            except msgspec.DecodeError:
                out = None
            if out is not None:
                a[sc.OUTPUT_MESSAGES] = out

    def _affinity_source(self, ctx: Ctx, trace: RequestTrace) -> str | None:
        """Which source gave the conversation's affinity key (the first configured one that has a value)."""
        from tailgate.routing.affinity import affinity_key

        affinity = ctx.table.affinity.get(ctx.alias)
        if affinity is None or not isinstance(trace.obj, dict):
            return None
        got = affinity_key(trace.headers, trace.obj, affinity.settings.sources, affinity.settings.prefix_chars)
        return got[1] if got is not None else None

    def _server(self, provider: ProviderState) -> tuple[str | None, int | None]:
        """``server.address`` / ``server.port`` of a provider's base URL (parsed once per provider)."""
        base = provider.config.base_url
        found = self._servers.get(base)
        if found is None:
            try:
                parts = urlsplit(base)
                found = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
            except ValueError:
                found = (None, None)
            self._servers[base] = found
        return found


def _provider_name(provider: ProviderState | None) -> str | None:
    if provider is None:
        return None
    return sc.provider_name(provider.config.preset, provider.name)


def _usage(
    a: dict[str, AttrValue], prompt: int | None, output: int | None, cached: int | None, reasoning: int | None
) -> None:
    if prompt is not None:
        a[sc.INPUT_TOKENS] = prompt
    if output is not None:
        a[sc.OUTPUT_TOKENS] = output
    if cached is not None:
        a[sc.CACHE_READ_INPUT_TOKENS] = cached
    if reasoning is not None:
        a[sc.REASONING_OUTPUT_TOKENS] = reasoning
