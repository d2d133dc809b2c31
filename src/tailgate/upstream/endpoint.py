"""Where one provider lives and how long each phase of a call may take."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tailgate.config.resolve import ResolvedProvider

__all__ = ["Endpoint", "Timeouts", "endpoint_for"]


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Per-phase limits in seconds; ``None`` disables one.

    ``connect``: TCP (and TLS) connect of a new connection (waiting for a free pool slot is not counted).
    ``headers``: send → response headers. ``first_token``: send → first token-carrying chunk.
    ``idle``: longest silence between two reads of a stream once a token arrived. ``total``: send → end.
    For a non-streamed call the wait for headers and body is bounded by the larger of ``headers`` and
    ``first_token``: most providers send a non-streamed answer's headers only once it is generated.
    """

    connect: float | None = 5.0
    headers: float | None = 30.0
    first_token: float | None = 60.0
    idle: float | None = 30.0
    total: float | None = 600.0

    def __post_init__(self) -> None:
        for name in ("connect", "headers", "first_token", "idle", "total"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"Timeouts.{name} must be a positive number of seconds or None, got {value!r}")


def _frozen(headers: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(headers))


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One provider: its OpenAI base URL (``http://host:port/v1``), keys, limits and extra headers.

    ``api_keys`` may be empty (a self-hosted server): then no Authorization header is sent. The keys
    are left out of ``repr`` so that logging an endpoint can never leak one.
    """

    name: str
    base_url: str
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    timeouts: Timeouts = field(default_factory=Timeouts)
    max_connections: int = 256
    headers: Mapping[str, str] = field(default_factory=lambda: _frozen({}))

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"Endpoint {self.name!r}: base_url must start with http:// or https://")
        if self.max_connections < 1:
            raise ValueError(f"Endpoint {self.name!r}: max_connections must be >= 1")
        if any(not key for key in self.api_keys):
            raise ValueError(f"Endpoint {self.name!r}: an API key is empty")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        object.__setattr__(self, "api_keys", tuple(self.api_keys))
        object.__setattr__(self, "headers", _frozen(self.headers))

    def url(self, path: str) -> str:
        """The full URL of ``path`` (``chat/completions`` or ``/chat/completions``) under the base URL."""
        return f"{self.base_url}/{path.lstrip('/')}"


def endpoint_for(provider: ResolvedProvider, *, max_total_s: float | None = None) -> Endpoint:
    """The endpoint of a configured provider, the same for the gateway, the monitor and ``bench --provider``.

    ``max_total_s`` caps the provider's ``timeouts.total`` (the monitor: one hung probe cannot hold a round).
    """
    t = provider.timeouts
    total = t.total if max_total_s is None else min(t.total or max_total_s, max_total_s)
    return Endpoint(
        name=provider.name,
        base_url=provider.base_url,
        api_keys=provider.api_keys,
        timeouts=Timeouts(connect=t.connect, headers=t.headers, first_token=t.first_token, idle=t.idle, total=total),
        max_connections=provider.limits.max_connections,
        headers=dict(provider.headers),
    )
