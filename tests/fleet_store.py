"""A fleet writing to one PostgreSQL, for tests and benchmarks/bench_fleet_store.py: real ``tailgate serve``
replica processes (each with its own SQLite spool) in front of a simulated provider, a load generator that
tags every request with its own ``x-request-id``, and readers of what reached PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import yaml

__all__ = ["Load", "Replica", "fleet_config", "pg_request_ids", "run_load"]


def fleet_config(
    folder: Path,
    index: int,
    provider_url: str,
    pg_url: str,
    *,
    redis_url: str | None = None,
    namespace: str = "fleet",
    cut_url: str | None = None,
    admin_key: str | None = None,
    **ledger: Any,
) -> Path:
    """Replica ``index``'s config: its own spool, the shared PostgreSQL, optionally the fleet's Redis."""
    providers: dict[str, Any] = {
        "p": {"base_url": provider_url, "api_keys": ["sk-up-0123456789"], "price": {"input": 1, "output": 2}}
    }
    models: dict[str, Any] = {"chat": {"routes": [{"provider": "p", "model": "m"}]}}
    if cut_url is not None:
        providers["cutter"] = {
            "base_url": cut_url,
            "api_keys": ["sk-up-0123456789"],
            "price": {"input": 1, "output": 2},
        }
        models["cut"] = {"routes": [{"provider": "cutter", "model": "m"}]}
    data: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "providers": providers,
        "models": models,
        "retry": {"max_attempts": 1},
        "ledger": {"path": str(folder / f"spool{index}.db"), "url": pg_url, **ledger},
    }
    if admin_key is not None:
        data["admin_key"] = admin_key
    if cut_url is not None:  # a provider that cuts every stream is the point here, not a fault to route around
        data["routing"] = {"breaker": {"min_samples": 1_000_000, "consecutive_failures": 1_000_000}}
    if redis_url is not None:
        data["state"] = {
            "backend": "redis",
            "url": redis_url,
            "namespace": namespace,
            "replica": f"r{index}",
            "timeout": 0.5,  # a shared 2-core machine: decide in Redis, not in the fallback
        }
    path = folder / f"replica{index}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Replica:
    """One ``tailgate serve`` process; its stderr goes to a file (a full pipe would block it)."""

    def __init__(self, config: Path, log: Path, *, drain_timeout: float = 10.0) -> None:
        self.config = config
        self.log_path = log
        self._log = log.open("w")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tailgate",
                "serve",
                "--config",
                str(config),
                "--port",
                "0",
                "--drain-timeout",
                f"{drain_timeout:g}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env=env,
        )
        self.url = ""

    async def ready(self, within_s: float = 60.0) -> str:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            text = self.log_path.read_text()
            if match := re.search(r"gateway listening on (http://\S+)", text):
                self.url = match.group(1).removesuffix("/v1")
                return self.url
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica exited ({self.proc.returncode}):\n{text}")
            await asyncio.sleep(0.05)
        raise RuntimeError("replica did not start:\n" + self.log_path.read_text())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Stop the replica with ``sig``; one that does not exit within ``timeout`` is killed (never leaked into
        a later test) and the test fails with the end of its log, which shows how far its stop got."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            tail = "\n".join(self.log_path.read_text().splitlines()[-12:])
            raise AssertionError(
                f"replica did not stop within {timeout:g} s of signal {sig}; its log ends:\n{tail}"
            ) from None
        finally:
            self._log.close()


@dataclass
class Load:
    """What the clients saw: request id → (replica index, HTTP status or None for a transport error)."""

    results: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    answered_at: dict[str, float] = field(default_factory=dict)

    def ok_ids(self, replica: int | None = None) -> set[str]:
        return {rid for rid, (r, s) in self.results.items() if s == 200 and (replica is None or r == replica)}

    def failed(self) -> int:
        return sum(1 for _, s in self.results.values() if s != 200)


async def run_load(
    urls: list[str],
    n: int,
    *,
    concurrency: int = 8,
    prefix: str = "req",
    load: Load | None = None,
    body: dict[str, Any] | None = None,
    stop: asyncio.Event | None = None,
    headers: dict[str, str] | None = None,
    pace_s: float = 0.0,
) -> Load:
    """``n`` chat requests round-robin over ``urls`` (``stop`` ends early), ``concurrency`` at a time, each
    worker pausing ``pace_s`` between its requests."""
    out = load or Load()
    payload = body or {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    counter = iter(range(n))
    timeout = aiohttp.ClientTimeout(total=30)

    async def worker(session: aiohttp.ClientSession) -> None:
        for i in counter:
            if stop is not None and stop.is_set():
                return
            rid = f"{prefix}-{i:07d}"
            which = i % len(urls)
            try:
                async with session.post(
                    f"{urls[which]}/v1/chat/completions", json=payload, headers={"x-request-id": rid, **(headers or {})}
                ) as resp:
                    await resp.read()
                    status: int | None = resp.status
            except (TimeoutError, aiohttp.ClientError):
                status = None
            out.results[rid] = (which, status)
            out.answered_at[rid] = time.monotonic()
            if pace_s:
                await asyncio.sleep(pace_s)

    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return out


def pg_request_ids(url: str) -> tuple[int, set[str]]:
    """(rows in ``requests``, their distinct request ids) in the fleet's PostgreSQL."""
    with psycopg.connect(url) as conn:
        ids = [r[0] for r in conn.execute("SELECT request_id FROM requests")]
    return len(ids), set(ids)
