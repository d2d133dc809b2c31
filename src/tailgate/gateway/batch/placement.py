"""Where a batch's lines run: a provider's own batch API or the gateway's batch lane, by expected cost (docs/batch.md,
"Paths")."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tailgate.config.schema import BatchConfig

if TYPE_CHECKING:
    from tailgate.gateway.request_path.core import Core
    from tailgate.routing import Route

__all__ = ["Placement", "place"]

_NOMINAL_TOKENS = (1000, 300)
"""The (prompt, output) tokens placement prices a line at when it compares paths."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a batch's lines run: ``lane`` ``provider-batch`` (on ``route``) or ``batch-lane``, and why."""

    lane: str
    route: Route | None
    expected_cost: float | None
    reason: str


def place(core: Core, alias: str, left_s: float, cfg: BatchConfig, now: float | None = None) -> Placement:
    """The cheapest path for a line of ``alias`` with ``left_s`` of its batch's window left: the lowest expected
    cost of a nominal line among the alias's routes, each priced at ``price.batch`` on a provider with a batch
    API (when the window allows a provider job) and at its live price (or time window) on the batch lane."""
    routes = core.routes.aliases.get(alias, ())
    at = time.time() if now is None else now
    best: Placement | None = None
    lane_best: float | None = None
    for route in routes:
        provider = core.providers.get(route.provider)
        if provider is None or provider.drained:
            continue
        price = provider.config.price
        live = price.quote(*_NOMINAL_TOKENS, at=at).cost
        lane_best = live if lane_best is None else min(lane_best, live)
        if provider.config.batch_api and left_s >= cfg.provider_min_left and provider.config.api_keys:
            cost = price.quote(*_NOMINAL_TOKENS, lane="provider-batch", at=at).cost
            if best is None or (best.expected_cost is not None and cost < best.expected_cost):
                best = Placement("provider-batch", route, cost, f"{route.provider}'s batch API")
    if best is not None and best.expected_cost is not None and (lane_best is None or best.expected_cost < lane_best):
        return best
    why = "no provider with a batch API is cheaper" if best is not None else "no route with a batch API in time"
    return Placement("batch-lane", None, lane_best, why)
