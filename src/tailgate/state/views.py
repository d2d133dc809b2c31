"""The Redis backend's fleet views: what the last sync read, served from memory on the request path.

One ``SYNC`` script call per ``state.sync_interval`` returns Redis's clock, the generations, pauses, flags,
live replicas and every watched channel's blobs (``_lua.SYNC``); :meth:`FleetViews.apply` turns that reply
into these maps, with Redis's deadlines moved onto this process's monotonic clock.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["FleetViews"]


def _pairs(flat: list[Any]) -> list[tuple[bytes, bytes]]:
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


def _split(v: bytes) -> tuple[float, bytes]:
    head, _, tail = v.partition(b"|")
    return float(head), tail


class FleetViews:
    """Generations, pauses, flags, peers' blobs and the fleet's size, as of the last sync."""

    def __init__(self, replica: str, replicas_hint: int | None = None) -> None:
        self.replica = replica
        self.generations: dict[str, int] = {}
        self.pauses: dict[str, tuple[float, str]] = {}
        """name → (until, on our monotonic clock; reason)."""
        self.flags: dict[str, bool] = {}
        self.peers: dict[str, dict[str, tuple[float, bytes]]] = {}
        """channel → replica → (until, on our monotonic clock; blob)."""
        self.channels: set[str] = set()
        """Channels to read on each sync (any published or asked for here)."""
        self.replicas = replicas_hint or 1

    def apply(self, out: list[Any], channels: list[str]) -> float:
        """Take a ``SYNC`` reply read for ``channels``; returns the monotonic time it was applied at."""
        mono = time.monotonic()
        redis_now = float(out[0])
        self.generations = {k.decode(): int(v) for k, v in _pairs(out[1])}
        pauses: dict[str, tuple[float, str]] = {}
        for k, v in _pairs(out[2]):
            until, reason = _split(v)
            pauses[k.decode()] = (mono + until - redis_now, reason.decode(errors="replace"))
        self.pauses = pauses
        self.flags = {k.decode(): v == b"1" for k, v in _pairs(out[3])}
        self.replicas = max(1, len(out[4]) // 2)
        for channel, flat in zip(channels, out[5:], strict=True):
            self.peers[channel] = {
                k.decode(): (mono + until - redis_now, blob)
                for k, v in _pairs(flat)
                if k.decode() != self.replica
                for until, blob in (_split(v),)
            }
        return mono

    def paused_until(self, name: str) -> tuple[float, str] | None:
        return self.pauses.get(name)

    def live_peers(self, channel: str) -> dict[str, bytes]:
        self.channels.add(channel)
        now = time.monotonic()
        return {r: blob for r, (until, blob) in self.peers.get(channel, {}).items() if until > now}
