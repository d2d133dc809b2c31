"""A real gateway in front of a real simulated provider, on their own event loop in a thread.

Blocking clients (``http.client``, raw sockets, hypothesis-driven tests) talk to them over loopback;
nothing here is mocked.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from conftest import make_spec
from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.gateway.app import Gateway
from tailgate.gateway.http.listener import runner_kwargs, site
from tailgate.sim.provider import SimProvider

T = TypeVar("T")
ALIAS = "deepseek-v3.2"
UPSTREAM_MODEL = "up-model"
MSG = [{"role": "user", "content": "hello"}]


def gateway_config(sim_url: str, **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "providers": {"sim": {"base_url": sim_url, "api_keys": ["sk-upstream-canary-0123456789"]}},
        "models": {ALIAS: {"routes": [{"provider": "sim", "model": UPSTREAM_MODEL}]}},
        "routing": {"probes": {"enabled": False}},
    }
    config.update(extra)
    return config


class Stack:
    """One simulated provider (small output limit: a mutated ``max_tokens`` cannot make a huge answer)
    and one gateway in front of it, served by ``HardenedSite`` exactly as ``tailgate serve`` does."""

    def __init__(
        self,
        tmp: Path,
        *,
        sim_faults: dict[str, Any] | None = None,
        configure: Callable[[str], dict[str, Any]] | None = None,
        **gateway_extra: Any,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="hardening-stack", daemon=True)
        self._thread.start()
        self.sim = SimProvider(
            make_spec("instant", models=(UPSTREAM_MODEL,), engine={"max_output_tokens": 64}, faults=sim_faults)
        )
        self.call(self.sim.start())
        config = configure(self.sim.url) if configure is not None else gateway_config(self.sim.url, **gateway_extra)
        data = {"ledger": {"enabled": True, "path": str(tmp / "ledger.db")}, **config}
        self.config = validate_data(data, GatewayConfig, "hardening")
        self.gateway = Gateway(self.config, resolve_providers(self.config))
        self.runner: web.AppRunner | None = None
        self.call(self._start())

    async def _start(self) -> None:
        await self.gateway.start()
        self.runner = web.AppRunner(
            self.gateway.app(),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=5,
            **runner_kwargs(self.config.server),
        )
        await self.runner.setup()
        self.site = site(self.runner, "127.0.0.1", 0, self.config.server)
        await self.site.start()
        self.port = self.site.port

    def call(self, coro: Awaitable[T], timeout: float = 20) -> T:
        async def wrap() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(timeout=timeout)

    @property
    def sim_port(self) -> int:
        return int(self.sim.url.rsplit(":", 1)[1].split("/")[0])

    def close(self) -> None:
        async def stop() -> None:
            assert self.runner is not None
            await self.runner.cleanup()
            await self.gateway.close()
            await self.sim.stop()

        self.call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 15,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection; the whole response body is read."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def post_json(
    port: int, path: str, body: bytes, headers: dict[str, str] | None = None, timeout: float = 15
) -> tuple[int, dict[str, str], bytes]:
    return request(port, "POST", path, body, {"Content-Type": "application/json", **(headers or {})}, timeout)


def assert_openai_error(status: int, body: bytes) -> dict[str, Any]:
    """The body is ``{"error": {"message": str, "type": str, "param": str|null, "code": str|null}}``."""
    obj = json.loads(body)
    assert isinstance(obj, dict), body
    assert set(obj) == {"error"}, body
    err = obj["error"]
    assert set(err) == {"message", "type", "param", "code"}, body
    assert isinstance(err["message"], str), body
    assert err["message"], body
    assert isinstance(err["type"], str), body
    assert err["param"] is None or isinstance(err["param"], str), body
    assert err["code"] is None or isinstance(err["code"], str), body
    return dict(err)


def raw_socket(port: int, timeout: float = 5) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def recv_all(sock: socket.socket, limit: int = 1 << 16) -> bytes:
    """Everything until the peer closes (or ``limit`` bytes); a timeout raises."""
    chunks = []
    size = 0
    while size < limit:
        data = sock.recv(4096)
        if not data:
            break
        chunks.append(data)
        size += len(data)
    return b"".join(chunks)
