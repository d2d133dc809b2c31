"""What a traced request notes on its way, for its spans (``telemetry:``; docs/observability.md).

With telemetry's traces on, :meth:`Tracing.begin` gives a sampled request a :class:`RequestTrace` (``Ctx.trace``):
its trace id (the caller's, from a valid ``traceparent``, else a new one), its server span's id, the caller's span.
On the way it notes only references and clock readings, never work per frame: the routing order
(:meth:`RequestTrace.ordered`), each attempt's start and end (:meth:`RequestTrace.start` →
:class:`AttemptTrace`, ``end``), a stream's first bytes (``head``: its response id and model). The spans are built
from these notes and the request's ledger row after the request, with its books (metrics/otel_books.py).

A request not traced (telemetry off, traces off, or not sampled) has ``Ctx.trace`` None: one ``if`` where it
arrives, one per attempt.

``traceparent`` upstream is each provider's choice (``providers.NAME.propagate_trace``, off by default): an attempt
to such a provider carries one naming the attempt's own span, so the provider's spans join the trace.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tailgate.telemetry.spans import Ids, parse_traceparent, traceparent

if TYPE_CHECKING:
    from tailgate.gateway.api_handler import Attempt
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.routing import Route
    from tailgate.upstream import CallResult

__all__ = ["AttemptTrace", "RequestTrace", "Tracing"]


class Tracing:
    """Who is traced, and the ids: one per gateway process (built by app.py when traces are exported)."""

    __slots__ = ("_coin", "capture_content", "ids", "ratio")

    def __init__(self, ratio: float = 1.0, *, capture_content: bool = False, seed: int | None = None) -> None:
        self.ratio = ratio
        """Of the requests without a ``traceparent``, the share traced."""
        self.capture_content = capture_content
        self.ids = Ids(seed)
        self._coin = random.Random(seed).random

    def begin(self, headers: Mapping[str, str], body: bytes) -> RequestTrace | None:
        """A request arrives: its trace, or None when it is not sampled (its caller's ``traceparent`` says so, or
        the ratio). ``body`` is kept (a reference) only when content is exported."""
        parent = parse_traceparent(headers.get("traceparent"), headers.get("tracestate"))
        if parent is not None:
            if not parent.sampled:
                return None
            trace_id, parent_id, state = parent.trace_id, parent.span_id, parent.tracestate
        else:
            if self.ratio < 1.0 and self._coin() >= self.ratio:
                return None
            trace_id, parent_id, state = self.ids.trace_id(), None, None
        return RequestTrace(
            self, trace_id, self.ids.span_id(), parent_id, state, headers, body if self.capture_content else None
        )


class RequestTrace:
    """One traced request's notes (see the module docstring)."""

    __slots__ = (
        "attempts",
        "body",
        "head",
        "headers",
        "obj",
        "order",
        "parent_id",
        "span_id",
        "trace_id",
        "tracestate",
        "tracing",
    )

    def __init__(
        self,
        tracing: Tracing,
        trace_id: int,
        span_id: int,
        parent_id: int | None,
        tracestate: str | None,
        headers: Mapping[str, str],
        body: bytes | None,
    ) -> None:
        self.tracing = tracing
        self.trace_id = trace_id
        self.span_id = span_id
        """The request's (server) span."""
        self.parent_id = parent_id
        """The caller's span (its ``traceparent``), or None: the request starts the trace."""
        self.tracestate = tracestate
        self.headers = headers
        self.body = body
        """The request body, kept only when content is exported."""
        self.obj: Any = None
        """The decoded request (its affinity source is read from it after the request)."""
        self.order: Sequence[Route] = ()
        """The routing order the attempts walked."""
        self.attempts: list[AttemptTrace] = []
        self.head: bytes | None = None
        """A stream's first bytes, as sent to the client (its response id and model)."""

    def ordered(self, order: Sequence[Route], obj: Any) -> None:
        """The routing order was decided (proxy.py, ``_order``)."""
        self.order, self.obj = order, obj

    def start(self, plan: Attempt, provider: ProviderState, route: Route, racing: bool) -> tuple[Attempt, AttemptTrace]:
        """An attempt starts (attempts.py; ``racing``: within a hedged race): its role, its span id, and ``plan``
        with a ``traceparent`` when its provider takes one (``propagate_trace``)."""
        previous = self.attempts[-1] if self.attempts else None
        if racing and self.attempts:
            role = "hedge"
        elif previous is None:
            role = "primary"
        elif previous.route == route:
            role = "retry"  # the same route again (its next key: revocation.py)
        else:
            role = "fallback"
        number = len(self.attempts) + 1
        span = AttemptTrace(route, provider, self.tracing.ids.span_id(), role, number, time.perf_counter())
        self.attempts.append(span)
        if provider.config.propagate_trace:
            header = {"traceparent": traceparent(self.trace_id, span.span_id)}
            if self.tracestate:
                header["tracestate"] = self.tracestate
            plan = dataclasses.replace(plan, headers={**(plan.headers or {}), **header})
        return plan, span


class AttemptTrace:
    """One attempt's notes: filled at its start, ``end`` at its end."""

    __slots__ = ("answer", "ended", "number", "provider", "result", "role", "route", "served", "span_id", "started")

    def __init__(
        self, route: Route, provider: ProviderState, span_id: int, role: str, number: int, started: float
    ) -> None:
        self.route = route
        self.provider = provider
        self.span_id = span_id
        self.role = role
        """``primary``, ``hedge``, ``retry`` or ``fallback``."""
        self.number = number
        self.started = started
        self.ended: float | None = None
        self.result: CallResult | None = None
        self.served = False
        self.answer: bytes | None = None
        """A whole answer's body as sent (its response id, model and finish reasons)."""

    def end(self, result: CallResult, reply: object) -> None:
        """The attempt ended with ``result``; ``reply`` is what it answered the client (None: nothing)."""
        self.ended = time.perf_counter()
        self.result = result
        self.served = reply is not None
        body = getattr(reply, "body", None)
        if isinstance(body, bytes):
            self.answer = body
