"""Config reload (SIGHUP, ``POST /admin/reload``) and the loaded version (``GET /admin/config``).

A reload re-reads the YAML the gateway was started with and validates all of it first: a file with any
problem is rejected whole (errors logged and answered, the running config kept). A valid one is applied
in one step on the event loop, between requests' awaits:

- providers whose resolved settings are unchanged keep everything: client pool, pacer, pause, drain
  flag, in-flight count; breakers and health windows are keyed by provider name and kept for all;
- a changed provider gets a new client and pacer (its breaker and windows stay); a removed one stops
  taking new requests, while requests already on it finish (its pool is closed once they have);
- keys, aliases, routes, policies (kept for aliases whose settings did not change), hedging and probes
  follow the new file.

In-flight requests finish on the routes and providers they started with. What a reload does not change
(a restart does): ``listen``, ``state``, ``ledger``, ``max_body_bytes``. docs/fleet.md.

The version is the first 12 hex digits of the file's SHA-256: replicas showing the same version run the
same file. Each replica publishes its version, so ``/admin/config`` on any replica lists the fleet's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.config.loader import ConfigError
from tailgate.config.resolve import ResolvedProvider, load_resolved
from tailgate.config.schema import GatewayConfig

if TYPE_CHECKING:
    from tailgate.gateway.app import Gateway
    from tailgate.gateway.state import ProviderState

__all__ = ["Providers", "Reloader", "add_config_routes", "config_version", "publish_version"]

log = logging.getLogger("tailgate.gateway")

_RESTART_ONLY = ("listen", "state", "ledger", "max_body_bytes")


def config_version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


class Reloader:
    """Holds the path and version of the loaded config and applies reloads to one gateway."""

    def __init__(self, gw: Gateway, path: Path | None) -> None:
        self.gw = gw
        self.path = path
        self.version = config_version(path.read_bytes()) if path is not None else _model_version(gw.config)
        self.loaded_at = time.time()
        self.reloads = 0
        self.last: dict[str, Any] | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def reload(self) -> dict[str, Any]:
        """Re-read, validate, apply. Returns what happened (``ok``, ``version``, ``errors``, ``changed``)."""
        async with self._lock:
            if self.path is None:
                out: dict[str, Any] = {"ok": False, "errors": ["this gateway was not started from a file"]}
                self.last = out
                return out
            try:
                data = await asyncio.to_thread(self.path.read_bytes)
                config, providers = await asyncio.to_thread(load_resolved, self.path)
            except ConfigError as exc:
                log.error("config reload rejected, the running config stays:\n  %s", "\n  ".join(exc.problems))
                self.last = {"ok": False, "version": self.version, "errors": exc.problems, "at": time.time()}
                return self.last
            except OSError as exc:
                log.error("config reload rejected: cannot read %s: %s", self.path, exc.strerror)
                self.last = {"ok": False, "version": self.version, "errors": [f"{self.path}: {exc.strerror}"]}
                return self.last
            changed = self.apply(config, providers)
            self.version = config_version(data)
            self.loaded_at = time.time()
            self.reloads += 1
            self.last = {"ok": True, "version": self.version, "changed": changed, "at": self.loaded_at}
            log.info("config reloaded: version %s (%s)", self.version, _describe(changed))
            return self.last

    def apply(self, config: GatewayConfig, providers: dict[str, ResolvedProvider]) -> dict[str, Any]:
        gw = self.gw
        old = gw.config
        restart = [f for f in _RESTART_ONLY if getattr(old, f) != getattr(config, f)]
        if restart:
            log.warning("config reload: %s changed; that takes a restart (kept as it was)", ", ".join(restart))
            config = config.model_copy(update={f: getattr(old, f) for f in restart})
        kept, replaced, added, removed, closing = _replace_providers(gw, config, providers)
        gw.config = config
        _rebuild(gw, policies_kept=_unchanged_aliases(old, config))
        for p in closing:
            self._spawn(_close_when_idle(p))
        self._spawn(_restart_prober(gw))
        return {
            "providers_kept": kept,
            "providers_replaced": replaced,
            "providers_added": added,
            "providers_removed": removed,
            "restart_needed": restart,
        }

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def snapshot(self) -> dict[str, Any]:
        gw = self.gw
        fleet = {r: v.decode() for r, v in gw.state.peers("config").items()}
        return {
            "version": self.version,
            "path": str(self.path) if self.path is not None else None,
            "loaded_at": self.loaded_at,
            "reloads": self.reloads,
            "last_reload": self.last,
            "replica": gw.state.replica,
            "state": _status(gw),
            "fleet_versions": {gw.state.replica: self.version, **fleet},
            "same_version_fleet_wide": all(v == self.version for v in fleet.values()),
            "providers": sorted(gw.providers),
            "aliases": sorted(gw.aliases),
        }


class Providers(dict[str, "ProviderState"]):
    """The gateway's providers by name; a provider removed by a reload is still found by the requests that
    were already on it (``retired``), while listings, ``.get`` and new requests see only the current ones."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retired: dict[str, ProviderState] = {}

    def __missing__(self, name: str) -> ProviderState:
        return self.retired[name]


