"""How a replica connects to Redis (``redis.py``'s clients): the request path's bounded pool, its commands framed
by hiredis, and the sync loop's own connection.

Split from ``redis.py`` (what each call asks of Redis) and ``link.py`` (each call's budget and Redis's health).
"""

from __future__ import annotations

from typing import Any

import hiredis
import redis.asyncio as aioredis

__all__ = ["POOL_SIZE", "hiredis_packing", "request_client", "sync_client"]

POOL_SIZE = 16
"""Connections of the request path's pool."""


class _PackedByHiredis:
    """A connection whose commands are framed by hiredis's C ``pack_command`` (byte-identical for the str, bytes,
    int and float arguments tailgate sends; tests/state/test_state_redis_fleet.py). redis-py's asyncio connection
    frames them in Python: ~23 µs for a batched script's ~30 arguments against ~5 µs here (docs/benchmarks.md,
    "The Redis hop's framing"); its sync connection already uses hiredis for this."""

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]
        if (isinstance(first, str) and " " in first) or (isinstance(first, bytes) and b" " in first):
            args = (*first.split(), *args[1:])  # "SCRIPT LOAD": as redis-py does, the server wants the words apart
        return [hiredis.pack_command(args)]


def hiredis_packing(pool: aioredis.ConnectionPool) -> aioredis.ConnectionPool:
    """Frame commands with hiredis on whatever connection class the URL chose (TCP, TLS, unix socket)."""
    cls = pool.connection_class
    pool.connection_class = type(f"HiredisPacked{cls.__name__}", (_PackedByHiredis, cls), {})
    return pool


def request_client(url: str, socket_timeout: float) -> aioredis.Redis:
    """The request path's client. A bounded pool: a burst of requests waits (within its budget) for one of a few
    warm connections instead of opening dozens of new ones at once, which is what made calls slow under load."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=POOL_SIZE,
        timeout=None,
        socket_connect_timeout=1.0,
        socket_timeout=socket_timeout,
        retry_on_timeout=False,
        health_check_interval=0,
    )
    return aioredis.Redis(connection_pool=hiredis_packing(pool))


def sync_client(url: str, socket_timeout: float) -> aioredis.Redis:
    """The sync loop's connection of its own: it is the liveness signal, and behind a busy request pool (a replica
    at full CPU, every connection held by calls past their budget) it waited its turn past its 1 s budget and
    marked a healthy Redis down (8-11 times a run with Redis a hop away)."""
    return aioredis.Redis.from_url(
        url,
        socket_connect_timeout=1.0,
        socket_timeout=socket_timeout,
        retry_on_timeout=False,
        health_check_interval=0,
        single_connection_client=True,
    )
