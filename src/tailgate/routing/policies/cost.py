"""The ``cost`` policy: the cheapest route that meets the SLO; the fastest when none does.

A route's price is ``input + output`` USD per million tokens (``prices[provider]``, a ``Price``; a route
with no price counts as the most expensive). A route *meets the SLO* when its window's P90 TTFT ≤
``slo.ttft_p90`` and P90 E2E ≤ ``slo.e2e_p90`` — a metric with fewer than ``min_samples`` samples counts
as met (optimistic, so a new cheap route gets tried and measured) — and its fault rate is below
``max_error_rate`` (0.2). Order: routes meeting the SLO by ascending price (ties: larger configured
weight first), then the others by ascending P90 TTFT (then P90 E2E): when nothing meets the SLO the
fastest goes first. Weight-0 routes come last; class preference, exclusion and open breakers as in
the other policies.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from tailgate.routing.affinity import Sticky
from tailgate.routing.breaker import BreakerRegistry
from tailgate.routing.health import HealthRegistry
from tailgate.routing.policies._common import SLO, eligible, split_by_class
from tailgate.routing.route import Route

__all__ = ["CostPolicy", "Price"]


class Price(NamedTuple):
    """USD per million tokens."""

    input: float
    output: float

    @property
    def blended(self) -> float:
        return self.input + self.output


class CostPolicy:
    """See the module docstring."""

    name = "cost"

    def __init__(
        self,
        health: HealthRegistry,
        prices: Mapping[str, Price],
        *,
        breakers: BreakerRegistry | None = None,
        slo: SLO | None = None,
        slos: Mapping[str, SLO] | None = None,
        min_samples: int = 10,
        max_error_rate: float = 0.2,
    ) -> None:
        self.health = health
        self.prices = dict(prices)
        self.breakers = breakers
        self.slo = slo or SLO()
        self.slos = dict(slos or {})
        self.min_samples = min_samples
        self.max_error_rate = max_error_rate
        self._seen: dict[tuple[str, str, str], Route] = {}

    def price(self, route: Route) -> float:
        p = self.prices.get(route.provider)
        return p.blended if p is not None else math.inf

    def _p90s(self, route: Route) -> tuple[float | None, float | None]:
        h = self.health.get(route.provider, route.model)
        return h.p90_s("ttft", min_samples=self.min_samples), h.p90_s("e2e", min_samples=self.min_samples)

    def meets_slo(self, route: Route) -> bool:
        slo = self.slos.get(route.alias, self.slo)
        ttft, e2e = self._p90s(route)
        h = self.health.get(route.provider, route.model)
        errors_ok = h.requests < self.min_samples or h.error_rate < self.max_error_rate
        return (ttft is None or ttft <= slo.ttft_p90) and (e2e is None or e2e <= slo.e2e_p90) and errors_ok

    def _speed_key(self, route: Route) -> tuple[float, float]:
        ttft, e2e = self._p90s(route)
        return (math.inf if ttft is None else ttft, math.inf if e2e is None else e2e)

    def _order_group(self, routes: Sequence[Route]) -> list[Route]:
        live = [r for r in routes if r.weight > 0]
        ok = sorted((r for r in live if self.meets_slo(r)), key=lambda r: (self.price(r), -r.weight))
        slow = sorted((r for r in live if r not in ok), key=self._speed_key)
        return ok + slow + [r for r in routes if r.weight <= 0]

    def order(
        self,
        routes: Sequence[Route],
        traffic_class: str | None = None,
        exclude: Collection[str] = (),
        sticky: Sticky | None = None,
    ) -> list[Route]:
        """Routes to try, best first (see the module docstring). ``sticky`` is not used: the cheapest route that
        meets its SLO is one route for every conversation already (docs/routing.md, promise 7)."""
        for r in routes:
            self._seen[(r.alias, r.provider, r.model)] = r
        preferred, rest = split_by_class(eligible(routes, exclude, self.breakers), traffic_class)
        return self._order_group(preferred) + self._order_group(rest)

    def explain(self, routes: Sequence[Route] | None = None) -> dict[str, dict[str, Any]]:
        """provider → configured weight, effective weight (configured, 0 when open), factor (1.0 when the
        route meets the SLO, else 0.0), reason (price and P90s)."""
        routes = list(routes) if routes is not None else list(self._seen.values())
        out: dict[str, dict[str, Any]] = {}
        for r in routes:
            is_open = self.breakers is not None and self.breakers.get(r.provider).is_open
            ttft, e2e = self._p90s(r)
            meets = self.meets_slo(r)
            fmt = ["n/a" if v is None else f"{v:.2f}s" for v in (ttft, e2e)]
            out[r.provider] = {
                "alias": r.alias,
                "model": r.model,
                "configured_weight": r.weight,
                "effective_weight": 0.0 if is_open else r.weight,
                "factor": 1.0 if meets else 0.0,
                "reason": ("breaker open; " if is_open else "")
                + f"${self.price(r):g}/M in+out; p90 ttft {fmt[0]}, e2e {fmt[1]}; "
                + ("meets slo" if meets else "misses slo"),
            }
        return out
