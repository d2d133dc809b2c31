"""Where a batch's lines run: a provider's own batch API or the gateway's batch lane, by expected cost (docs/batch.md,
"Paths")."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tailgate.config.schema import BatchConfig

if TYPE_CHECKING:
    from tailgate.gateway.request_path.core import Core
    from tailgate.routing import Route

__all__ = ["DEFAULT_LINE_S", "Placement", "lane_lines", "place", "window_closing"]

_NOMINAL_TOKENS = (1000, 300)
"""The (prompt, output) tokens placement prices a line at when it compares paths."""
DEFAULT_LINE_S = 2.0
"""The seconds a line is taken to need at interactive pace until the executor has measured some."""


def window_closing(left_s: float, lines_left: int, cfg: BatchConfig, line_s: float = DEFAULT_LINE_S) -> bool:
    """Is the window about to close: less of it left than ``lines_left`` need at interactive pace (``concurrency``
    at once, ``line_s`` each) plus ``batch.close_margin``?"""
    need = math.ceil(max(lines_left, 0) / cfg.concurrency) * line_s
    return left_s < need + cfg.close_margin


def lane_lines(total: int, cfg: BatchConfig) -> int:
    """How many of a batch's ``total`` lines run on the batch lane when its path is a provider job: at most
    ``batch.lane_share`` of them, ``floor(lane_share × total)``. The lines are the first ones (``line`` below this):
    a rule of the line's index, so every replica of a fleet — and one that takes a dead replica's leases over —
    puts a line on the same path."""
    return min(total, max(0, math.floor(cfg.lane_share * total + 1e-9)))


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a batch's lines run: ``lane`` ``provider-batch`` (on ``route``), ``batch-lane`` or ``interactive`` (the
    window is about to close), and why. For ``provider-batch``, lines ``0 … lane_lines - 1`` run on the batch lane
    (the split, :func:`lane_lines`), the rest in provider jobs."""

    lane: str
    route: Route | None
    expected_cost: float | None
    reason: str
    lane_lines: int = 0


def place(
    core: Core,
    alias: str,
    left_s: float,
    cfg: BatchConfig,
    now: float | None = None,
    *,
    closing: bool = False,
    total: int = 0,
) -> Placement:
    """The cheapest path for a line of ``alias`` with ``left_s`` of its batch's window left: the lowest expected
    cost of a nominal line among the alias's routes, each priced at ``price.batch`` on a provider with a batch
    API (when the window allows a provider job) and at its live price (or time window) on the batch lane;
    ``interactive`` when the window is ``closing`` (:func:`window_closing`). A provider job's placement of a batch
    of ``total`` lines keeps :func:`lane_lines` of them for the batch lane (the spare budget live traffic leaves)."""
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
    if closing:
        return Placement("interactive", None, lane_best, "the window is about to close")
    if best is not None and best.expected_cost is not None and (lane_best is None or best.expected_cost < lane_best):
        split = lane_lines(total, cfg)
        if split <= 0:
            return best
        why = f"{best.reason}; lines 1-{split} on the batch lane (batch.lane_share)"
        return Placement(best.lane, best.route, best.expected_cost, why, split)
    why = "no provider with a batch API is cheaper" if best is not None else "no route with a batch API in time"
    return Placement("batch-lane", None, lane_best, why)
