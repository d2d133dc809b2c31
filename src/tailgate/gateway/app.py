"""The gateway application: wiring of config, provider state, policy, metrics, ledger and routes."""

from __future__ import annotations

import ipaddress
import logging
import time
from pathlib import Path

from aiohttp import web
from prometheus_client import Counter, Gauge

from tailgate._aiohttp import BODY_LIMITS_KEY, error_response, openai_shaped_errors
from tailgate.config.resolve import ResolvedProvider
from tailgate.config.schema import GatewayConfig
from tailgate.gateway.admin import add_admin_routes, route_weights
from tailgate.gateway.admin_keys import add_key_routes
from tailgate.gateway.admission import KeyAdmission, fleet_state, key_store
from tailgate.gateway.auth import AccessGuard, KeyRing
from tailgate.gateway.bookkeeping import Books, books_first
from tailgate.gateway.exchange import aiohttp_route
from tailgate.gateway.fleet import Fleet
from tailgate.gateway.front import FRONT_KEY, FrontRoutes
from tailgate.gateway.hedging import Hedger, hedge_counter
from tailgate.gateway.keys import KeyDirectory
from tailgate.gateway.limits import SourceLockout, body_limits, deadline_middleware
from tailgate.gateway.metrics import GatewayMetrics
from tailgate.gateway.priors import seed_priors
from tailgate.gateway.probes import Prober
from tailgate.gateway.proxy import Proxy
from tailgate.gateway.reload import Providers, Reloader, add_config_routes
from tailgate.gateway.revocation import revoked_counter
from tailgate.gateway.state import ProviderState, pacer_for
from tailgate.gateway.store_metrics import (
    register_ledger_metrics,
    register_runtime_metrics,
    register_store_metrics,
    register_upstream_metrics,
)
from tailgate.gateway.trace import TraceWriter
from tailgate.gateway.traffic import TrafficAggregator
from tailgate.ledger import SQLiteLedger, default_db_path
from tailgate.ledger.maintenance import Maintenance
from tailgate.ledger.spool import Shipper
from tailgate.routing import (
    SLO,
    AdaptivePolicy,
    BreakerConfig,
    BreakerRegistry,
    CostPolicy,
    HealthRegistry,
    LeastLatencyPolicy,
    Policy,
    Price,
    Route,
    Transition,
    WeightedPolicy,
)
from tailgate.state import open_state
from tailgate.upstream import UpstreamClient, endpoint_for
from tailgate.wire.errors import WireError

GATEWAY_KEY: web.AppKey[Gateway] = web.AppKey("gateway", object)  # type: ignore[arg-type]


_BREAKER_CODE = {"closed": 0, "half_open": 1, "open": 2}


