"""One pooled HTTP client per provider."""

from __future__ import annotations

from types import TracebackType
from urllib.parse import urlsplit

from tailgate.upstream.endpoint import Endpoint
from tailgate.upstream.http import Pool
from tailgate.upstream.key_pool import KeyPool

__all__ = ["UpstreamClient"]

# Idle keep-alive connections are closed after this long; providers' load balancers commonly drop
# idle connections after 60 s, and reusing one they already closed costs a failed request.
KEEPALIVE_S = 30.0


class UpstreamClient:
    """Owns the keep-alive connection pool (bounded by ``endpoint.max_connections``) and key pool.

    Create it inside the event loop that will use it; ``await close()`` (or ``async with``) at the end.
    The pool (tailgate.upstream.http) is made on first use, so constructing a client does no I/O.
    """

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.keys = KeyPool(endpoint.api_keys)
        self._pool: Pool | None = None
        self._targets: dict[str, str] = {}
        self.in_flight = 0
        """Calls that hold an upstream response (and so a connection) right now."""

    def __repr__(self) -> str:
        return f"UpstreamClient({self.endpoint.name!r}, {self.endpoint.base_url!r}, in_flight={self.in_flight})"

    @property
    def pool(self) -> Pool:
        """The keep-alive connection pool, created on first use."""
        if self._pool is None:
            self._pool = Pool(
                self.endpoint.base_url,
                limit=self.endpoint.max_connections,
                connect_timeout=self.endpoint.timeouts.connect,
                keepalive_s=KEEPALIVE_S,
            )
        return self._pool

    @property
    def connections(self) -> tuple[int, int, int]:
        """(in use, idle, opened so far) of the pool; zeros before the first call (no pool is made to answer)."""
        pool = self._pool
        return (0, 0, 0) if pool is None else (pool.in_use, pool.idle, pool.opened)

    def target(self, path: str) -> str:
        """The request target (the URL's path) of ``path`` under the base URL, cached per path."""
        target = self._targets.get(path)
        if target is None:
            parts = urlsplit(self.endpoint.url(path))
            target = self._targets[path] = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return target

    async def close(self) -> None:
        """Close every pooled connection."""
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
