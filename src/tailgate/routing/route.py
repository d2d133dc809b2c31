"""A route (one way to serve an alias) and the one weighted draw every policy orders routes by.

A leaf of the routing package: every policy, the promises and the gateway take :class:`Route` from here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Route", "weighted_order"]


@dataclass(frozen=True, slots=True)
class Route:
    """One way to serve an alias: provider, upstream model id, weight, preferred traffic classes."""

    alias: str
    provider: str
    model: str
    weight: float
    classes: frozenset[str] = frozenset()


def weighted_order(routes: Sequence[Route], weight: Callable[[Route], float], rng: random.Random) -> list[Route]:
    """Efraimidis–Spirakis order by the key ``u ** (1 / weight(route))``: P(first) ∝ weight; routes of weight ≤ 0
    go last, in their order. One ``rng.random()`` per route of positive weight, in the routes' order."""
    keyed: list[tuple[float, Route]] = []
    zero: list[Route] = []
    for r in routes:
        w = weight(r)
        if w > 0:
            keyed.append((rng.random() ** (1.0 / w), r))
        else:
            zero.append(r)
    keyed.sort(key=lambda kv: kv[0], reverse=True)
    return [r for _, r in keyed] + zero
