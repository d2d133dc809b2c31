"""Promise 5 of the router: start from what the monitor knows (docs/routing.md).

At start-up the gateway reads each provider × upstream model's recent TTFT P90 and error rate from the
store (``tailgate.ledger.leaderboard.recent_priors``: the monitor's probes) and hands them to every
``adaptive`` policy, which judges a route by them until it has evidence of its own. A provider the
monitor saw far over the SLO then starts demoted (probes only) instead of getting its configured share of
the first minute. No store, or nothing in it: no priors (every route starts as meeting its SLO).
"""

from __future__ import annotations

import logging
import time
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

from tailgate.ledger.leaderboard import recent_priors
from tailgate.ledger.store import open_store, redact_url
from tailgate.routing import AdaptivePolicy

if TYPE_CHECKING:
    from tailgate.gateway.request_path.routes import RouteTable

__all__ = ["PRIORS_WINDOW_S", "seed_priors"]

PRIORS_WINDOW_S = 900.0
"""How far back the monitor's samples count: 15 minutes (older ones say little about now)."""

log = logging.getLogger("tailgate.gateway.health.priors")


def seed_priors(
    store: str | Path | None, table: RouteTable, *, window_s: float = PRIORS_WINDOW_S, now: float | None = None
) -> int:
    """Read the recent priors from ``store`` (``ledger.url`` in a fleet: the monitor's samples are in the shared
    store, docs/ledger.md; else the ledger's SQLite file, if it exists) and seed every adaptive policy of
    ``table``; returns the number of routes seeded."""
    path = store
    if path is None or (not isinstance(path, str) and not Path(path).exists()):
        return 0
    try:
        with closing(open_store(path, connect_timeout=2.0)) as conn:
            priors = recent_priors(conn, window_s, time.time() if now is None else now)
    except Exception as exc:  # a store we cannot read must not stop the gateway: start without priors
        where = redact_url(path) if isinstance(path, str) else path
        log.warning("could not read the monitor's priors from %s: %s", where, exc)
        return 0
    wanted = set(table.targets())
    found = {k: v for k, v in priors.items() if k in wanted}
    for policy in table.policies.values():
        if isinstance(policy, AdaptivePolicy):
            policy.seed_priors(found)
    if found:
        log.info("routing priors from the monitor for %d route(s)", len(found))
    return len(found)
