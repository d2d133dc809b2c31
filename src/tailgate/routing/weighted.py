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
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Route:
    """One way to serve an alias: provider, upstream model id, weight, preferred traffic classes."""

    alias: str
    provider: str
    model: str
    weight: float
    classes: frozenset[str] = frozenset()


def _weighted_shuffle(routes: Sequence[Route], rng: random.Random) -> list[Route]:
    """Order by the Efraimidis–Spirakis key u^(1/w): P(first) is proportional to weight."""
    keyed = [(rng.random() ** (1.0 / r.weight), r) for r in routes if r.weight > 0]
    keyed.sort(key=lambda kv: kv[0], reverse=True)
    return [r for _, r in keyed] + [r for r in routes if r.weight <= 0]


class WeightedPolicy:
    """Static weighted choice with class preference; ``rng`` is injectable for tests."""

    name = "weighted"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def order(
        self, routes: Sequence[Route], traffic_class: str | None = None, exclude: Collection[str] = ()
    ) -> list[Route]:
        """Routes to try, best first; providers in ``exclude`` are skipped."""
        usable = [r for r in routes if r.provider not in exclude]
        if traffic_class:
            preferred = [r for r in usable if traffic_class in r.classes]
            if preferred:
                rest = [r for r in usable if traffic_class not in r.classes]
                return _weighted_shuffle(preferred, self._rng) + _weighted_shuffle(rest, self._rng)
        return _weighted_shuffle(usable, self._rng)
