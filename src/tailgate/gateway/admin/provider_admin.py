"""Admin endpoints (admin key required): provider state, drain and enable — the failover drill.

``POST /admin/providers/{name}/drain``: no new request goes to that provider from now on; requests
already in flight finish. ``/enable`` takes it back. ``GET /admin/providers`` shows every provider's
state (active / paused / drained), breaker, pacer, probes, live window stats per upstream model
(P50/P90/P99 TTFT and E2E, error rate and classes, in-flight, 429s, tok/s) and, per alias, every
route's configured and effective weight with the reason (the factor that moved it). Never a key.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.routing import BreakerRegistry, HealthRegistry, Policy, Route
from tailgate.routing.quality import QualityBoard
from tailgate.wire import errors as wire_errors

if TYPE_CHECKING:
    from tailgate.gateway.access.auth import AccessGuard
    from tailgate.gateway.fleet.fleet_sync import Fleet
    from tailgate.gateway.health.active_probes import Prober
    from tailgate.gateway.request_path.core import InForce

log = logging.getLogger("tailgate.gateway")


def add_admin_routes(
    app: web.Application,
    in_force: InForce,
    *,
    health: HealthRegistry,
    breakers: BreakerRegistry,
    fleet: Fleet,
    access: AccessGuard,
    prober: Prober,
    quality: QualityBoard | None = None,
) -> None:
    """The routes above over the route table and providers in force, the health windows, breakers and fleet, the
    access guard and the prober."""

    def guard(request: web.Request) -> web.Response | None:
        # Constant-time digest comparison, and a per-address lockout after repeated wrong keys (auth.py).
        denied = access.check(request, "admin")
        return error_response(denied) if denied is not None else None

    async def providers(request: web.Request) -> web.Response:
        if (denied := guard(request)) is not None:
            return denied
        now = time.monotonic()
        routing = {}
        weights_by_provider: dict[str, dict[str, Any]] = {}
        table = in_force.routes
        for alias, routes in table.aliases.items():
            policy = table.policy_for(alias)
            weights = route_weights(policy, routes)
            hedger = table.hedgers.get(alias)
            slo = table.slo_for(alias)
            routing[alias] = {
                "policy": policy.name,
                "slo": {"ttft_p90_s": slo.ttft_p90, "e2e_p90_s": slo.e2e_p90},
                "weights": weights,
                "hedge": hedger.snapshot() if hedger is not None else None,
            }
            for provider, w in weights.items():
                weights_by_provider.setdefault(provider, {})[alias] = w
        windows = {(h.provider, h.model): h for h in health}
        own = request.query.get("view") == "replica"  # a fleet: this replica's own windows, not the merged ones
        providers = []
        for p in in_force.providers.values():
            snap = p.snapshot(now)
            snap["breaker"] = breakers.get(p.name).snapshot()
            snap["effective_weights"] = weights_by_provider.get(p.name, {})
            models = sorted({r.model for routes in table.aliases.values() for r in routes if r.provider == p.name})
            snap["models"] = {
                m: {
                    "window": fleet.window_snapshot(windows[(p.name, m)], own=own) if (p.name, m) in windows else None,
                    "probes": prober.stats[(p.name, m)].as_dict() if (p.name, m) in prober.stats else None,
                    "quality": quality_view(quality, p.name, m),
                }
                for m in models
            }
            providers.append(snap)
        return web.json_response(
            {
                "fleet": fleet.view(own),
                "policy": table.policy,
                "routing": routing,
                "providers": providers,
                "aliases": {
                    alias: [
                        {"provider": r.provider, "model": r.model, "weight": r.weight, "classes": sorted(r.classes)}
                        for r in routes
                    ]
                    for alias, routes in table.aliases.items()
                },
            }
        )

    async def set_drained(request: web.Request, drained: bool) -> web.Response:
        if (denied := guard(request)) is not None:
            return denied
        name = request.match_info["name"]
        provider = in_force.providers.get(name)
        if provider is None:
            return error_response(wire_errors.not_found(f"No provider named {name!r}."))
        await fleet.set_drained(name, drained)  # every replica of a fleet, within a second (docs/fleet.md)
        log.info("provider %s %s by admin", name, "drained" if drained else "enabled")
        return web.json_response({"provider": name, "state": "drained" if drained else "active"})

    async def drain(request: web.Request) -> web.Response:
        return await set_drained(request, True)

    async def enable(request: web.Request) -> web.Response:
        return await set_drained(request, False)

    app.router.add_get("/admin/providers", providers)
    app.router.add_post("/admin/providers/{name}/drain", drain)
    app.router.add_post("/admin/providers/{name}/enable", enable)


def quality_view(board: QualityBoard | None, provider: str, model: str) -> dict[str, dict[str, Any]] | None:
    """signal → good / trials over the board's window (promise 8) and the 95 % Wilson interval of the good share;
    this replica's traffic, the fleet's read back from the store, the monitor's canaries (``canary``)."""
    if board is None:
        return None
    out: dict[str, dict[str, Any]] = {}
    for signal, c in board.view([(provider, model)], board_now())[(provider, model)].items():
        low, high = c.interval
        out[signal] = {"ok": c.successes, "n": c.trials, "rate": c.rate, "low": low, "high": high, "shown": c.shown()}
    return out


def board_now() -> float:
    return time.monotonic()  # the board's clock (AnswerQuality.clock, HealthRegistry's)


def route_weights(policy: Policy, routes: Sequence[Route]) -> dict[str, dict[str, Any]]:
    """provider → explain entry (configured and effective weight, factor, reason) under ``policy``."""
    return policy.explain(routes)
