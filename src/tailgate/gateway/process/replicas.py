"""A fleet on one machine, in one process: N gateway replicas sharing one port and a private Redis.

For the demo and the scenario runner (``--replicas N``): each replica is a full :class:`Gateway` with its
own provider state, breakers, windows and metrics, exactly as in separate processes; what they share goes
through a throw-away ``redis-server`` (``state.server.RedisServer``) like a real fleet's. They listen on one
port with SO_REUSEPORT, so the kernel spreads the clients' connections over them the way a load balancer
would. With ``replicas=1`` this is a plain gateway (no Redis).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from aiohttp import web

from tailgate.config.resolve import ResolvedProvider
from tailgate.config.schema import GatewayConfig, StateConfig
from tailgate.gateway.app import Gateway
from tailgate.state.server import RedisServer, find_redis_server

__all__ = ["LocalFleet", "redis_available"]


def redis_available() -> bool:
    """Whether ``redis-server`` (or ``valkey-server``) is installed here."""
    return find_redis_server() is not None


def _named(config: GatewayConfig, replica: str) -> GatewayConfig:
    """In one process every replica needs its own id (``host:pid`` would be the same for all)."""
    return config.model_copy(update={"state": config.state.model_copy(update={"replica": replica})})


class LocalFleet:
    """``await start()``, then ``port`` / ``url``; ``await close()``. See the module docstring."""

    def __init__(
        self,
        config: GatewayConfig,
        providers: dict[str, ResolvedProvider],
        *,
        replicas: int = 1,
        ledger_path: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        shutdown_timeout: float = 5.0,
    ) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        self.redis: RedisServer | None = None
        if replicas > 1:
            self.redis = RedisServer()  # FileNotFoundError with the install hint when it is missing
            state = StateConfig.model_validate(
                {"backend": "redis", "url": self.redis.url, "namespace": f"fleet-{uuid.uuid4().hex[:8]}"}
            )
            config = config.model_copy(update={"state": state})
        self.config = config
        self.gateways = [
            Gateway(_named(config, f"replica-{i + 1}") if replicas > 1 else config, providers, ledger_path=ledger_path)
            for i in range(replicas)
        ]
        self.host = host
        self.port = port
        self.runners: list[web.AppRunner] = []
        self._shutdown_timeout = shutdown_timeout

    @property
    def gateway(self) -> Gateway:
        """The first replica (the only one when ``replicas=1``)."""
        return self.gateways[0]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> None:
        try:
            if self.redis is not None:
                self.redis.start()
            for gw in self.gateways:
                await gw.start()
                runner = web.AppRunner(
                    gw.app(), handler_cancellation=True, access_log=None, shutdown_timeout=self._shutdown_timeout
                )
                await runner.setup()
                self.runners.append(runner)
                site = web.TCPSite(runner, self.host, self.port, reuse_port=len(self.gateways) > 1 or None)
                await site.start()
                if self.port == 0:
                    self.port = site.port
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        for runner in self.runners:
            await runner.cleanup()
        self.runners = []
        for gw in self.gateways:
            await gw.close()
        if self.redis is not None:
            self.redis.close()