def _replace_providers(
    gw: Gateway, config: GatewayConfig, resolved: dict[str, ResolvedProvider]
) -> tuple[list[str], list[str], list[str], list[str], list[ProviderState]]:
    from tailgate.gateway.state import ProviderState, pacer_for
    from tailgate.upstream import UpstreamClient, endpoint_for

    kept: list[str] = []
    replaced: list[str] = []
    added: list[str] = []
    closing: list[ProviderState] = []
    pacing_same = config.routing.pacing == gw.config.routing.pacing
    new = Providers()
    new.retired = dict(gw.providers.retired) if isinstance(gw.providers, Providers) else {}
    for name, rp in resolved.items():
        cur = gw.providers.get(name)
        new.retired.pop(name, None)
        if cur is not None and cur.config == rp:
            if not pacing_same:
                cur.pacer = pacer_for(rp, config.routing.pacing)
            new[name] = cur
            kept.append(name)
            continue
        state = ProviderState(
            config=rp, client=UpstreamClient(endpoint_for(rp)), pacer=pacer_for(rp, config.routing.pacing)
        )
        if cur is not None:
            state.drained = cur.drained
            closing.append(cur)
            replaced.append(name)
        else:
            added.append(name)
        new[name] = state
    removed = [name for name in gw.providers if name not in resolved]
    for name in removed:
        new.retired[name] = gw.providers[name]
        closing.append(gw.providers[name])
    gw.providers = new
    return kept, replaced, added, removed, closing


def _rebuild(gw: Gateway, *, policies_kept: set[str]) -> None:
    from tailgate.gateway.auth import KeyRing
    from tailgate.gateway.hedging import Hedger
    from tailgate.routing import Route

    config = gw.config
    gw.key_directory.set_config_keys(config.keys)  # the store's runtime keys stay (docs/keys.md)
    gw.keys = KeyRing(config.keys, config.admin_key, gw.key_directory)
    # The one access decision follows the new file: admin key, dashboard_key, metrics.key (auth.py).
    gw.guard.configure(gw.keys, dashboard_key=config.dashboard_key, metrics_key=config.metrics.key)
    gw.aliases = {
        alias: [Route(alias, r.provider, r.model, r.weight, frozenset(r.classes)) for r in model.routes]
        for alias, model in config.models.items()
    }
    gw.policies = {
        alias: gw.policies[alias]
        if alias in policies_kept and alias in gw.policies
        else gw._make_policy(model.policy or config.routing.policy, alias)
        for alias, model in config.models.items()
    }
    gw.hedgers = {
        alias: gw.hedgers[alias]
        if alias in policies_kept and alias in gw.hedgers
        else Hedger(alias, hedge, gw.hedge_counter)
        for alias, model in config.models.items()
        if (hedge := model.hedge or config.routing.hedge) is not None
    }
    gw.fleet.install()
    gw.refresh_provider_gauges()


async def _restart_prober(gw: Gateway) -> None:
    from tailgate.gateway.probes import ProbeStats

    prober = gw.prober
    await prober.close()
    prober.providers = gw.providers
    prober.config = gw.config.routing.probes
    prober.targets = list(dict.fromkeys((r.provider, r.model) for routes in gw.aliases.values() for r in routes))
    for t in prober.targets:
        prober.stats.setdefault(t, ProbeStats())
    prober.start()


async def _close_when_idle(p: ProviderState, limit_s: float = 600.0) -> None:
    """Close a replaced or removed provider's pool once the requests on it have finished."""
    deadline = time.monotonic() + limit_s
    while p.in_flight > 0 and time.monotonic() < deadline:  # noqa: ASYNC110 - a count, polled twice a second
        await asyncio.sleep(0.5)
    await p.client.close()


def _status(gw: Gateway) -> dict[str, Any]:
    st = gw.state.status()
    return {
        "backend": st.backend,
        "connected": st.connected,
        "fallback_active": st.fallback_active,
        "replicas": st.replicas,
        "fallback": gw.config.state.fallback,
    }


def _model_version(config: GatewayConfig) -> str:
    return config_version(config.model_dump_json().encode())


def _unchanged_aliases(old: GatewayConfig, new: GatewayConfig) -> set[str]:
    if old.routing != new.routing:
        return set()
    return {a for a, m in new.models.items() if old.models.get(a) == m}


def _describe(changed: dict[str, Any]) -> str:
    parts = [
        f"{k.removeprefix('providers_')}: {', '.join(v)}" for k, v in changed.items() if v and k != "restart_needed"
    ]
    return "; ".join(parts) or "no provider changed"


def add_config_routes(app: web.Application, gw: Gateway) -> None:
    """``GET /admin/config`` and ``POST /admin/reload`` (admin key)."""

    def denied(request: web.Request) -> web.Response | None:
        refusal = gw.guard.check(request, "admin")  # the one access decision (auth.py)
        return error_response(refusal) if refusal is not None else None

    async def show(request: web.Request) -> web.Response:
        if (no := denied(request)) is not None:
            return no
        return web.json_response(gw.reloader.snapshot())

    async def reload(request: web.Request) -> web.Response:
        if (no := denied(request)) is not None:
            return no
        out = await gw.reloader.reload()
        return web.json_response(out, status=200 if out["ok"] else 400)

    app.router.add_get("/admin/config", show)
    app.router.add_post("/admin/reload", reload)


async def publish_version(gw: Gateway) -> None:
    """Tell the fleet which config this replica runs (called from the fleet's publish tick)."""
    with contextlib.suppress(Exception):
        await gw.state.publish("config", gw.reloader.version.encode(), ttl_s=5.0)
