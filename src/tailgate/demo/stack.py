"""The demo's running system: simulated providers, one gateway in front of them, the store, the monitor.

Everything runs in this process on loopback ports, with no keys and no network. The gateway is the
real one (:class:`tailgate.gateway.app.Gateway`) built from a config dict validated exactly like a
YAML file, so what the demo shows is what ``tailgate serve`` does.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.demo.probes import DemoMonitor, start_monitor
from tailgate.gateway.app import Gateway
from tailgate.gateway.process.replicas import LocalFleet
from tailgate.sim.cluster import SimCluster
from tailgate.sim.presets import preset
from tailgate.sim.provider import ProviderSpec, SimProvider

log = logging.getLogger("tailgate.demo")

MODEL = "deepseek-v3.2"
PRIMARY = "primary"
SECONDARY = "secondary"

# (gateway provider name, simulator preset, route weight, traffic classes it takes first).
# Two providers, both live, as our users run them: the primary ~80% of the traffic, the
# secondary the rest plus the batch work, and each the other's fallback. The secondary is "same-cloud"
# (their words): a second provider shaped like provider A, so that moving traffic to it actually helps.
TWO = ((PRIMARY, "provider-a", 80.0, ()), (SECONDARY, "provider-a", 20.0, ("batch",)))
# --all-providers adds the other four field-note shapes as pure fallbacks (weight 0): the monitor probes
# and ranks all of them, like the third-party platform our users read, while traffic stays on A-shaped ones.
ALL = (
    *TWO,
    ("provider-b", "provider-b", 0.0, ()),
    ("provider-c", "provider-c", 0.0, ()),
    ("provider-d", "provider-d", 0.0, ()),
    ("provider-e", "provider-e", 0.0, ()),
)

# The SLO of the demo alias (as in scenarios/primary-degrades.yaml): provider A's P90 TTFT is ≈ 1 s and its
# E2E for these answers ≈ 1.5–2.5 s, inside it; a primary slowed 5× (P90 TTFT ≈ 5 s) is far over it and
# loses most of its weight; providers B–E (P90 TTFT 3.8–11 s) stay on the 1% floor.
SLO = {"ttft_p90": "1.5s", "e2e_p90": "3s"}
PRICE = {"input": 2.0, "output": 3.0, "currency": "CNY"}  # ¥ per million tokens, the same everywhere


@dataclass(frozen=True, slots=True)
class StackOptions:
    port: int = 0
    """Gateway port (0: a free one). Simulated providers take the ports after it (or free ones)."""
    all_providers: bool = False
    time_scale: float = 1.0
    db: Path | None = None
    """The store (ledger, monitor samples). None: ``$TAILGATE_DB`` if set, else a temporary file."""
    monitor: bool = True
    replicas: int = 1
    """Gateway replicas on the one port, sharing state through a private redis-server (docs/fleet.md)."""


def gateway_config(urls: dict[str, str], db: Path, *, all_providers: bool = False) -> dict[str, Any]:
    """The demo's gateway config: the 80/20 adaptive shape our users run (docs/demo.md) over the simulated providers."""
    table = ALL if all_providers else TWO
    return {
        "listen": {"host": "127.0.0.1", "port": 0},
        "providers": {
            name: {"base_url": urls[name], "api_keys": [f"sk-demo-{name}-0000"], "price": PRICE} for name, *_ in table
        },
        "models": {
            MODEL: {
                "routes": [
                    {"provider": name, "model": MODEL, "weight": weight, "classes": list(classes)}
                    for name, _, weight, classes in table
                ]
            }
        },
        "routing": {"policy": "adaptive", "slo": SLO},
        "ledger": {"path": str(db)},
    }


@dataclass
class Stack:
    """The running pieces; build with :func:`start_stack`, stop with :meth:`close`."""

    cluster: SimCluster
    gateway: Gateway
    fleet: LocalFleet
    """Every replica (``fleet.gateways``); ``gateway`` is the first."""
    port: int
    db: Path
    dashboard: bool = False
    monitor: DemoMonitor | None = None
    config: dict[str, Any] = field(default_factory=dict)
    _tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def temporary(self) -> bool:
        """The store is a temporary file, removed by :meth:`close`."""
        return self._tmp is not None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def primary(self) -> SimProvider:
        return self.cluster.providers[PRIMARY]

    async def close(self) -> None:
        """Stop the monitor, the gateway (ledger flushed) and the providers; remove a temporary store."""
        if self.monitor is not None:
            await self.monitor.close()
        await self.fleet.close()
        await self.cluster.stop()
        if self._tmp is not None:
            self._tmp.cleanup()


def _store_path(db: Path | None) -> tuple[Path, tempfile.TemporaryDirectory[str] | None]:
    if db is not None:
        return db.expanduser(), None
    if os.environ.get("TAILGATE_DB"):
        return Path(os.environ["TAILGATE_DB"]).expanduser(), None
    tmp = tempfile.TemporaryDirectory(prefix="tailgate-demo-")
    return Path(tmp.name) / "tailgate.db", tmp


def _has_dashboard(app: web.Application) -> bool:
    """Whether the gateway app serves ``/dashboard`` (it mounts the dashboard itself when it is installed)."""
    return any(getattr(r, "canonical", "") == "/dashboard" for r in app.router.resources())


async def start_stack(options: StackOptions) -> Stack:
    """Start the providers, then the gateway over them; on any failure, stop what was started."""
    table = ALL if options.all_providers else TWO
    base = options.port + 1 if options.port else 0
    specs = [
        ProviderSpec(
            name=name,
            params=preset(pre),
            preset=pre,
            port=base + i if base else 0,
            seed=i,
            time_scale=options.time_scale,
            models=(MODEL,),
            truth_size=200_000,  # the drill reads the primary's arrivals back from its ground truth
        )
        for i, (name, pre, _, _) in enumerate(table)
    ]
    db, tmp = _store_path(options.db)
    cluster = SimCluster(specs)
    try:
        await cluster.start()
        urls = {name: p.url for name, p in cluster.providers.items()}
        data = gateway_config(urls, db, all_providers=options.all_providers)
        cfg = validate_data(data, GatewayConfig, "tailgate demo")
        resolved = resolve_providers(cfg, "tailgate demo")
        fleet = LocalFleet(
            cfg, resolved, replicas=options.replicas, ledger_path=db, port=options.port, shutdown_timeout=2.0
        )
    except BaseException:
        await cluster.stop()
        if tmp is not None:
            tmp.cleanup()
        raise
    try:
        await fleet.start()
        dashboard = _has_dashboard(fleet.runners[0].app)
        stack = Stack(cluster, fleet.gateway, fleet, fleet.port, db, dashboard=dashboard, config=data, _tmp=tmp)
        if options.monitor:
            stack.monitor = await start_monitor(cfg, resolved, db)
        return stack
    except BaseException:
        await fleet.close()
        await cluster.stop()
        if tmp is not None:
            tmp.cleanup()
        raise
