"""How a replica on Redis decides alone: Redis down, failing, or slower than ``state.timeout`` (docs/fleet.md).

``fallback: local`` decides in this process's :class:`LocalState` (``local``), at this replica's share of each
limit; ``fallback: closed`` refuses whatever has a limit. The Redis backend (``redis.py``) keeps the two in
step: every take Redis grants is mirrored into ``local`` and each answer's room is remembered (``granted``),
so a decision made alone counts what Redis already gave this replica.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from tailgate.state.local import LocalState
from tailgate.state.protocol import Admission, Claim, Lease, Reservation, Slot

__all__ = ["Fallback"]


class Fallback:
    """This replica's decisions while Redis cannot make them; ``replicas`` is the fleet size last seen."""

    def __init__(self, replica: str, *, closed: bool, replicas: Callable[[], int]) -> None:
        self.local = LocalState(replica)
        self.closed = closed
        self._replicas = replicas
        self._room: dict[tuple[str, float | None], list[float]] = {}
        """(name, window) → [room the last fleet-wide answer left, when, spent here alone since]."""

    def _fleet(self) -> int:
        return max(1, self._replicas())

    # -- in step with Redis -------------------------------------------------------------------------------

    def granted(self, name: str, amount: float, window_s: float | None, remaining: float, *, mirror: bool) -> None:
        """Redis answered a take of ``name``, leaving ``remaining``; ``mirror``: it granted ``amount`` to us.

        Mirroring what Redis gave this replica into the local counter means that when a call is slow or Redis
        is down, this replica's share (limit ÷ replicas) already includes its recent takes, so a slow burst
        cannot add a whole share on top of what Redis admitted."""
        self._room[(name, window_s)] = [remaining, time.monotonic(), 0.0]
        if mirror and amount:
            self.local.adjust_now(name, amount, window_s)

    def mirror(self, name: str, delta: float, window_s: float | None, *, applied: bool) -> float:
        """Keep the local counter in step with a correction: all of it when Redis could not apply it (this
        replica counts for it meanwhile); only a refund when Redis did — the mirror gives back what Redis got
        back, while an overrun is Redis's to count."""
        if applied and delta >= 0:
            return 0.0
        return self.local.adjust_now(name, delta, window_s, None)

    # -- decisions ------------------------------------------------------------------------------------------

    def take(self, name: str, amount: float, limit: float, window_s: float | None) -> Admission:
        """Decide a take alone. With a fleet-wide answer for this counter from less than a window ago, this
        replica may spend its share of the room that answer left (``remaining ÷ replicas``), less what it
        spent so since: a slow call near the limit cannot overshoot it. Without one (Redis down for long), the
        share of the limit, counted against what Redis gave this replica in the window (the mirror)."""
        if self.closed:
            return Admission(False, 1.0, 0.0, limit, local=True)
        room = self._room.get((name, window_s))
        if room is not None and window_s is not None and time.monotonic() - room[1] < window_s:
            left = room[0] / self._fleet() - room[2]
            if amount <= left:
                room[2] += amount
                self.local.adjust_now(name, amount, window_s)
                return Admission(True, 0.0, max(0.0, room[0] - amount), limit, 0.0, None, local=True)
            return Admission(False, 1.0, max(0.0, room[0]), limit, 1.0, None, local=True)
        adm = self.local.take_now(name, amount, limit / self._fleet(), window_s)
        return Admission(adm.ok, adm.retry_after_s, adm.remaining, limit, adm.reset_s, None, local=True)

    def acquire(self, name: str, limit: int, ttl_s: float) -> Lease:
        """One of this replica's share of ``limit`` slots; its token starts with ``local:``."""
        if self.closed:
            return Lease(False, "", 0, limit)
        got = self.local.acquire_now(name, max(1, math.floor(limit / self._fleet())), ttl_s)
        return Lease(got.ok, "local:" + got.token if got.ok else "", got.in_use, limit)

    def release(self, name: str, token: str) -> None:
        self.local.release_now(name, token.removeprefix("local:"))

    def reserve(self, claims: Sequence[Claim], slot: Slot | None) -> Reservation:
        """Each claim as :meth:`take` decides it, then the slot as :meth:`acquire`; a refusal gives back the
        takes before it."""
        admissions: list[Admission] = []
        for c in claims:
            adm = self.take(c.name, c.amount, c.limit, c.window_s)
            admissions.append(adm)
            if not adm.ok:
                self.untake(claims[: len(admissions) - 1])
                return Reservation(False, tuple(admissions))
        lease = self.acquire(slot.name, slot.limit, slot.ttl_s) if slot is not None else None
        if lease is not None and not lease.ok:
            self.untake(claims)
            return Reservation(False, tuple(admissions), lease)
        return Reservation(True, tuple(admissions), lease)

    def untake(self, claims: Sequence[Claim]) -> None:
        """Give back takes decided here (the local counter, and the share of room they had spent)."""
        for c in claims:
            if c.amount:
                self.local.adjust_now(c.name, -c.amount, c.window_s)
                room = self._room.get((c.name, c.window_s))
                if room is not None:
                    room[2] = max(0.0, room[2] - c.amount)
