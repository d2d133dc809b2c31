"""The ``weighted`` policy: static weights, traffic-class preference, and a fallback order.

A request gets an *order* of routes, not one route: the first is drawn by weight, the rest follow in a
weighted random order (so fallback spreads the way the weights say) and routes of weight 0 come last
(pure fallbacks). Traffic classes (``x-tailgate-class``) *prefer*: a ``batch`` request is ordered among
the routes that list ``batch`` first and falls back to the others; a request without a class, or with
a class no route lists, is ordered among all routes. Excluded providers (drained, paused by a 429's
``Retry-After``) are left out. Later policies (adaptive, least-latency, cost) implement the same
``order()`` signature with other weights.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from typing import Any

from tailgate.routing.affinity import Sticky
from tailgate.routing.route import Route, weighted_order

__all__ = ["WeightedPolicy"]


def _weight(route: Route) -> float:
    return route.weight


class WeightedPolicy:
    """Static weighted choice with class preference; ``rng`` is injectable for tests."""

    name = "weighted"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def order(
        self,
        routes: Sequence[Route],
        traffic_class: str | None = None,
        exclude: Collection[str] = (),
        sticky: Sticky | None = None,
    ) -> list[Route]:
        """Routes to try, best first; providers in ``exclude`` are skipped. With ``sticky`` (a conversation's
        affinity key) the order is weighted rendezvous over the same routes and weights (routing/affinity.py)."""
        usable = [r for r in routes if r.provider not in exclude]
        if traffic_class:
            preferred = [r for r in usable if traffic_class in r.classes]
            if preferred:
                rest = [r for r in usable if traffic_class not in r.classes]
                if sticky is not None:
                    return sticky.first(preferred, _weight) + sticky.rest(rest, _weight)
                return weighted_order(preferred, _weight, self._rng) + weighted_order(rest, _weight, self._rng)
        if sticky is not None:
            return sticky.first(usable, _weight)
        return weighted_order(usable, _weight, self._rng)

    def explain(self, routes: Sequence[Route] | None = None) -> dict[str, dict[str, Any]]:
        """provider → configured and effective weight (always the configured one), factor 1.0, reason. This
        policy remembers no routes: without ``routes`` it explains none."""
        return {
            r.provider: {
                "alias": r.alias,
                "model": r.model,
                "configured_weight": r.weight,
                "effective_weight": r.weight,
                "factor": 1.0,
                "reason": "static weights (policy weighted)",
            }
            for r in routes or ()
        }
