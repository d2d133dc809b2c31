"""The gateway's composition root: :class:`Gateway` builds the owners in two phases (each owner, handed real
collaborators in an order that needs no lambda to an owner built later; then the scrape-time collectors), hands
each owner its collaborators, serves the HTTP routes, applies reloads and runs start / stop.

Nothing below this module imports it: the process entry points (``process/serve.py``, ``process/replicas.py``)
and the compositions above the gateway (cli, demo, scenario) do (docs/architecture.md, "The gateway's house").
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tailgate._aiohttp import BODY_LIMITS_KEY, openai_shaped_errors
from tailgate._runtime import bounded_step
from tailgate.config.resolve import ResolvedProvider
from tailgate.config.schema import GatewayConfig
from tailgate.gateway.access.auth import AccessGuard, KeyRing
from tailgate.gateway.access.key_directory import KeyDirectory
from tailgate.gateway.access.lockout import SourceLockout
from tailgate.gateway.admin.key_admin import add_key_routes
from tailgate.gateway.admin.ops import Ops
from tailgate.gateway.admin.provider_admin import add_admin_routes
from tailgate.gateway.admin.reload import (
    Reloader,
    add_config_routes,
    close_when_idle,
    loaded_version,
    replace_providers,
)
from tailgate.gateway.batch.batch_api import add_batch_routes
from tailgate.gateway.batch.batch_exec import BatchExecutor
from tailgate.gateway.fleet.fleet_sync import Fleet
from tailgate.gateway.health.active_probes import Prober
from tailgate.gateway.health.priors import seed_priors
from tailgate.gateway.health.quality_sync import QualitySync
from tailgate.gateway.http.aiohttp_exchange import aiohttp_route, deadline_middleware
from tailgate.gateway.http.listener import body_limits, use_lean_front
from tailgate.gateway.metrics.gateway_metrics import GatewayMetrics
from tailgate.gateway.metrics.otel_books import OtelBooks
from tailgate.gateway.metrics.store_metrics import (
    register_ledger_metrics,
    register_runtime_metrics,
    register_store_metrics,
    register_upstream_metrics,
)
from tailgate.gateway.metrics.traffic_minutes import TrafficAggregator
from tailgate.gateway.metrics.traffic_trace import TraceWriter
from tailgate.gateway.request_path.admission import KeyAdmission, key_store
from tailgate.gateway.request_path.answer_quality import AnswerQuality
from tailgate.gateway.request_path.bookkeeping import Books, Sinks, books_first
from tailgate.gateway.request_path.core import Core
from tailgate.gateway.request_path.hedging import Hedger
from tailgate.gateway.request_path.providers import Providers, provider_state
from tailgate.gateway.request_path.proxy import Proxy
from tailgate.gateway.request_path.routes import RouteTable, build_routes, unchanged_aliases
from tailgate.gateway.request_path.tracing import Tracing
from tailgate.ledger import SQLiteLedger, default_db_path
from tailgate.ledger.maintenance import Maintenance
from tailgate.ledger.spool import Shipper
from tailgate.routing import (
    SLO,
    BreakerConfig,
    BreakerRegistry,
    HealthRegistry,
    Policy,
    Route,
    Transition,
)
from tailgate.state import open_state
from tailgate.telemetry import resolve as telemetry_settings
from tailgate.wire.errors import WireError

if TYPE_CHECKING:
    from tailgate.telemetry.export import Exporter

CLOSE_STEP_S = 5.0
"""The most one step of :meth:`Gateway.close` may take (docs/gateway.md, "Stopping"); past it, it is logged by name
and left behind. Each takes milliseconds while the stores answer."""
LEDGER_CLOSE_S = 8.0
"""The ledger's flush gets longer: the rows still in memory are written to its SQLite file then or never."""


