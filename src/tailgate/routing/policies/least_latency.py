"""The ``least-latency`` policy: power of two choices on peak-EWMA latency × (in-flight + 1).

For each request two distinct eligible routes (weight > 0) are drawn uniformly at random; the one with the
lower score goes first, where

    score = latency estimate (ms) × (in-flight + 1)

and the estimate is the provider × model's peak-EWMA (``ProviderHealth.ttft_peak`` by default, or
``e2e_peak`` with ``metric="e2e"``; time constant 30 s, set on the ``HealthRegistry``): a slow response
raises it at once, fast ones bring it down over ~30 s; a fault feeds it a penalty (≥ 2 s and ≥ twice the
estimate) so a provider that fails fast never looks fast. A never-seen route scores ``default_rtt_ms``
(250 ms, as Helicone's balancer) rather than 0 (LiteLLM's choice, which sends everything to a new or
broken deployment): unseen routes get explored when the known ones are slower than that, and not
otherwise. Multiplying by the in-flight count makes it queue-aware: a fast provider that is piling up
requests loses to an idle slightly slower one. The rest of the order follows by ascending score; weight-0
routes come last; class preference and exclusion are as in ``WeightedPolicy``; open breakers are left out.
A route whose estimate is more than ``SLOW_FACTOR`` (3) times the best route's is never drawn first: the
in-flight multiplier would otherwise send an idle but several-times-slower provider a share of the requests,
and those set the alias's P99.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from typing import Any, Literal

from tailgate.routing.affinity import Sticky
from tailgate.routing.breaker import BreakerRegistry
from tailgate.routing.health import HealthRegistry
from tailgate.routing.policies._common import eligible, split_by_class
from tailgate.routing.route import Route

__all__ = ["LeastLatencyPolicy"]

SLOW_FACTOR = 3.0
"""A route whose estimate exceeds this multiple of the best route's is never drawn first."""


class LeastLatencyPolicy:
    """P2C on peak-EWMA × (in-flight + 1); see the module docstring."""

    name = "least-latency"

    def __init__(
        self,
        health: HealthRegistry,
        *,
        breakers: BreakerRegistry | None = None,
        metric: Literal["ttft", "e2e"] = "ttft",
        default_rtt_ms: float = 250.0,
        rng: random.Random | None = None,
    ) -> None:
        self.health = health
        self.breakers = breakers
        self.metric = metric
        self.default_rtt_ms = default_rtt_ms
        self._rng = rng or random.Random()
        self._seen: dict[tuple[str, str, str], Route] = {}

    def estimate_ms(self, route: Route) -> float:
        return self.health.get(route.provider, route.model).latency_estimate_ms(self.metric, self.default_rtt_ms)

    def score(self, route: Route) -> float:
        """Estimated latency (ms) × (in-flight + 1); lower is better."""
        return self.estimate_ms(route) * (self.health.get(route.provider, route.model).in_flight + 1)

    def _order_group(self, routes: Sequence[Route]) -> list[Route]:
        live = [r for r in routes if r.weight > 0]
        zero = [r for r in routes if r.weight <= 0]
        if not live:
            return zero
        scores = {r: self.score(r) for r in live}
        # A route whose latency estimate is several times the best one's goes last, whatever its in-flight
        # count: the queue-aware score would otherwise send an idle but much slower provider a request now
        # and then, and those requests set the tail (P99) of the whole alias.
        estimates = {r: self.estimate_ms(r) for r in live}
        best = min(estimates.values())
        fast = [r for r in live if estimates[r] <= SLOW_FACTOR * best]
        if len(fast) < len(live):
            slow = sorted((r for r in live if r not in fast), key=lambda r: scores[r])
            return [*self._order_group(fast), *slow, *zero]
        if len(live) == 1:
            first = live[0]
        else:
            a, b = self._rng.sample(live, 2)
            first = a if scores[a] < scores[b] or (scores[a] == scores[b] and self._rng.random() < 0.5) else b
        rest = sorted((r for r in live if r is not first), key=lambda r: scores[r])
        return [first, *rest, *zero]

    def order(
        self,
        routes: Sequence[Route],
        traffic_class: str | None = None,
        exclude: Collection[str] = (),
        sticky: Sticky | None = None,
    ) -> list[Route]:
        """Routes to try, best first (see the module docstring). ``sticky`` is not used: this policy picks the
        lowest latency per request, which no conversation affinity may override (docs/routing.md, promise 7)."""
        for r in routes:
            self._seen[(r.alias, r.provider, r.model)] = r
        preferred, rest = split_by_class(eligible(routes, exclude, self.breakers), traffic_class)
        return self._order_group(preferred) + self._order_group(rest)

    def explain(self, routes: Sequence[Route] | None = None) -> dict[str, dict[str, Any]]:
        """provider → configured weight, effective weight (0 when the breaker is open, else the configured
        one: P2C does not split by weight), factor (best score / this score, 1.0 for the best), reason."""
        routes = list(routes) if routes is not None else list(self._seen.values())
        scores = {r: self.score(r) for r in routes}
        best = min((s for r, s in scores.items() if r.weight > 0), default=0.0)
        out: dict[str, dict[str, Any]] = {}
        for r in routes:
            h = self.health.get(r.provider, r.model)
            est = self.estimate_ms(r)
            is_open = self.breakers is not None and self.breakers.get(r.provider).is_open
            seen = (h.ttft_peak if self.metric == "ttft" else h.e2e_peak).is_set
            reason = (
                "breaker open"
                if is_open
                else f"score {scores[r]:.0f} ms = {'peak-EWMA' if seen else 'default RTT'} {est:.0f} ms"
                f" x ({h.in_flight} in flight + 1)"
            )
            out[r.provider] = {
                "alias": r.alias,
                "model": r.model,
                "configured_weight": r.weight,
                "effective_weight": 0.0 if is_open else r.weight,
                "factor": best / scores[r] if scores[r] > 0 else 1.0,
                "reason": reason,
                "score_ms": scores[r],
            }
        return out
