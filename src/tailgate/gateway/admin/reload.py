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

A request in flight keeps the route table it read when it arrived (routes.py: a reload swaps the table
whole, never a request's), and finishes on the providers it started with. What a reload does not change
(a restart does): ``listen``, ``state``, ``ledger``, ``max_body_bytes``, ``telemetry``. docs/fleet.md.

The version is the first 12 hex digits of the file's SHA-256: replicas showing the same version run the
same file. Each replica publishes its version, so ``/admin/config`` on any replica lists the fleet's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.config.loader import ConfigError
from tailgate.config.resolve import ResolvedProvider, load_resolved
from tailgate.config.schema import GatewayConfig
from tailgate.gateway.request_path.providers import Providers, pacer_for, provider_state

if TYPE_CHECKING:
    from tailgate.gateway.access.auth import AccessGuard
    from tailgate.gateway.request_path.core import InForce
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.state import SharedState

__all__ = [
    "Apply",
    "Reloader",
    "add_config_routes",
    "close_when_idle",
    "config_version",
    "loaded_version",
    "replace_providers",
]

log = logging.getLogger("tailgate.gateway")

_RESTART_ONLY = ("listen", "state", "ledger", "max_body_bytes", "telemetry")


def config_version(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


Apply = Callable[[GatewayConfig, dict[str, ResolvedProvider]], dict[str, Any]]
"""Swaps a valid config in (the composition root's): returns what changed (``providers_kept`` …)."""


class Reloader:
    """Holds the path and version of the loaded config; reads, validates and hands a valid one to ``apply``.

    It is given the running ``config`` (a restart-only field a reload changes is kept as it was), its version,
    the route table and providers in force (``in_force``: what ``/admin/config`` lists) and the fleet ``state``
    (every replica's version), never the gateway."""

    def __init__(
        self,
        path: Path | None,
        config: GatewayConfig,
        *,
        version: str,
        in_force: InForce,
        state: SharedState,
        apply: Apply,
    ) -> None:
        self.path = path
        self.config = config
        """The running config (after the last reload)."""
        self.in_force = in_force
        self.state = state
        self._apply = apply
        self.version = version
        """The loaded config's version (``loaded_version`` at start, then each reload's)."""
        self.loaded_at = time.time()
        self.reloads = 0
        self.last: dict[str, Any] | None = None
        self._lock = asyncio.Lock()

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
            self.version = config_version(data)  # before the swap: the owners it hands the new config read it
            changed = self.apply(config, providers)
            self.loaded_at = time.time()
            self.reloads += 1
            self.last = {"ok": True, "version": self.version, "changed": changed, "at": self.loaded_at}
            log.info("config reloaded: version %s (%s)", self.version, _describe(changed))
            return self.last

    def apply(self, config: GatewayConfig, providers: dict[str, ResolvedProvider]) -> dict[str, Any]:
        """Keep the restart-only fields as they run, then swap ``config`` in (``apply``)."""
        old = self.config
        restart = [f for f in _RESTART_ONLY if getattr(old, f) != getattr(config, f)]
        if restart:
            log.warning("config reload: %s changed; that takes a restart (kept as it was)", ", ".join(restart))
            config = config.model_copy(update={f: getattr(old, f) for f in restart})
        changed = self._apply(config, providers)
        self.config = config
        return {**changed, "restart_needed": restart}

    def snapshot(self) -> dict[str, Any]:
        state = self.state
        fleet = {r: v.decode() for r, v in state.peers("config").items()}
        st = state.status()
        return {
            "version": self.version,
            "path": str(self.path) if self.path is not None else None,
            "loaded_at": self.loaded_at,
            "reloads": self.reloads,
            "last_reload": self.last,
            "replica": state.replica,
            "state": {
                "backend": st.backend,
                "connected": st.connected,
                "fallback_active": st.fallback_active,
                "replicas": st.replicas,
                "fallback": self.config.state.fallback,
            },
            "fleet_versions": {state.replica: self.version, **fleet},
            "same_version_fleet_wide": all(v == self.version for v in fleet.values()),
            "providers": sorted(self.in_force.providers),
            "aliases": sorted(self.in_force.routes.aliases),
        }


def replace_providers(
    current: Providers, old: GatewayConfig, config: GatewayConfig, resolved: dict[str, ResolvedProvider]
) -> tuple[Providers, dict[str, list[str]], list[ProviderState]]:
    """The providers of ``config``: an unchanged one is kept whole (pool, pacer, pause, drain flag, in-flight
    count; a new pacer when ``routing.pacing`` changed), a changed one is new (its drain flag kept), a removed
    one retired (found by the requests already on it). Returns them, what changed, and the states to close
    once idle (replaced or removed)."""
    kept: list[str] = []
    replaced: list[str] = []
    added: list[str] = []
    closing: list[ProviderState] = []
    pacing_same = config.routing.pacing == old.routing.pacing
    new = Providers()
    new.retired = dict(current.retired)
    for name, rp in resolved.items():
        cur = current.get(name)
        new.retired.pop(name, None)
        if cur is not None and cur.config == rp:
            if not pacing_same:
                cur.pacer = pacer_for(rp, config.routing.pacing)
            new[name] = cur
            kept.append(name)
            continue
        state = provider_state(rp, config.routing.pacing)
        if cur is not None:
            state.drained = cur.drained
            closing.append(cur)
            replaced.append(name)
        else:
            added.append(name)
        new[name] = state
    removed = [name for name in current if name not in resolved]
    for name in removed:
        new.retired[name] = current[name]
        closing.append(current[name])
    changed = {
        "providers_kept": kept,
        "providers_replaced": replaced,
        "providers_added": added,
        "providers_removed": removed,
    }
    return new, changed, closing


async def close_when_idle(p: ProviderState, limit_s: float = 600.0) -> None:
    """Close a replaced or removed provider's pool once the requests on it have finished."""
    deadline = time.monotonic() + limit_s
    while p.in_flight > 0 and time.monotonic() < deadline:  # noqa: ASYNC110 - a count, polled twice a second
        await asyncio.sleep(0.5)
    await p.close()


def loaded_version(path: Path | None, config: GatewayConfig) -> str:
    """The version of the config a gateway starts with: its file's, or its model's when it has no file."""
    return config_version(path.read_bytes()) if path is not None else config_version(config.model_dump_json().encode())


def _describe(changed: dict[str, Any]) -> str:
    parts = [
        f"{k.removeprefix('providers_')}: {', '.join(v)}" for k, v in changed.items() if v and k != "restart_needed"
    ]
    return "; ".join(parts) or "no provider changed"


def add_config_routes(app: web.Application, reloader: Reloader, access: AccessGuard) -> None:
    """``GET /admin/config`` and ``POST /admin/reload`` (admin key: the access guard)."""

    def denied(request: web.Request) -> web.Response | None:
        refusal = access.check(request, "admin")  # the one access decision (auth.py)
        return error_response(refusal) if refusal is not None else None

    async def show(request: web.Request) -> web.Response:
        if (no := denied(request)) is not None:
            return no
        return web.json_response(reloader.snapshot())

    async def reload(request: web.Request) -> web.Response:
        if (no := denied(request)) is not None:
            return no
        out = await reloader.reload()
        return web.json_response(out, status=200 if out["ok"] else 400)

    app.router.add_get("/admin/config", show)
    app.router.add_post("/admin/reload", reload)
