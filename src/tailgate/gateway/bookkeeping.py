"""Every request's bookkeeping once it ends: the key's settlement, the Prometheus series, the per-minute
traffic aggregates, the trace and one ledger row — whatever the outcome (``Proxy`` calls :func:`record`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tailgate.ledger import LedgerRow
from tailgate.upstream import CallResult

if TYPE_CHECKING:
    from tailgate.gateway.app import Gateway
    from tailgate.gateway.proxy import _Ctx

__all__ = ["record"]


def record(gw: Gateway, ctx: _Ctx, now: float) -> None:
    """One ledger row and the request metrics, for every request, whatever its outcome.

    ``now`` is the request's end (``time.perf_counter()``), taken when the handler finished.
    """
    result, provider = ctx.result, ctx.provider
    served = ctx.status == 200 and result is not None
    prompt = result.prompt_tokens if result is not None else None
    output = result.output_tokens if result is not None else None
    produced = result is not None and ctx.first_token_at is not None  # served, or a stream ended early
    cost = provider.cost(prompt, output) if (produced and provider is not None) else None
    if ctx.ticket is not None:
        gw.admission.settle(ctx.ticket, prompt, output, cost)  # the key's reservation → what the row says
    ttft_ms = (ctx.first_token_at - ctx.t0) * 1000.0 if ctx.first_token_at is not None else None
    e2e_ms = (now - ctx.t0) * 1000.0
    answer_ms = _answer_ms(ttft_ms, result)
    overhead_ms = ctx.overhead_ms(ctx.first_token_at if ctx.first_token_at is not None else now)
    pname = provider.name if provider is not None else "-"
    gw.metrics.request(ctx.alias, pname, ctx.outcome).inc()
    if served and provider is not None:
        m = gw.metrics.served(ctx.alias, pname, provider.config.price.currency)
        m.e2e.observe(e2e_ms / 1000.0)
        if ttft_ms is not None:
            m.ttft.observe(ttft_ms / 1000.0)
        if answer_ms is not None:
            m.ttft_answer.observe(answer_ms / 1000.0)
        if result is not None and result.reasoning_tokens:
            m.reasoning_tokens.inc(result.reasoning_tokens)
        m.overhead.observe(overhead_ms / 1000.0)
        m.input_tokens.inc(prompt or 0)
        m.output_tokens.inc(output or 0)
        if cost is not None:
            m.cost.inc(cost)
    gw.traffic.observe_route(ctx.route, ctx.outcome, output, ttft_ms, e2e_ms)  # per-minute aggregates
    if gw.trace is not None and ctx.alias in gw.aliases:
        gw.trace.record(ctx.t0, ctx.alias, ctx.traffic_class, prompt, output, ctx.stream, ctx.status)
    if gw.ledger is not None:
        gw.ledger.record(
            LedgerRow(
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
                tokens_estimated=result.tokens_estimated if result is not None else False,
                ttft_ms=ttft_ms if served else None,
                e2e_ms=e2e_ms,
                overhead_ms=overhead_ms if served else None,
                cost=cost,
                ttft_answer_ms=answer_ms if served else None,
                reasoning_tokens=result.reasoning_tokens if result is not None else None,
            )
        )


def _answer_ms(ttft_ms: float | None, result: CallResult | None) -> float | None:
    """The client's time to first answer token: its TTFT plus the upstream's gap from first token to first answer."""
    if ttft_ms is None or result is None or result.ttft_answer_ms is None or result.ttft_ms is None:
        return None
    return ttft_ms + max(0.0, result.ttft_answer_ms - result.ttft_ms)
