"""What operators and clients ask the gateway about itself: ``GET /v1/models``, ``/healthz`` (and ``/health``),
``/readyz``, ``/metrics`` and the live view the dashboard shows. Read-only over the gateway's owners (core.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.gateway.admin.provider_admin import route_weights
from tailgate.wire.errors import WireError

if TYPE_CHECKING:
    from tailgate.gateway.access.auth import AccessGuard
    from tailgate.gateway.request_path.core import Core

__all__ = ["Ops"]

_BREAKER_CODE = {"closed": 0, "half_open": 1, "open": 2}


class Ops:
    """The handlers of the endpoints above, and the gauges ``/metrics`` sets at scrape."""

    def __init__(self, core: Core, guard: AccessGuard) -> None:
        self.core = core
        self.guard = guard
        self.effective_weight = core.metrics.effective_weight
        self.breaker_state = core.metrics.breaker_state

    def add_routes(self, app: web.Application, *, metrics: bool) -> None:
        """``/v1/models``, the health checks and (with ``metrics``: not on a bind of its own) ``/metrics``."""
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/health", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        if metrics:
            app.router.add_get("/metrics", self.metrics)

    async def models(self, request: web.Request) -> web.Response:
        """The aliases the caller's key may use (a key with ``models`` sees those only; docs/keys.md)."""
        core = self.core
        try:
            key_id = core.keys.identify(request)
        except WireError as err:
            return error_response(err)
        limits = core.key_directory.limits(key_id) if key_id is not None else None
        if limits is not None and limits.expires_at is not None and time.time() >= limits.expires_at:
            return error_response(WireError(401, "This API key has expired.", code="key_expired"))
        allowed = limits.models if limits is not None else None
        data = [
            {"id": alias, "object": "model", "created": 0, "owned_by": "tailgate"}
            for alias in core.routes.aliases
            if allowed is None or alias in allowed
        ]
        return web.json_response({"object": "list", "data": data})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        usable = [name for name, p in self.core.providers.items() if not p.drained]
        if not usable:
            return web.json_response({"status": "unavailable", "reason": "every provider is drained"}, status=503)
        return web.json_response({"status": "ready", "providers": usable})

    async def metrics(self, request: web.Request) -> web.Response:
        if (denied := self.guard.check(request, "metrics")) is not None:
            return error_response(denied)
        core = self.core
        core.fleet.refresh_metrics()
        core.admission.refresh_metrics()
        for name, p in core.providers.items():
            core.metrics.in_flight.labels(name).set(p.in_flight)
            self.breaker_state.labels(name).set(_BREAKER_CODE[core.breakers.get(name).state])
        table = core.routes
        for alias, routes in table.aliases.items():
            for provider, w in route_weights(table.policy_for(alias), routes).items():
                self.effective_weight.labels(alias, provider).set(w["effective_weight"])
        body = core.metrics.render(core.fleet.replica_label)
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    def live(self) -> dict[str, Any]:
        """What ``GET /admin/providers`` shows, minus base URLs: the dashboard's GETs need no admin key."""
        core = self.core
        now = time.monotonic()
        providers = []
        for p in core.providers.values():
            snap = p.snapshot(now)
            snap.pop("base_url", None)
            snap["breaker"] = core.breakers.get(p.name).snapshot()
            providers.append(snap)
        table = core.routes
        routing = {
            alias: {"policy": table.policy_for(alias).name, "weights": route_weights(table.policy_for(alias), routes)}
            for alias, routes in table.aliases.items()
        }
        aliases = {
            alias: [{"provider": r.provider, "model": r.model, "weight": r.weight} for r in routes]
            for alias, routes in table.aliases.items()
        }
        return {
            "policy": table.policy,
            "clock": now,
            "routing": routing,
            "providers": providers,
            "aliases": aliases,
            "fleet": core.fleet.live_view(),  # every replica, the answering one named; merged windows
        }
