"""One pooled HTTP client per provider."""

from __future__ import annotations

from types import TracebackType

import aiohttp

from tailgate.upstream.endpoint import Endpoint
from tailgate.upstream.keys import KeyPool

__all__ = ["UpstreamClient"]

# Idle keep-alive connections are closed after this long; providers' load balancers commonly drop
# idle connections after 60 s, and reusing one they already closed costs a failed request.
KEEPALIVE_S = 30.0


class UpstreamClient:
    """Owns the keep-alive connection pool (bounded by ``endpoint.max_connections``) and key pool.

    Create it inside the event loop that will use it; ``await close()`` (or ``async with``) at the end.
    The aiohttp session is made on first use, so constructing a client does no I/O.
    """

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.keys = KeyPool(endpoint.api_keys)
        self._session: aiohttp.ClientSession | None = None
        self._connector: aiohttp.TCPConnector | None = None
        self.in_flight = 0
        """Calls that hold an upstream response (and so a connection) right now."""

    def __repr__(self) -> str:
        return f"UpstreamClient({self.endpoint.name!r}, {self.endpoint.base_url!r}, in_flight={self.in_flight})"

    @property
    def session(self) -> aiohttp.ClientSession:
        """The pooled session, created on first use."""
        if self._session is None or self._session.closed:
            timeouts = self.endpoint.timeouts
            self._connector = aiohttp.TCPConnector(
                limit=self.endpoint.max_connections,
                limit_per_host=0,
                keepalive_timeout=KEEPALIVE_S,
            )
            self._session = aiohttp.ClientSession(
                connector=self._connector,
                # Only the connect phase is left to aiohttp; call() enforces the others itself so that
                # each expiry maps to its own error class.
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect),
                trust_env=False,
                raise_for_status=False,
            )
        return self._session

    @property
    def connector(self) -> aiohttp.TCPConnector | None:
        """The connection pool, once the session exists (tests inspect it for leaked connections)."""
        return self._connector

    async def close(self) -> None:
        """Close every pooled connection."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
