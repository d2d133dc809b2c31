"""The gateway application: wiring of config, provider state, policy, metrics, ledger and routes."""

from __future__ import annotations

import ipaddress
import logging
import time
from pathlib import Path

from aiohttp import web
from prometheus_client import Counter, Gauge

from tailgate._aiohttp import error_response, openai_shaped_errors
from tailgate.config.resolve import ResolvedProvider
from tailgate.config.schema import GatewayConfig
from tailgate.gateway.admin import add_admin_routes, route_weights
from tailgate.gateway.auth import KeyRing
from tailgate.gateway.hedging import Hedger, hedge_counter
from tailgate.gateway.metrics import GatewayMetrics
from tailgate.gateway.priors import seed_priors
from tailgate.gateway.probes import Prober
from tailgate.gateway.proxy import Proxy
from tailgate.gateway.state import ProviderState, pacer_for
from tailgate.gateway.trace import TraceWriter
from tailgate.gateway.traffic import TrafficAggregator
from tailgate.ledger import SQLiteLedger, default_db_path
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
        self, config: GatewayConfig, providers: dict[str, ResolvedProvider], *, ledger_path: Path | None = None
    ) -> None:
        self.config = config
        self.log = logging.getLogger("tailgate.gateway")
        self.keys = KeyRing(config.keys, config.admin_key)
        self.providers = {
            name: ProviderState(
                config=resolved,
                client=UpstreamClient(endpoint_for(resolved)),
                pacer=pacer_for(resolved, config.routing.pacing),
            )
            for name, resolved in providers.items()
        }
        self.aliases: dict[str, list[Route]] = {
            alias: [Route(alias, r.provider, r.model, r.weight, frozenset(r.classes)) for r in model.routes]
            for alias, model in config.models.items()
        }
        self.metrics = GatewayMetrics()
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
        hedges = hedge_counter(self.metrics.registry)
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
        self.trace = TraceWriter(config.trace.path) if config.trace.path else None
        self.traffic = TrafficAggregator(self.ledger.path if self.ledger is not None else None)  # monitor.md
        self.refresh_provider_gauges()

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
        if self.ledger is not None:
            await self.ledger.start()
        await self.traffic.start()
        seed_priors(self)  # promise 5: start from what the monitor measured (docs/routing.md)
        self.prober.start()

    async def close(self) -> None:
        await self.prober.close()
        for p in self.providers.values():
            await p.client.close()
        await self.traffic.close()
        if self.ledger is not None:
            await self.ledger.close()
        if self.trace is not None:
            self.trace.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes, middlewares=[openai_shaped_errors])
        app[GATEWAY_KEY] = self
        proxy = Proxy(self)
        app.router.add_post("/v1/chat/completions", proxy.chat)
        app.router.add_post("/v1/completions", proxy.completions)
        app.router.add_post("/v1/embeddings", proxy.embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/health", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        add_admin_routes(app, self)
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
            }

        def set_drained(name: str, drained: bool) -> dict[str, str]:
            self.providers[name].drained = drained  # KeyError: unknown provider (404)
            self.refresh_provider_gauges()
            self.log.info("provider %s %s from the dashboard", name, "drained" if drained else "enabled")
            return {"provider": name, "state": "drained" if drained else "active"}

        db_path = self.ledger.path if self.ledger is not None else Path(self.config.ledger.path or default_db_path())
        controls = Controls(self.keys.is_admin, set_drained, enabled=self.config.admin_key is not None)
        mount(app, db_path, live=live, controls=controls)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        try:
            self.keys.identify(request)
        except WireError as err:
            return error_response(err)
        data = [{"id": alias, "object": "model", "created": 0, "owned_by": "tailgate"} for alias in self.aliases]
        return web.json_response({"object": "list", "data": data})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        usable = [name for name, p in self.providers.items() if not p.drained]
        if not usable:
            return web.json_response({"status": "unavailable", "reason": "every provider is drained"}, status=503)
        return web.json_response({"status": "ready", "providers": usable})

    async def _metrics(self, request: web.Request) -> web.Response:
        for name, p in self.providers.items():
            self.metrics.in_flight.labels(name).set(p.in_flight)
            self.breaker_state.labels(name).set(_BREAKER_CODE[self.breakers.get(name).state])
        for alias, routes in self.aliases.items():
            for provider, w in route_weights(self.policy_for(alias), routes).items():
                self.effective_weight.labels(alias, provider).set(w["effective_weight"])
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")