class BindRefused(Exception):
    """Binding a non-loopback address without gateway keys, and the config does not allow it."""


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _stores(
    config: GatewayConfig, ledger_path: Path | None, keys_at: str | Path | None
) -> tuple[SQLiteLedger | None, Shipper | None, Maintenance | None]:
    """The ledger (``ledger.enabled``), its shipper to PostgreSQL (``ledger.url``) and the store's roll-ups and
    retention (a ledger with a key store), as the config asks (docs/ledger.md)."""
    lc = config.ledger
    if not lc.enabled:
        return None, None, None
    path = ledger_path or (Path(lc.path) if lc.path else default_db_path())
    ledger = SQLiteLedger(path, batch_size=lc.batch_size, flush_interval=lc.flush_interval)
    shipper = Shipper(ledger.path, lc.url, interval=lc.ship_interval, batch=lc.ship_batch) if lc.url else None
    maintenance = None
    if keys_at is not None:
        maintenance = Maintenance(
            keys_at,
            raw_s=lc.retention,
            rollup_s=lc.rollup_retention,
            rollup_every=lc.rollup_interval,
            retention_every=lc.retention_interval,
        )
    return ledger, shipper, maintenance


def _breaker_config(config: GatewayConfig) -> BreakerConfig:
    bc = config.routing.breaker
    return BreakerConfig(
        error_rate_threshold=bc.error_rate,
        min_samples=bc.min_samples,
        window_s=bc.window,
        consecutive_failures=bc.consecutive_failures,
        cooldown_s=bc.cooldown,
        max_cooldown_s=bc.max_cooldown,
        trial_requests=bc.trial_requests,
    )


