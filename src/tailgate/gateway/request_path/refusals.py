"""The gateway's own answers when it cannot serve a request: no route, shed, paced out, or every attempt failed.

Each builds the OpenAI-shaped ``WireError`` to send and sets the request's ledger ``outcome``; a 429 of the
gateway's own always carries a ``Retry-After``. Split from ``proxy.py``, which keeps the request path.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError

if TYPE_CHECKING:
    from prometheus_client import Counter

    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.gateway.request_path.request_context import Ctx
    from tailgate.routing import Route
    from tailgate.routing.breaker import BreakerRegistry
    from tailgate.upstream import CallResult

__all__ = ["error_outcome", "final_error", "no_route", "paced_out", "shed"]

_PASSED_ON = ("http_4xx", "insufficient_quota", "rate_limited", "http_5xx")
"""Upstream error classes whose (redacted) OpenAI error is returned to the client as it is."""


def _retry_after(err: WireError, seconds: float) -> WireError:
    err.headers = {"Retry-After": str(max(1, math.ceil(seconds)))}
    return err


def no_route(
    providers: Mapping[str, ProviderState], breakers: BreakerRegistry, routes: Sequence[Route], now: float, ctx: Ctx
) -> WireError:
    """No route could take the request: every provider drained, paused by a 429, or behind a breaker that admits
    nothing now. Paused ones make it a 429 with Retry-After; else a 503 that says, per provider, which it is."""
    states = [providers[r.provider] for r in routes if r.provider in providers]
    paused = [p for p in states if p.paused(now) and not p.drained]
    ctx.outcome = "no_route"
    if paused:
        wait = min(p.admit_in(0.0, now) for p in paused)
        if len({p.name for p in paused}) == len({p.name for p in states}):
            text = f"Every provider for '{ctx.alias}' is rate limited right now. Retry after {wait:.1f}s."
        else:  # not "every provider is rate limited": say what holds back each of them
            why = ", ".join(f"{name}: {reason}" for name, reason in _unavailable(states, breakers, now))
            text = f"No provider can take a request for '{ctx.alias}' now ({why}). Retry after {wait:.1f}s."
        return _retry_after(wire_errors.rate_limited(text), wait)
    why = ", ".join(f"{name}: {reason}" for name, reason in _unavailable(states, breakers, now))
    err = wire_errors.overloaded(f"No provider is available for '{ctx.alias}' ({why or 'none is configured'}).")
    retry = [breakers.get(p.name).retry_in() for p in states if not p.drained]
    if retry:
        _retry_after(err, min(retry))
    return err


def _unavailable(states: Sequence[ProviderState], breakers: BreakerRegistry, now: float) -> list[tuple[str, str]]:
    """Why each provider cannot take a request now, once per provider, in route order."""
    out: dict[str, str] = {}
    for p in states:
        if p.name in out:
            continue
        breaker = breakers.get(p.name)
        if p.drained:
            out[p.name] = "drained"
        elif p.paused(now):
            out[p.name] = f"rate limited (429), paused for {p.admit_in(0.0, now):.1f}s more"
        elif breaker.is_open:
            out[p.name] = f"circuit breaker open for {breaker.retry_in():.0f}s more"
        elif not breaker.can_admit():
            out[p.name] = "circuit breaker half-open, its trial requests in flight"
        else:
            out[p.name] = "its attempts could not start"
    return list(out.items())


def shed(counter: Counter, ctx: Ctx, pressure: float, others_in_flight: int) -> WireError:
    """Load shedding (``routing.shed``): a 429 with Retry-After; batch goes first (docs/routing.md)."""
    cfg = ctx.table.shed
    ctx.outcome = "shed"
    counter.labels(ctx.alias, ctx.traffic_class or "").inc()  # tailgate_shed
    who = f"'{ctx.traffic_class}' traffic" if ctx.traffic_class else "traffic"
    return _retry_after(
        wire_errors.rate_limited(
            f"The gateway is shedding {who}: {others_in_flight} requests in flight, {pressure:.0%} of "
            f"routing.shed.max_in_flight ({cfg.max_in_flight}). Retry after {cfg.retry_after:g}s."
        ),
        cfg.retry_after,
    )


def paced_out(paced: list[ProviderState], tokens: float, ctx: Ctx) -> WireError:
    """Every route was skipped by its pacer: a 429 of our own, Retry-After = the shortest wait."""
    now = time.monotonic()
    wait = min(p.admit_in(tokens, now) for p in paced)
    ctx.outcome = "rate_limited"
    return _retry_after(
        wire_errors.rate_limited(
            f"Every provider for '{ctx.alias}' is at its known rate limit right now. Retry after {wait:.1f}s."
        ),
        wait,
    )


def final_error(last: CallResult | None, ctx: Ctx) -> WireError:
    """Every attempt failed (or none could start before the deadline): what the client gets.

    A request cancelled under us re-raises ``CancelledError``; an upstream 4xx, 5xx, 429 or
    insufficient_quota is passed on in the OpenAI shape (redacted); timeouts are 504, the rest 502.
    """
    if last is None:
        ctx.outcome = "deadline"
        return wire_errors.timeout("The retry deadline passed before any provider could be tried.")
    ctx.outcome = last.error_class or "error"
    if last.error_class == "cancelled":
        raise asyncio.CancelledError
    if last.error is not None and last.error_class in _PASSED_ON:
        err = last.error
        if last.error_class == "rate_limited" and last.retry_after_s is not None:
            _retry_after(err, last.retry_after_s)
        return err
    if last.error_class is not None and last.error_class.startswith("timeout"):
        return wire_errors.timeout(
            f"The upstream did not answer in time ({last.error_class}) after {ctx.attempts} attempt(s)."
        )
    # The class names what failed; its detail (an exception's text, an address) stays in the log and the ledger.
    return wire_errors.bad_gateway(f"The upstream failed ({last.error_class}) after {ctx.attempts} attempt(s).")


def error_outcome(err: WireError) -> str:
    """The ledger outcome of a request refused before any attempt (bad request, key, size …)."""
    if err.status == 401:
        return "unauthorized"
    if err.status == 413:
        return "too_large"
    if err.status == 429:
        return "rate_limited"
    return "bad_request" if err.status == 400 else f"http_{err.status}"
