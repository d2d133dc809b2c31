"""Hedged requests in the gateway: per-alias settings and budget, and the race between two attempts.

An alias with ``hedge`` configured (``models.<alias>.hedge`` or ``routing.hedge``) sends its first attempt
as usual. If that attempt has no first token (a non-streamed one: no complete answer) after the hedge
delay — the first route's current P90 TTFT (E2E for non-streamed requests; or P95/P99, or a fixed
duration) — and the alias's ``HedgeBudget`` allows one more hedge (≤ ``budget`` of its requests over
60 s), the same request goes to the next admissible route as well. The first attempt to produce a token
(a complete answer) *claims* the response; claiming cancels the other attempt at once, which closes its
upstream connection (its result is ``cancelled``: neutral for health and breakers). Outcomes are counted
in ``tailgate_hedges_total{alias, outcome}``:

- ``fired``: a hedge was sent; then exactly one of ``won`` (the hedge served the request), ``lost`` (the
  first attempt did) or ``failed`` (neither produced output; the request falls back as usual);
- ``no_budget``: the delay passed but the budget said no; ``no_route``: no other route could take it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter

from tailgate.config.schema import HedgeConfig
from tailgate.routing import HedgeBudget, ProviderHealth, hedge_delay

__all__ = ["Hedger", "Race"]

MIN_SAMPLES = 10
"""Below this many samples in the window the percentile is not trusted: the delay is ``hedge_delay``'s
default (1 s)."""

_QUANTILES = {"p90": 90.0, "p95": 95.0, "p99": 99.0}


class Hedger:
    """One alias's hedging: when to fire (``delay``), whether it may (``budget``), and its metric."""

    def __init__(
        self, alias: str, config: HedgeConfig, counter: Counter, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.alias = alias
        self.config = config
        self.budget = HedgeBudget(config.budget, clock=clock)
        self._counter = counter
        self.quantile = _QUANTILES.get(config.after) if isinstance(config.after, str) else None
        self.fixed_s = None if isinstance(config.after, str) else float(config.after)

    def delay(self, health: ProviderHealth, *, stream: bool) -> float:
        """Seconds to wait for the first attempt's first token (complete answer) before hedging."""
        measured = None
        if self.quantile is not None:
            measured = health.percentile_s("ttft" if stream else "e2e", self.quantile, min_samples=MIN_SAMPLES)
        return hedge_delay(measured, self.fixed_s)

    def count(self, outcome: str) -> None:
        self._counter.labels(self.alias, outcome).inc()

    def snapshot(self) -> dict[str, Any]:
        return {
            "after": self.config.after,
            "budget": self.config.budget,
            "requests_in_window": self.budget.requests,
            "hedges_in_window": self.budget.hedges,
        }


@dataclass(slots=True)
class Race:
    """The attempts of one hedged request. The first to ``claim()`` owns the response; the others are
    cancelled at that moment. ``on_claim(task)`` runs synchronously inside the claim (before the winner
    writes anything), so the response headers can name the winner."""

    on_claim: Callable[[asyncio.Task[Any]], None]
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    winner: asyncio.Task[Any] | None = None

    def claim(self) -> bool:
        """Called by an attempt about to send output: True if it is (or already was) the winner."""
        me = asyncio.current_task()
        if self.winner is None and me is not None:
            self.winner = me
            self.on_claim(me)
            for task in self.tasks:
                if task is not me:
                    task.cancel()
            return True
        return me is not None and self.winner is me

    async def cancel_all(self) -> None:
        """Cancel every attempt still running and wait for them (no task or connection outlives the request)."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