def _telemetry(
    config: GatewayConfig, metrics: GatewayMetrics
) -> tuple[Exporter | None, OtelBooks | None, Tracing | None]:
    """The OpenTelemetry export the config section and the ``OTEL_*`` variables ask for (docs/observability.md):
    the exporter, the books' sink and who is traced, or None for each when off. The SDK is imported only here."""
    settings = telemetry_settings(config.telemetry, os.environ)
    if settings is None:
        return None, None, None
    from tailgate.telemetry.export import Exporter

    resource: dict[str, str] = {}
    if config.state.replica:
        resource["service.instance.id"] = config.state.replica
    exporter = Exporter(settings, metrics.registry, scope="tailgate.gateway", resource=resource)
    books = OtelBooks(exporter, content_patterns=settings.redact, content_chars=settings.content_max_chars)
    tracing = Tracing(settings.sample_ratio, capture_content=settings.capture_content) if exporter.traces else None
    return exporter, books, tracing


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
        """Two phases. First every owner, in an order where each is handed real collaborators, never a function
        reaching an owner built after it: the metrics (the one owner of the Prometheus objects), the fleet
        state, keys and the access guard, providers, stores, the key gate, health and breakers, the route
        table, then the fleet (given the table, the providers and the config version), the books, the core,
        the probes and the reloader. Then the scrape-time collectors over what was built. A reload hands the
        owners that hold what it swaps their new parts (``_apply``). One callback stays the root's: a breaker's
        transition (``_on_breaker``: metrics, fleet, prober), which can happen only once requests flow."""
        self.config = config
        self._was_open: bool | None = None
        """Whether the gateway was open (no keys) when last looked at; None before start."""
        self.log = logging.getLogger("tailgate.gateway")
        # -- phase 1: the owners -------------------------------------------------------------------------------
        self.metrics = metrics = GatewayMetrics()
        # The fleet state first: the key directory, the key gate and the fleet are built over it.
        state = self.state = open_state(config.state)
        keys_at = key_store(config, ledger_path)  # runtime keys, budgets: docs/keys.md
        self.key_directory = KeyDirectory(keys_at, config.keys, generation=functools.partial(state.generation, "keys"))
        keys = KeyRing(config.keys, config.admin_key, self.key_directory)
        server = config.server
        self.guard = AccessGuard(
            keys,
            dashboard_key=config.dashboard_key,
            metrics_key=config.metrics.key,
            lockout=SourceLockout(server.admin_max_failures, server.admin_failure_window),
            trusted_proxies=server.trusted_proxies,
        )
        provider_states = Providers(
            {  # a reload swaps it (gateway/admin/reload.py)
                name: provider_state(resolved, config.routing.pacing) for name, resolved in providers.items()
            }
        )
        self.ledger, self.shipper, self.maintenance = _stores(config, ledger_path, keys_at)
        self.trace = TraceWriter(config.trace.path) if config.trace.path else None
        self.traffic = TrafficAggregator(self.ledger.path if self.ledger is not None else None)  # docs/monitor.md
        self.admission = KeyAdmission(self.key_directory, lambda: state, metrics.registry, store=keys_at)
        self.health = HealthRegistry(window_s=config.routing.window, clock=time.monotonic)
        self.breakers = BreakerRegistry(_breaker_config(config), clock=time.monotonic, on_transition=self._on_breaker)
        # answer quality: one board for every adaptive policy (promise 8), the signals, the non-answer retry
        self.quality = AnswerQuality.of(config, metrics.quality, metrics.quality_retries)
        routes = build_routes(
            config,
            provider_states,
            health=self.health,
            breakers=self.breakers,
            hedges=metrics.hedges,
            quality=self.quality.board,
        )
        version = loaded_version(config_path, config)
        self.fleet = Fleet(  # docs/fleet.md: what replicas share, through the state layer
            state,
            config.state,
            routes=routes,
            providers=provider_states,
            version=version,
            health=self.health,
            breakers=self.breakers,
            series=metrics.state,
            on_drained=metrics.show_providers,
        )
        self.otel, otel_books, tracing = _telemetry(config, metrics)  # docs/observability.md; None: off
        self.books = Books(  # ended requests' bookkeeping, a moment after each ends (bookkeeping.py)
            Sinks(
                metrics=metrics,
                traffic=self.traffic,
                trace=self.trace,
                ledger=self.ledger,
                admission=self.admission,
                refund_rpm=self.fleet.refund_key,
                quality=self.quality,
                divert=lambda row: self.batch_exec.divert(row),  # the batch lane's rows (batch_exec.py)
                telemetry=otel_books,
            )
        )
        if self.ledger is not None:
            self.ledger.before_flush = self.books.drain  # whatever reads the books drains them first
        self.traffic.before_flush = self.books.drain
        self.core = Core(
            routes=routes,
            providers=provider_states,
            keys=keys,
            key_directory=self.key_directory,
            admission=self.admission,
            fleet=self.fleet,
            books=self.books,
            metrics=metrics,
            health=self.health,
            breakers=self.breakers,
            quality=self.quality,
            tracing=tracing,
        )
        """What a request needs (core.py); a reload swaps its route table, providers and keys."""
        self.ops = Ops(self.core, self.guard)  # /v1/models, health checks, /metrics, the live view
        self.prober = Prober(
            provider_states,
            routes.targets(),
            health=self.health,
            breakers=self.breakers,
            config=config.routing.probes,
            counter=metrics.probes,
            degraded=routes.degraded,  # a reload hands the new table's (prober.retarget)
        )
        self.quality_sync = QualitySync(  # the board shared through the store (health/quality_sync.py)
            self.quality,
            config.ledger.url or (self.ledger.path if self.ledger is not None else None),
            interval_s=config.routing.quality.refresh,
            window_s=config.routing.quality.window,
        )
        self.reloader = Reloader(  # SIGHUP, POST /admin/reload, GET /admin/config
            config_path, config, version=version, in_force=self.core, state=state, apply=self._apply
        )
        self._reload_tasks: set[asyncio.Task[None]] = set()
        ledger = self.ledger
        self.batch_exec = BatchExecutor(  # runs the Batch API's lines (docs/batch.md)
            self.core,
            lambda: self.config.batch,
            keys_at,
            currency=self._currency,
            record=ledger.record if ledger is not None else None,
        )
        # -- phase 2: what /metrics reads at scrape time, over the owners above --------------------------------
        registry = metrics.registry
        register_runtime_metrics(registry)
        if self.ledger is not None:
            register_ledger_metrics(registry, self.ledger)
        register_store_metrics(registry, self.shipper, self.maintenance)  # spool backlog, shipped rows, roll-ups
        register_upstream_metrics(registry, self.core)  # each current provider's connection pool
        metrics.show_providers(provider_states)

    # -- views of the core (for the compositions above and the tests) ------------------------------------------

    @property
    def routes(self) -> RouteTable:
        """The current route table (a reload swaps it)."""
        return self.core.routes

    @property
    def providers(self) -> Providers:
        """The current providers (a reload swaps them)."""
        return self.core.providers

    @property
    def keys(self) -> KeyRing:
        return self.core.keys

    @property
    def aliases(self) -> Mapping[str, tuple[Route, ...]]:
        """The current route table's aliases."""
        return self.core.routes.aliases

    @property
    def policies(self) -> Mapping[str, Policy]:
        return self.core.routes.policies

    @property
    def hedgers(self) -> Mapping[str, Hedger]:
        return self.core.routes.hedgers

    def policy_for(self, alias: str) -> Policy:
        """The routing policy of an alias (``models.<alias>.policy`` or ``routing.policy``)."""
        return self.core.routes.policy_for(alias)

    def slo_for(self, alias: str) -> SLO:
        """The alias's SLO: ``models.<alias>.slo`` field by field, else ``routing.slo``, else 1 s / 3 s."""
        return self.core.routes.slo_for(alias)

    # -- reload -------------------------------------------------------------------------------------------------

    def _apply(self, config: GatewayConfig, resolved: dict[str, ResolvedProvider]) -> dict[str, Any]:
        """Swap a valid ``config`` in (``Reloader``): providers, keys and the route table, each in one assignment
        between requests' awaits; requests in flight keep the table they read (routes.py)."""
        core, old = self.core, self.config
        providers, changed, closing = replace_providers(core.providers, old, config, resolved)
        core.providers = providers
        self.config = config
        self.key_directory.set_config_keys(config.keys)  # the store's runtime keys stay (docs/keys.md)
        core.keys = KeyRing(config.keys, config.admin_key, self.key_directory)
        self._note_access()
        # The one access decision follows the new file: admin key, dashboard_key, metrics.key (access/auth.py).
        self.guard.configure(
            core.keys,
            dashboard_key=config.dashboard_key,
            metrics_key=config.metrics.key,
            trusted_proxies=config.server.trusted_proxies,
        )
        core.routes = build_routes(
            config,
            providers,
            health=self.health,
            breakers=self.breakers,
            hedges=self.metrics.hedges,
            previous=core.routes,
            kept=unchanged_aliases(old, config),
            quality=self.quality.board,
        )
        self.quality.configure(config)
        self.fleet.install(core.routes, providers, self.reloader.version)
        self.metrics.show_providers(providers)
        for p in closing:
            self._spawn(close_when_idle(p))
        retarget = self.prober.retarget(providers, config.routing.probes, core.routes.targets(), core.routes.degraded)
        self._spawn(retarget)
        return changed

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._reload_tasks.add(task)
        task.add_done_callback(self._reload_tasks.discard)

    # -- breakers, gauges, bind ---------------------------------------------------------------------------------

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

    def check_bind(self, host: str) -> None:
        """Without gateway keys, bind loopback only unless ``allow_open: true``: a gateway with no keys spends its
        providers' keys for whoever reaches it (docs/config.md)."""
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
        self._was_open = self.core.keys.open  # `serve` says it at start; from now on, every change is logged
        self.key_directory.on_change = self._note_access
        if self.maintenance is not None:
            await self.maintenance.start()
        store = self.config.ledger.url or (self.ledger.path if self.ledger is not None else None)
        seed_priors(store, self.core.routes)  # promise 5: start from what the monitor measured (docs/routing.md)
        self.quality_sync.start()  # promise 8's board: the fleet's counts and the monitor's canaries
        self.prober.start()
        await self.batch_exec.start()

    def _note_access(self) -> None:
        """Log when the gateway closes (its first key appeared) or opens (its last key disappeared): a client
        that sent any bearer gets 401 from that moment (docs/keys.md)."""
        was, now = self._was_open, self.core.keys.open
        if was is None or was == now:
            return
        self._was_open = now
        if now:
            self.log.warning("gateway open: it has no keys any more (config or store): any bearer is accepted again")
        else:
            self.log.warning(
                "gateway closed: it has a key now (config or store): requests without a valid key get 401 "
                "(any bearer was accepted until now)"
            )

    async def close(self) -> bool:
        """Close every part, in this order, each bounded (docs/gateway.md, "Stopping"): a part that does not
        finish within its bound (``CLOSE_STEP_S``; the ledger's flush ``LEDGER_CLOSE_S``) is logged by name
        and left behind, so one component that stops answering delays the stop by its bound, never for ever.
        True when every part finished in time (else a thread may still be blocked in a store call: the
        ``tailgate serve`` process then exits without waiting for it)."""
        steps: list[tuple[str, Callable[[], Awaitable[object]], float]] = [
            ("batch executor (batch_exec.close)", self.batch_exec.close, CLOSE_STEP_S),
            # the last requests' rows and settlements, before the stores close
            ("bookkeeping (books.drain)", self.books.drain, CLOSE_STEP_S),
            ("health probes (prober.close)", self.prober.close, CLOSE_STEP_S),
            ("upstream connection pools", self._close_clients, CLOSE_STEP_S),
            ("traffic aggregates (traffic.close)", self.traffic.close, CLOSE_STEP_S),
            ("key settlements (admission.close)", self.admission.close, CLOSE_STEP_S),
        ]
        if self.maintenance is not None:
            steps.append(("store maintenance (maintenance.close)", self.maintenance.close, CLOSE_STEP_S))
        steps.append(("store keys (key_directory.close)", self.key_directory.close, CLOSE_STEP_S))
        if self.ledger is not None:
            steps.append(("ledger flush (ledger.close)", self.ledger.close, LEDGER_CLOSE_S))
        if self.shipper is not None:  # after the ledger: its last rows are in the spool now
            steps.append(("ledger shipper (shipper.close)", self.shipper.close, CLOSE_STEP_S))
        if (trace := self.trace) is not None:
            steps.append(("trace (trace.close)", lambda: asyncio.to_thread(trace.close), CLOSE_STEP_S))
        # the last answers' quality counts (bounded by their own CLOSE_FLUSH_S: a store that is not answering
        # has had its say in the steps above)
        steps.append(("answer-quality counts (quality_sync.close)", self.quality_sync.close, CLOSE_STEP_S))
        if (otel := self.otel) is not None:  # the last spans and points, bounded: a dead collector never holds the stop
            limit = min(CLOSE_STEP_S, otel.settings.export_timeout_s + 1.0)
            steps.append(("telemetry export (otel.shutdown)", lambda: asyncio.to_thread(otel.shutdown), limit))
        steps.append(("fleet state (fleet.close)", self.fleet.close, CLOSE_STEP_S))
        clean = True
        for what, step, limit in steps:
            clean = await bounded_step(what, step(), limit, self.log) and clean
        return clean

    async def _close_clients(self) -> None:
        for p in self.providers.values():
            await p.close()

    def app(self) -> web.Application:
        middlewares = [
            openai_shaped_errors,
            books_first(self.books),
            deadline_middleware(self.config.server.request_deadline),
        ]
        app = web.Application(client_max_size=self.config.max_body_bytes, middlewares=middlewares)
        app[BODY_LIMITS_KEY] = body_limits(self.config)
        hot = Proxy(self.core).routes()
        for path, handle in hot.items():
            app.router.add_post(path, aiohttp_route(handle))
        if self.config.server.http_front == "lean":  # these POSTs skip aiohttp (gateway/http/lean_connection.py)
            use_lean_front(app, hot, app[BODY_LIMITS_KEY], self.config.server)
        self.ops.add_routes(app, metrics=self.config.metrics.listen is None)  # else metrics_app (process/serve.py)
        add_admin_routes(
            app,
            self.core,
            health=self.health,
            breakers=self.breakers,
            fleet=self.fleet,
            access=self.guard,
            prober=self.prober,
            quality=self.quality.board,
        )
        add_key_routes(app, self.key_directory, self.core, self.state, access=self.guard)  # /admin/keys (docs/keys.md)
        add_config_routes(app, self.reloader, self.guard)
        add_batch_routes(app, self.core, self.guard, lambda: self.config.batch, self._currency)  # docs/batch.md
        self.batch_exec.handlers = hot
        # The dashboard (docs/dashboard.md): read-only views of the store, this process's live state, and
        # drain/enable for admin-key holders. Imported here so that importing the gateway stays light.
        from tailgate.dashboard import Controls, mount

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
            live=self.ops.live,
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
        app.router.add_get("/metrics", self.ops.metrics)
        return app
