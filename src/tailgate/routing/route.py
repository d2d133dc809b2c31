"""A route (one way to serve an alias) and the one weighted draw every policy orders routes by.

A leaf of the routing package: every policy, the promises and the gateway take :class:`Route` from here.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["Route", "route_hash", "weighted_order"]

_MASK = (1 << 64) - 1


def mix64(x: int) -> int:
    """splitmix64's finalizer: a 64-bit integer → a well-spread 64-bit integer."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def route_hash(provider: str, model: str) -> int:
    """A route's 64-bit identity, the same in every process (conversation affinity's rendezvous salt):
    CRC-32 of ``provider NUL model`` and its length through splitmix64's finalizer."""
    data = f"{provider}\x00{model}".encode("utf-8", "surrogatepass")
    return mix64((zlib.crc32(data) << 32) | (len(data) & 0xFFFFFFFF))


@dataclass(frozen=True, slots=True)
class Route:
    """One way to serve an alias: provider, upstream model id, weight, preferred traffic classes."""

    alias: str
    provider: str
    model: str
    weight: float
    classes: frozenset[str] = frozenset()
    salt: int = field(init=False, repr=False, compare=False)
    """:func:`route_hash` of (provider, model), computed once (affinity's rendezvous reads it per request)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "salt", route_hash(self.provider, self.model))


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
