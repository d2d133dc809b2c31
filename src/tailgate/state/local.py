"""The ``local`` backend: fleet state of a fleet of one, in this process (the embedded default).

Every call is answered at once from dicts; views are always current. Redis's backend also keeps one of
these as its fallback while Redis is down (``redis.py``).
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable, Sequence

from tailgate.state.priority import Lane, PaceBucket, keep_level
from tailgate.state.protocol import (
    Adjustment,
    Admission,
    Backend,
    Claim,
    Lease,
    Reservation,
    SharedState,
    Slot,
    StateStatus,
    check_pace,
    check_take,
)
from tailgate.state.window import WindowCounter

__all__ = ["LocalState", "default_replica_id"]


def default_replica_id() -> str:
    """``host:pid``: unique on a host, readable in a label."""
    return f"{socket.gethostname()}:{os.getpid()}"


class LocalState(SharedState):
    """In-process state; ``clock`` is injectable (seconds, monotonic)."""

    backend: Backend = "local"

    def __init__(self, replica: str | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.replica = replica or default_replica_id()
        self._clock = clock
        self._counters: dict[tuple[str, float | None], WindowCounter] = {}
        self._gauges: dict[str, dict[str, float]] = {}
        self._generations: dict[str, int] = {}
        self._pauses: dict[str, tuple[float, str]] = {}
        self._flags: dict[str, bool] = {}
        self._tokens = 0
        self._buckets: dict[str, PaceBucket] = {}

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def status(self) -> StateStatus:
        return StateStatus("local", self.replica, connected=True, fallback_active=False, replicas=1)

    # -- counters ---------------------------------------------------------------------------------------

    def _counter(self, name: str, window_s: float | None) -> WindowCounter:
        key = (name, window_s)
        c = self._counters.get(key)
        if c is None:
            c = self._counters[key] = WindowCounter()
        return c

    def take_now(self, name: str, amount: float, limit: float, window_s: float | None) -> Admission:
        """``take`` without a coroutine (the local backend never waits)."""
        check_take(amount, limit, window_s)
        return self._counter(name, window_s).take(self._clock(), amount, limit, window_s)

    async def take(self, name: str, amount: float, limit: float, window_s: float | None) -> Admission:
        return self.take_now(name, amount, limit, window_s)

    def pace_now(
        self,
        name: str,
        amount: float,
        rate: float,
        burst: float,
        *,
        lane: Lane = "interactive",
        reserve: float = 0.0,
        debt: float = 0.0,
    ) -> Admission:
        """``pace`` without a coroutine (the local backend never waits)."""
        check_pace(amount, rate, burst)
        now = self._clock()
        bucket = self._buckets.get(name)
        if bucket is None:
            bucket = self._buckets[name] = PaceBucket(burst, now)
        ok, retry, level = bucket.take(now, amount, rate, burst, keep_level(lane, amount, reserve, debt))
        return Admission(ok, retry, level, burst)

    async def pace(
        self,
        name: str,
        amount: float,
        rate: float,
        burst: float,
        *,
        lane: Lane = "interactive",
        reserve: float = 0.0,
        debt: float = 0.0,
    ) -> Admission:
        return self.pace_now(name, amount, rate, burst, lane=lane, reserve=reserve, debt=debt)

    def adjust_now(self, name: str, delta: float, window_s: float | None, bucket: int | None = None) -> float:
        if not math.isfinite(delta):
            raise ValueError(f"delta must be finite, got {delta!r}")
        return self._counter(name, window_s).adjust(self._clock(), delta, window_s, bucket)

    async def adjust(self, name: str, delta: float, window_s: float | None, bucket: int | None = None) -> float:
        return self.adjust_now(name, delta, window_s, bucket)

    async def usage(self, name: str, window_s: float | None) -> float:
        c = self._counters.get((name, window_s))
        return c.usage(self._clock(), window_s) if c is not None else 0.0

    # -- a request's reservation and settlement, without a coroutine ------------------------------------

    def reserve_now(self, claims: Sequence[Claim], slot: Slot | None = None) -> Reservation:
        """``reserve`` without a coroutine (the same decisions as the protocol's default, in one call)."""
        admissions: list[Admission] = []
        lease: Lease | None = None
        ok = False
        try:
            for c in claims:
                adm = self.take_now(c.name, c.amount, c.limit, c.window_s)
                admissions.append(adm)
                if not adm.ok:
                    break
            else:
                lease = self.acquire_now(slot.name, slot.limit, slot.ttl_s) if slot is not None else None
                ok = lease is None or lease.ok
        finally:
            if not ok:  # refused (or a bad claim raised): give back what was taken
                for c, a in zip(claims, admissions, strict=False):
                    if a.ok and c.amount:
                        self.adjust_now(c.name, -c.amount, c.window_s, a.bucket)
        return Reservation(ok, tuple(admissions), lease)

    async def reserve(self, claims: Sequence[Claim], slot: Slot | None = None) -> Reservation:
        return self.reserve_now(claims, slot)

    def settle_now(self, adjustments: Sequence[Adjustment], lease: tuple[str, str] | None = None) -> None:
        """``settle`` without a coroutine."""
        try:
            for a in adjustments:
                self.adjust_now(a.name, a.delta, a.window_s, a.bucket)
        finally:
            if lease is not None:
                self.release_now(*lease)

    async def settle(self, adjustments: Sequence[Adjustment], lease: tuple[str, str] | None = None) -> None:
        self.settle_now(adjustments, lease)

    # -- gauges -----------------------------------------------------------------------------------------

    def acquire_now(self, name: str, limit: int, ttl_s: float = 600.0) -> Lease:
        now = self._clock()
        held = self._gauges.setdefault(name, {})
        if len(held) >= limit:
            # Only at the limit do expired leases (a holder that never released) matter: purge them then,
            # not on every acquire — the scan is O(held), and a key at 1,000 concurrent streams paid it per request.
            for token in [t for t, exp in held.items() if exp <= now]:
                del held[token]
            if len(held) >= limit:
                return Lease(False, "", len(held), limit)
        self._tokens += 1
        token = f"{self.replica}/{self._tokens}"
        held[token] = now + ttl_s
        return Lease(True, token, len(held), limit)

    async def acquire(self, name: str, limit: int, ttl_s: float = 600.0) -> Lease:
        return self.acquire_now(name, limit, ttl_s)

    def release_now(self, name: str, token: str) -> None:
        held = self._gauges.get(name)
        if held is not None:
            held.pop(token, None)

    async def release(self, name: str, token: str) -> None:
        self.release_now(name, token)

    # -- generations ------------------------------------------------------------------------------------

    async def bump(self, namespace: str) -> int:
        n = self._generations[namespace] = self._generations.get(namespace, 0) + 1
        return n

    def generation(self, namespace: str) -> int:
        return self._generations.get(namespace, 0)

    # -- pauses -----------------------------------------------------------------------------------------

    def pause_now(self, name: str, seconds: float, reason: str = "") -> None:
        if seconds <= 0:
            self._pauses.pop(name, None)
            return
        if not math.isfinite(seconds):
            raise ValueError(f"seconds must be finite, got {seconds!r}")
        until = self._clock() + seconds
        current = self._pauses.get(name)
        if current is None or current[0] < until:
            self._pauses[name] = (until, reason)

    async def pause(self, name: str, seconds: float, reason: str = "") -> None:
        self.pause_now(name, seconds, reason)

    def paused_for(self, name: str) -> float:
        p = self._pauses.get(name)
        return max(0.0, p[0] - self._clock()) if p is not None else 0.0

    def pause_reason(self, name: str) -> str:
        p = self._pauses.get(name)
        return p[1] if p is not None and p[0] > self._clock() else ""

    # -- flags ------------------------------------------------------------------------------------------

    def set_flag_now(self, name: str, value: bool | None) -> None:
        if value is None:
            self._flags.pop(name, None)
        else:
            self._flags[name] = value

    async def set_flag(self, name: str, value: bool | None) -> None:
        self.set_flag_now(name, value)

    def flag(self, name: str) -> bool | None:
        return self._flags.get(name)

    def flags(self) -> dict[str, bool]:
        """Every flag set (for the fallback's hand-over back to Redis)."""
        return dict(self._flags)

    # -- blobs ------------------------------------------------------------------------------------------

    async def publish(self, channel: str, blob: bytes, ttl_s: float = 5.0) -> None:
        return None  # a fleet of one has no one to tell

    def peers(self, channel: str) -> dict[str, bytes]:
        return {}

    def replicas(self) -> int:
        return 1
