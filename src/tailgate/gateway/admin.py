"""Admin endpoints (admin key required): provider state, drain and enable — the failover drill.

``POST /admin/providers/{name}/drain``: no new request goes to that provider from now on; requests
already in flight finish. ``/enable`` takes it back. ``GET /admin/providers`` shows every provider's
state, in-flight count and live window stats (never a key).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.gateway.auth import unauthorized_admin
from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError

if TYPE_CHECKING:
    from tailgate.gateway.app import Gateway


def add_admin_routes(app: web.Application, gw: Gateway) -> None:
    def guard(request: web.Request) -> web.Response | None:
        if not gw.keys.is_admin(request):
            if gw.config.admin_key is None:
                return error_response(
                    WireError(403, "Admin endpoints are off: set admin_key in the config.", type="request_forbidden")
                )
            return error_response(unauthorized_admin())
        return None

    async def providers(request: web.Request) -> web.Response:
        if (denied := guard(request)) is not None:
            return denied
        now = time.monotonic()
        providers = []
        for p in gw.providers.values():
            snap = p.snapshot(now)
            snap["breaker"] = gw.breakers.get(p.name).snapshot()
            providers.append(snap)
        routing = {}
        for alias, routes in gw.aliases.items():
            policy = gw.policy_for(alias)
            explain = getattr(policy, "explain", None)
            routing[alias] = {"policy": policy.name, "weights": explain(routes) if explain is not None else None}
        return web.json_response(
            {
                "policy": gw.config.routing.policy,
                "routing": routing,
                "providers": providers,
                "aliases": {
                    alias: [
                        {"provider": r.provider, "model": r.model, "weight": r.weight, "classes": sorted(r.classes)}
                        for r in routes
                    ]
                    for alias, routes in gw.aliases.items()
                },
            }
        )

    async def set_drained(request: web.Request, drained: bool) -> web.Response:
        if (denied := guard(request)) is not None:
            return denied
        name = request.match_info["name"]
        provider = gw.providers.get(name)
        if provider is None:
            return error_response(wire_errors.not_found(f"No provider named {name!r}."))
        provider.drained = drained
        gw.refresh_provider_gauges()
        gw.log.info("provider %s %s by admin", name, "drained" if drained else "enabled")
        return web.json_response({"provider": name, "state": "drained" if drained else "active"})

    async def drain(request: web.Request) -> web.Response:
        return await set_drained(request, True)

    async def enable(request: web.Request) -> web.Response:
        return await set_drained(request, False)

    app.router.add_get("/admin/providers", providers)
    app.router.add_post("/admin/providers/{name}/drain", drain)
    app.router.add_post("/admin/providers/{name}/enable", enable)
