"""Every request's bookkeeping once it ends: the key's settlement, the Prometheus series, the per-minute
traffic aggregates, the trace and one ledger row — whatever the outcome (``Proxy`` hands each ended request
to :class:`Books`: :func:`settle` at once, :func:`record` a moment later). The books go to explicit
:class:`Sinks` the composition root hands over, never to the gateway."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler

from tailgate.ledger import LedgerRow
from tailgate.upstream import CallResult

if TYPE_CHECKING:
    from tailgate.gateway.metrics.gateway_metrics import GatewayMetrics
    from tailgate.gateway.metrics.otel_books import OtelBooks
    from tailgate.gateway.metrics.traffic_minutes import TrafficAggregator
    from tailgate.gateway.metrics.traffic_trace import TraceWriter
    from tailgate.gateway.request_path.admission import KeyAdmission
    from tailgate.gateway.request_path.answer_quality import AnswerQuality
    from tailgate.gateway.request_path.request_context import Ctx
    from tailgate.ledger import SQLiteLedger
    from tailgate.state import Admission

__all__ = ["BOOK_DELAY_S", "Books", "Sinks", "books_first", "record", "settle"]

log = logging.getLogger("tailgate.gateway")

BOOK_DELAY_S = 0.001
"""How long an ended request's bookkeeping may wait, and an answered request's tail (``Books.later``). Run at
once, both sat between a client's answer and that client's next request: one client at a time, the next
request waited for them (latency added at one connection). A millisecond later the next request
has reached its provider (its read, routing and upstream write take ~0.3 ms on our 2-core benchmark machine)
and the books are kept while the gateway waits on the provider. Under load the timer takes each millisecond's
requests in one batch."""

_DRAIN_S = 2.0
"""``Books.drain`` waits at most this long for answered requests' tails (each is a few hundred µs of work)."""


@dataclass(frozen=True, slots=True)
class Sinks:
    """Where an ended request's books go."""

    metrics: GatewayMetrics
    """The Prometheus series (metrics/gateway_metrics.py)."""
    traffic: TrafficAggregator
    """Per-minute traffic aggregates to the store (metrics/traffic_minutes.py)."""
    trace: TraceWriter | None
    """The traffic trace (``trace.path``), if any."""
    ledger: SQLiteLedger | None
    """One row per request (``ledger.enabled``), if any."""
    admission: KeyAdmission
    """The settlement: the key gate corrects a ticket to what the request used (admission.py)."""
    refund_rpm: Callable[[str, Admission], None]
    """Gives a key's rpm count back (``Fleet.refund_key``): a request that never went upstream keeps nothing."""
    quality: AnswerQuality | None = None
    """A served chat answer's quality signals (answer_quality.py)."""
    divert: Callable[[LedgerRow], bool] | None = None
    """Takes the rows of the batch lane's lines (gateway/batch/batch_exec.py: True when it took one): the batch store
    bills a line with its settlement, exactly once, so the ledger writer must not write it too."""
    telemetry: OtelBooks | None = None
    """OpenTelemetry spans and GenAI metric points from each request's ledger row (``telemetry:``), if on."""