class BindRefused(Exception):
    """Binding a non-loopback address without gateway keys, and the config does not allow it."""


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Gateway:
    """One gateway process. ``await start()`` before serving, ``await close()`` after."""

    def __init__(
        self,
        config: GatewayConfig,
        providers: dict[str, ResolvedProvider],
        *,
        ledger_path: Path | None = None,
        config_path: Path | None = None,
    ) -> None:
        self.config = config
        self.log = logging.getLogger("tailgate.gateway")
        keys_at = key_store(config, ledger_path)  # runtime keys, budgets: docs/keys.md
        self.key_directory = KeyDirectory(keys_at, config.keys, generation=self._keys_generation)
        self.keys = KeyRing(config.keys, config.admin_key, self.key_directory)
        server = config.server
        self.guard = AccessGuard(
            self.keys,
            dashboard_key=config.dashboard_key,
            metrics_key=config.metrics.key,
            lockout=SourceLockout(server.admin_max_failures, server.admin_failure_window),
        )
        self.providers = Providers(
            {  # a reload swaps it (gateway/reload.py)
                name: ProviderState(
                    config=resolved,
                    client=UpstreamClient(endpoint_for(resolved)),
                    pacer=pacer_for(resolved, config.routing.pacing),
                )
                for name, resolved in providers.items()
            }
        )
        self.state = open_state(config.state)
        self.fleet = Fleet(self, self.state)  # docs/fleet.md: what replicas share, through the state layer
        self.aliases: dict[str, list[Route]] = {
            alias: [Route(alias, r.provider, r.model, r.weight, frozenset(r.classes)) for r in model.routes]
            for alias, model in config.models.items()
        }
        self.metrics = GatewayMetrics()
        self.books = Books(self)
        """Ended requests' bookkeeping, a moment after each ends (bookkeeping.py)."""
        # The state is made once, above (``open_state``): no isinstance check per request.
        self.admission = KeyAdmission(self.key_directory, lambda: self.state, self.metrics.registry, store=keys_at)
        self.health = HealthRegistry(window_s=config.routing.window, clock=time.monotonic)
        bc = config.routing.breaker
        breaker_config = BreakerConfig(
            error_rate_threshold=bc.error_rate,
            min_samples=bc.min_samples,
            window_s=bc.window,
            consecutive_failures=bc.consecutive_failures,
            cooldown_s=bc.cooldown,
            max_cooldown_s=bc.max_cooldown,
            trial_requests=bc.trial_requests,
        )
        self.breakers = BreakerRegistry(breaker_config, clock=time.monotonic, on_transition=self._on_breaker)
        self.policies: dict[str, Policy] = {
            alias: self._make_policy(model.policy or config.routing.policy, alias)
            for alias, model in config.models.items()
        }
        self.paced_total = Counter(
            "tailgate_paced",
            "Attempts skipped because the provider's pacer (limits.rpm/tpm, or a 429's pause) could not admit them.",
            ["provider"],
            registry=self.metrics.registry,
        )
        self.shed_total = Counter(
            "tailgate_shed",
            "Requests refused by load shedding (routing.shed), by alias and traffic class.",
            ["alias", "traffic_class"],
            registry=self.metrics.registry,
        )
        self.effective_weight = Gauge(
            "tailgate_effective_weight",
            "A route's effective weight under its alias's policy (configured weight x health factor), at scrape.",
            ["alias", "provider"],
            registry=self.metrics.registry,
        )
        self.breaker_state = Gauge(
            "tailgate_breaker_state",
            "Circuit breaker state per provider at scrape: 0 closed, 1 half-open, 2 open.",
            ["provider"],
            registry=self.metrics.registry,
        )
        self.keys_revoked = revoked_counter(self.metrics.registry)
        register_runtime_metrics(self.metrics.registry)
        hedges = self.hedge_counter = hedge_counter(self.metrics.registry)
        self.hedgers: dict[str, Hedger] = {
            alias: Hedger(alias, hedge, hedges)
            for alias, model in config.models.items()
            if (hedge := model.hedge or config.routing.hedge) is not None
        }
        self.prober = Prober(
            self.providers,
            [(r.provider, r.model) for routes in self.aliases.values() for r in routes],
            health=self.health,
            breakers=self.breakers,
            config=config.routing.probes,
            registry=self.metrics.registry,
            degraded=self._degraded,
        )
        self.ledger: SQLiteLedger | None = None
        if config.ledger.enabled:
            path = ledger_path or (Path(config.ledger.path) if config.ledger.path else default_db_path())
            self.ledger = SQLiteLedger(
                path, batch_size=config.ledger.batch_size, flush_interval=config.ledger.flush_interval
            )
            register_ledger_metrics(self.metrics.registry, self.ledger)
            self.ledger.before_flush = self.books.drain
        self.shipper: Shipper | None = None  # ledger.url: the spool ships to PostgreSQL (docs/ledger.md)
        if self.ledger is not None and (url := config.ledger.url):
            lc = config.ledger
            self.shipper = Shipper(self.ledger.path, url, interval=lc.ship_interval, batch=lc.ship_batch)
        self.maintenance: Maintenance | None = None  # roll-ups and retention of the store (docs/ledger.md)
        if self.ledger is not None and keys_at is not None:
            lc = config.ledger
            self.maintenance = Maintenance(keys_at, raw_s=lc.retention, rollup_s=lc.rollup_retention)
        register_store_metrics(self, self.metrics.registry)  # spool backlog, shipped rows, roll-ups
        register_upstream_metrics(self, self.metrics.registry)  # each provider's connection pool
        self.trace = TraceWriter(config.trace.path) if config.trace.path else None
        self.traffic = TrafficAggregator(self.ledger.path if self.ledger is not None else None)  # monitor.md
        self.traffic.before_flush = self.books.drain
        self.refresh_provider_gauges()
        self.fleet.install()
        self.fleet.register_metrics(self.metrics.registry)
        self.reloader = Reloader(self, config_path)  # SIGHUP, POST /admin/reload, GET /admin/config

    def _keys_generation(self) -> int:
        state = fleet_state(self)
        return state.generation("keys") if state is not None else 0

    def _degraded(self, provider: str, model: str) -> bool:
        """Does an adaptive alias hold the route ``provider``/``model`` below half its weight (probe it often)?"""
        for alias, routes in self.aliases.items():
            policy = self.policies[alias]
            if isinstance(policy, AdaptivePolicy):
                for r in routes:
                    if r.provider == provider and r.model == model and r.weight > 0 and policy.factor(r) < 0.5:
                        return True
        return False

    def policy_for(self, alias: str) -> Policy:
        """The routing policy of an alias (``models.<alias>.policy`` or ``routing.policy``)."""
        return self.policies[alias]

    def slo_for(self, alias: str) -> SLO:
        """The alias's SLO: ``models.<alias>.slo`` field by field, else ``routing.slo``, else 1 s / 3 s."""
        own = self.config.models[alias].slo
        base, default = self.config.routing.slo, SLO()
        ttft = (own.ttft_p90 if own is not None else None) or base.ttft_p90 or default.ttft_p90
        e2e = (own.e2e_p90 if own is not None else None) or base.e2e_p90 or default.e2e_p90
        return SLO(ttft_p90=ttft, e2e_p90=e2e)

    def _make_policy(self, name: str, alias: str) -> Policy:
        slo = self.slo_for(alias)
        if name == "adaptive":
            ac = self.config.routing.adaptive
            return AdaptivePolicy(
                self.health,
                breakers=self.breakers,
                slo=slo,
                exponent=ac.exponent,
                error_rate_zero=ac.error_rate_zero,
                min_samples=ac.min_samples,
                floor=ac.floor,
                recompute_s=ac.recompute,
                smoothing_down_tau_s=ac.smoothing_down,
                far_ratio=ac.far_ratio,
                fast_window_s=ac.fast_window,
                fast_min_misses=ac.fast_min_misses,
                readmit_after=ac.readmit_after,
                slow_start_s=ac.slow_start,
                prior_idle_s=self.config.routing.window,
                clock=time.monotonic,
            )
        if name == "least-latency":
            return LeastLatencyPolicy(self.health, breakers=self.breakers)
        if name == "cost":
            prices = {n: Price(p.config.price.input, p.config.price.output) for n, p in self.providers.items()}
            return CostPolicy(self.health, prices, breakers=self.breakers, slo=slo)
        return WeightedPolicy()

    def _on_breaker(self, provider: str, transition: Transition) -> None:
        self.log.warning(
            "circuit breaker of %s: %s -> %s (%s)",
            provider,
            transition.from_state,
            transition.to_state,
            transition.reason,
        )
        self.metrics.breaker_transitions.labels(provider, transition.to_state).inc()
        self.fleet.on_breaker(provider, transition)
        if transition.from_state == "half_open" and transition.to_state == "closed":
            for h in self.health:  # its trials passed: the outage's faults no longer describe it
                if h.provider == provider:
                    h.forget()
        self.prober.on_transition(provider, transition)

    def refresh_provider_gauges(self) -> None:
        for name, p in self.providers.items():
            self.metrics.provider_state.labels(name).set(0 if p.drained else 1)

    def check_bind(self, host: str) -> None:
        """DESIGN.md: without gateway keys, bind loopback only unless ``allow_open: true``."""
        self.check_bind_static(self.config, host)

    @staticmethod
    def check_bind_static(config: GatewayConfig, host: str) -> None:
        if not config.keys and not is_loopback(host) and not config.allow_open:
            raise BindRefused(
                f"refusing to listen on {host} without gateway keys: anyone who can reach it could spend your "
                "provider quota. Add 'keys:' to the config, bind 127.0.0.1, or set 'allow_open: true'."
            )

    async def start(self) -> None:
        await self.fleet.start()
        if self.ledger is not None:
            await self.ledger.start()
        await self.traffic.start()
        if self.shipper is not None:
            await self.shipper.start()  # a newer schema in PostgreSQL refuses to start
        await self.key_directory.start()
        if self.maintenance is not None:
            await self.maintenance.start()
        seed_priors(self)  # promise 5: start from what the monitor measured (docs/routing.md)
        self.prober.start()

    async def close(self) -> None:
        await self.books.drain()  # the last requests' rows and settlements, before the stores close
        await self.prober.close()
        for p in self.providers.values():
            await p.client.close()
        await self.traffic.close()
        await self.admission.close()
        if self.maintenance is not None:
            await self.maintenance.close()
        await self.key_directory.close()
        if self.ledger is not None:
            await self.ledger.close()
        if self.shipper is not None:
            await self.shipper.close()  # after the ledger: its last rows are in the spool now
        if self.trace is not None:
            self.trace.close()
        await self.fleet.close()

    def app(self) -> web.Application:
        middlewares = [
            openai_shaped_errors,
            books_first(self.books),
            deadline_middleware(self.config.server.request_deadline),
        ]
        app = web.Application(client_max_size=self.config.max_body_bytes, middlewares=middlewares)
        app[GATEWAY_KEY] = self
        app[BODY_LIMITS_KEY] = body_limits(self.config)
        proxy = Proxy(self)
        hot = proxy.routes()
        for path, handle in hot.items():
            app.router.add_post(path, aiohttp_route(handle))
        if self.config.server.http_front == "lean":  # these POSTs skip aiohttp on a HardenedSite (front.py)
            app[FRONT_KEY] = FrontRoutes(hot, app[BODY_LIMITS_KEY], self.config.server)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/health", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if self.config.metrics.listen is None:  # else on its own bind (metrics_app, started by serve.py)
            app.router.add_get("/metrics", self._metrics)
        add_admin_routes(app, self)
        add_key_routes(app, self)  # /admin/keys (docs/keys.md)
        add_config_routes(app, self)
        # The dashboard (docs/dashboard.md): read-only views of the store, this process's live state, and
        # drain/enable for admin-key holders. Imported here so that importing the gateway stays light.
        from tailgate.dashboard import Controls, mount

        def live() -> dict[str, object]:
            # What GET /admin/providers shows, minus base URLs: the dashboard's GETs need no admin key.
            now = time.monotonic()
            providers = []
            for p in self.providers.values():
                snap = p.snapshot(now)
                snap.pop("base_url", None)
                snap["breaker"] = self.breakers.get(p.name).snapshot()
                providers.append(snap)
            routing = {}
            for alias, routes in self.aliases.items():
                policy = self.policy_for(alias)
                routing[alias] = {"policy": policy.name, "weights": route_weights(policy, routes)}
            aliases = {
                alias: [{"provider": r.provider, "model": r.model, "weight": r.weight} for r in routes]
                for alias, routes in self.aliases.items()
            }
            return {
                "policy": self.config.routing.policy,
                "clock": now,
                "routing": routing,
                "providers": providers,
                "aliases": aliases,
                "fleet": self.fleet.live_view(),  # every replica, the answering one named; merged windows
            }

        def set_drained(name: str, drained: bool) -> dict[str, str]:
            self.fleet.set_drained_soon(name, drained)  # KeyError: unknown provider (404)
            self.log.info("provider %s %s from the dashboard", name, "drained" if drained else "enabled")
            return {"provider": name, "state": "drained" if drained else "active"}

        db_path = self.ledger.path if self.ledger is not None else Path(self.config.ledger.path or default_db_path())
        # Every decision below is taken per request from the keys in force then (``self.guard``: a reload
        # re-configures it, a runtime key moves ``self.keys.open``), never once at start.
        controls = Controls(
            lambda request: self.guard.is_admin(request), set_drained, enabled=lambda: self.guard.admin_configured
        )

        def may_read(request: web.Request) -> WireError | None:
            return self.guard.check(request, "dashboard")

        mount(  # the fleet's store if PostgreSQL
            app,
            self.config.ledger.url or db_path,
            live=live,
            controls=controls,
            guard=may_read,
            guard_required=lambda: self.guard.required("dashboard"),
            currency=self._currency,
        )
        return app

    def _currency(self) -> str | None:
        """The providers' price currency (``CNY``; several: ``CNY/USD``), for the Keys & spend page."""
        found = sorted({p.config.price.currency for p in self.providers.values()})
        return "/".join(found) or None

    def metrics_app(self) -> web.Application:
        """``/metrics`` alone, for ``metrics.listen`` (its own address and port)."""
        app = web.Application(middlewares=[openai_shaped_errors, books_first(self.books)])
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        """The aliases the caller's key may use (a key with ``models`` sees those only; docs/keys.md)."""
        try:
            key_id = self.keys.identify(request)
        except WireError as err:
            return error_response(err)
        limits = self.key_directory.limits(key_id) if key_id is not None else None
        if limits is not None and limits.expires_at is not None and time.time() >= limits.expires_at:
            return error_response(WireError(401, "This API key has expired.", code="key_expired"))
        allowed = limits.models if limits is not None else None
        data = [
            {"id": alias, "object": "model", "created": 0, "owned_by": "tailgate"}
            for alias in self.aliases
            if allowed is None or alias in allowed
        ]
        return web.json_response({"object": "list", "data": data})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        usable = [name for name, p in self.providers.items() if not p.drained]
        if not usable:
            return web.json_response({"status": "unavailable", "reason": "every provider is drained"}, status=503)
        return web.json_response({"status": "ready", "providers": usable})

    async def _metrics(self, request: web.Request) -> web.Response:
        if (denied := self.guard.check(request, "metrics")) is not None:
            return error_response(denied)
        self.fleet.refresh_metrics()
        for name, p in self.providers.items():
            self.metrics.in_flight.labels(name).set(p.in_flight)
            self.breaker_state.labels(name).set(_BREAKER_CODE[self.breakers.get(name).state])
        for alias, routes in self.aliases.items():
            for provider, w in route_weights(self.policy_for(alias), routes).items():
                self.effective_weight.labels(alias, provider).set(w["effective_weight"])
        body = self.metrics.render(self.fleet.replica_label)
        return web.Response(body=body, content_type="text/plain", charset="utf-8")
