"""What every policy shares: the ``Policy`` protocol, SLOs, class preference, shedding, weighted shuffles."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tailgate.routing.affinity import Sticky
from tailgate.routing.breaker import BreakerRegistry
from tailgate.routing.route import Route, weighted_order

__all__ = ["SLO", "Policy", "eligible", "should_shed", "split_by_class", "weighted_order"]


@dataclass(frozen=True, slots=True)
class SLO:
    """An alias's latency objective: P90 TTFT and P90 E2E, in seconds."""

    ttft_p90: float = 1.0
    e2e_p90: float = 3.0


class Policy(Protocol):
    """What the gateway calls for each request (``order``; ``sticky``: the request's conversation affinity,
    which a policy applies among the routes it admits, or ignores), and what ``/admin/providers``, ``/metrics`` and the
    dashboard show of it (``explain``: provider → configured and effective weight, factor, reason)."""

    name: str

    def order(
        self,
        routes: Sequence[Route],
        traffic_class: str | None = None,
        exclude: Collection[str] = (),
        sticky: Sticky | None = None,
    ) -> list[Route]: ...

    def explain(self, routes: Sequence[Route] | None = None) -> dict[str, dict[str, Any]]: ...


def split_by_class(routes: Sequence[Route], traffic_class: str | None) -> tuple[list[Route], list[Route]]:
    """(preferred, rest): routes listing ``traffic_class`` first, as ``WeightedPolicy`` does.

    With no class, or a class no route lists, every route is "preferred" and the rest is empty.
    """
    if traffic_class:
        preferred = [r for r in routes if traffic_class in r.classes]
        if preferred:
            return preferred, [r for r in routes if traffic_class not in r.classes]
    return list(routes), []


def eligible(routes: Sequence[Route], exclude: Collection[str], breakers: BreakerRegistry | None) -> list[Route]:
    """Routes not excluded and whose provider's breaker would admit a request now (open → out;
    half-open → in only while it has a free trial slot; the gateway still calls ``allow()``)."""
    out = [r for r in routes if r.provider not in exclude]
    if breakers is not None:
        out = [r for r in out if breakers.get(r.provider).can_admit()]
    return out


def should_shed(
    traffic_class: str | None,
    pressure: float,
    *,
    thresholds: Mapping[str, float] | None = None,
    default_threshold: float = 1.0,
) -> bool:
    """Whether to refuse a request of ``traffic_class`` at ``pressure`` (load / capacity, 1.0 = full).

    ``batch`` goes first (at 0.8 by default), every other class only when over capacity (1.0);
    ``thresholds`` overrides per class.
    """
    table = {"batch": 0.8} if thresholds is None else dict(thresholds)
    limit = table.get(traffic_class or "", default_threshold)
    return pressure >= limit