class Books:
    """Ended requests waiting for :func:`record`: booked ``BOOK_DELAY_S`` after the first of them, or at once by
    :meth:`flush`. Answered requests whose connection went on (``Exchange.detach``) wait in :meth:`later`
    for the same timer before they finish. Whatever reads the books calls :meth:`drain` first (``/metrics``,
    the admin API, the dashboard: the ``books_first`` middleware; the ledger's and traffic's ``flush``), and the
    gateway's stop calls it last."""

    __slots__ = ("_loop", "_pending", "_sinks", "_tails", "_timer", "_waiting")

    def __init__(self, sinks: Sinks) -> None:
        self._sinks = sinks
        self._pending: list[tuple[Ctx, float]] = []
        self._waiting: list[asyncio.Future[None]] = []
        self._tails: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        """Requests not booked yet: ended, or answered and waiting to finish."""
        return len(self._pending) + len(self._tails)

    @property
    def finishing(self) -> int:
        """Answered requests whose connection went on, still to finish (:meth:`later`)."""
        return len(self._tails)

    def _arm(self) -> asyncio.AbstractEventLoop:
        if (loop := self._loop) is None:
            loop = self._loop = asyncio.get_running_loop()
        if self._timer is None:
            self._timer = loop.call_later(BOOK_DELAY_S, self.flush)
        return loop

    def add(self, ctx: Ctx, now: float) -> None:
        """Settle ``ctx``'s key now and book the rest of it, ended at ``now`` (``time.perf_counter()``), within
        ``BOOK_DELAY_S``."""
        settle(self._sinks, ctx)
        self._pending.append((ctx, now))
        self._arm()

    async def later(self, handler: asyncio.Task[Any]) -> None:
        """Wait for the next batch (``BOOK_DELAY_S`` at most): an answered request whose connection serves its
        next request already (``handler``: its task, followed by :meth:`drain`) finishes then, while the
        gateway waits on that request's provider."""
        waiter = self._arm().create_future()
        self._waiting.append(waiter)
        if handler not in self._tails:
            self._tails.add(handler)
            handler.add_done_callback(self._tails.discard)
        await waiter

    def flush(self) -> None:
        """Book every ended request now and let the waiting tails go on (they are booked with the next batch).
        One that fails is logged; the others are booked all the same."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)
        while self._pending:
            pending, self._pending = self._pending, []
            for ctx, now in pending:
                try:
                    record(self._sinks, ctx, now)
                except Exception:
                    log.exception("bookkeeping of request %s failed", ctx.request_id)
        if (quality := self._sinks.quality) is not None:
            quality.flush()  # the batch's quality signals at once (answer_quality.py)

    async def drain(self) -> None:
        """Every request answered so far booked: the waiting tails finish first (within ``_DRAIN_S``)."""
        deadline = time.monotonic() + _DRAIN_S
        while self._tails and (left := deadline - time.monotonic()) > 0:
            self.flush()
            await asyncio.wait(list(self._tails), timeout=left)
        self.flush()


def books_first(books: Books) -> Callable[..., Any]:
    """aiohttp middleware: whatever the gateway's own endpoints show (``/metrics``, ``/admin``, the dashboard)
    includes every request answered before (a ``/v1`` request through aiohttp books nothing first)."""

    @web.middleware
    async def settle_first(request: web.Request, handler: Handler) -> web.StreamResponse:
        if len(books) and not request.path.startswith("/v1/"):
            await books.drain()
        return await handler(request)

    return settle_first


def record(sinks: Sinks, ctx: Ctx, now: float) -> None:
    """One ledger row and the request metrics, for every request, whatever its outcome.

    ``now`` is the request's end (``time.perf_counter()``), taken when the handler finished.
    """
    result, provider = ctx.result, ctx.provider
    served = ctx.status == 200 and result is not None
    prompt, output, cost, prompt_estimated = _usage(ctx)
    estimated = (result.tokens_estimated if result is not None else False) or prompt_estimated
    ttft_ms = (ctx.first_token_at - ctx.t0) * 1000.0 if ctx.first_token_at is not None else None
    e2e_ms = (now - ctx.t0) * 1000.0
    answer_ms = _answer_ms(ttft_ms, result)
    overhead_ms = ctx.overhead_ms(ctx.first_token_at if ctx.first_token_at is not None else now)
    pname = provider.name if provider is not None else "-"
    sinks.metrics.request(ctx.alias, pname, ctx.outcome, ctx.protocol).inc()
    if served and provider is not None:
        m = sinks.metrics.served(ctx.alias, pname, provider.config.price.currency)
        m.e2e.observe(e2e_ms / 1000.0)
        if ttft_ms is not None:
            m.ttft.observe(ttft_ms / 1000.0)
        if answer_ms is not None:
            m.ttft_answer.observe(answer_ms / 1000.0)
        if result is not None and result.reasoning_tokens:
            m.reasoning_tokens.inc(result.reasoning_tokens)
        if result is not None and result.cached_tokens:
            m.cached_tokens.inc(result.cached_tokens)
        m.overhead.observe(overhead_ms / 1000.0)
        m.input_tokens.inc(prompt or 0)
        m.output_tokens.inc(output or 0)
        if cost is not None:
            m.cost.inc(cost)
    if (obs := ctx.quality) is not None and served and sinks.quality is not None:
        sinks.quality.judge(obs, result)
    sinks.traffic.observe_route(ctx.route, ctx.outcome, output, ttft_ms, e2e_ms, stream=ctx.stream)  # per minute
    if sinks.trace is not None and ctx.alias in ctx.table.aliases:
        sinks.trace.record(ctx.t0, ctx.alias, ctx.traffic_class, prompt, output, ctx.stream, ctx.status)
    if sinks.ledger is not None or sinks.divert is not None or sinks.telemetry is not None:
        row = LedgerRow(
            ts=ctx.wall,
            request_id=ctx.request_id,
            key_id=ctx.key_id,
            alias=ctx.alias,
            provider=provider.name if provider is not None else None,
            upstream_model=ctx.route.model if ctx.route is not None else None,
            endpoint=ctx.endpoint,
            stream=ctx.stream,
            traffic_class=ctx.traffic_class,
            status=ctx.status,
            outcome=ctx.outcome,
            attempts=ctx.attempts,
            prompt_tokens=prompt,
            output_tokens=output,
            tokens_estimated=estimated,
            ttft_ms=ttft_ms if served else None,
            e2e_ms=e2e_ms,
            overhead_ms=overhead_ms if served else None,
            cost=cost,
            ttft_answer_ms=answer_ms if served else None,
            reasoning_tokens=result.reasoning_tokens if result is not None else None,
            cached_tokens=result.cached_tokens if result is not None else None,
            api=ctx.protocol,
            # refused before its attempts (lane_of not asked yet): its class still says the batch lane
            lane="batch-live" if ctx.traffic_class == "batch" else ctx.lane,
            price_tier=provider.price_tier(ctx.wall) if cost is not None and provider is not None else None,
        )
        # divert only the gateway's own requests: a client's x-request-id may equal a batch line's
        diverted = ctx.self_call and sinks.divert is not None and sinks.divert(row)
        if not diverted and sinks.ledger is not None:
            sinks.ledger.record(row)
        if sinks.telemetry is not None:  # the spans and metric points say what the row says
            sinks.telemetry.record(ctx, row, now)


def settle(sinks: Sinks, ctx: Ctx) -> None:
    """The key's reservation → what the request used (the numbers its ledger row will say). At once when the
    request ends, not with the rest of its books: its ``max_concurrency`` slot is free for the key's next
    request. A request that never went upstream (refused, for whatever reason) keeps nothing: its rpm goes
    back too (docs/keys.md, "A refusal keeps nothing")."""
    if ctx.rpm_taken is not None and ctx.attempts == 0 and ctx.key_id is not None:
        sinks.refund_rpm(ctx.key_id, ctx.rpm_taken)
        ctx.rpm_taken = None
    if ctx.ticket is not None:
        prompt, output, cost, _ = _usage(ctx)
        sinks.admission.settle(ctx.ticket, prompt, output, cost)


def _usage(ctx: Ctx) -> tuple[int | None, int | None, float | None, bool]:
    """(prompt tokens, output tokens, cost, prompt estimated) of an ended request; cost only for output that
    reached the client. Worked out once (``ctx.usage``): the settlement and the ledger row read the same numbers.

    A request that produced output is charged its prompt plus what it produced (docs/keys.md): the prompt from
    the provider's ``usage`` when it came, else — a stream cut short or left by its client — the gateway's own
    count (``ctx.prompt_estimate``: the prompt bound, ``estimate.prompt_bound``; the row is flagged
    ``tokens_estimated``). The cost prices the prompt tokens the provider served from its cache at
    ``price.cached_input`` (``ProviderState.cost``)."""
    if ctx.usage is not None:
        return ctx.usage
    result, provider = ctx.result, ctx.provider
    if result is None:
        ctx.usage = (None, None, None, False)
        return ctx.usage
    prompt, output = result.prompt_tokens, result.output_tokens
    produced = ctx.first_token_at is not None  # served, or a stream ended early
    # the prompt charged is the gateway's count when output reached the client and the provider never said
    estimated = prompt is None and produced and ctx.prompt_estimate is not None
    if estimated:
        prompt = round(ctx.prompt_estimate or 0.0)
    cost = None
    if produced and provider is not None:
        cost = provider.cost(prompt, output, result.cached_tokens, at=ctx.wall)
    ctx.usage = (prompt, output, cost, estimated)
    return ctx.usage


def _answer_ms(ttft_ms: float | None, result: CallResult | None) -> float | None:
    """The client's time to first answer token: its TTFT plus the upstream's gap from first token to first answer."""
    if ttft_ms is None or result is None or result.ttft_answer_ms is None or result.ttft_ms is None:
        return None
    return ttft_ms + max(0.0, result.ttft_answer_ms - result.ttft_ms)
