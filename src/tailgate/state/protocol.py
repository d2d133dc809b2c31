"""The fleet-state protocol: what replicas of one gateway share, and the promise of each primitive.

Two backends implement it: ``local`` (in-process; one replica, today's behaviour) and ``redis`` (a fleet of
replicas on one Redis or Valkey). Routing and the gateway talk to :class:`SharedState` only, and one contract
suite (``tests/state``) runs against both.

Two kinds of call:

- **Atomic decisions** (``take``, ``adjust``, ``acquire``, ``release``, ``bump``, ``pause``, ``set_flag``,
  ``publish``) are coroutines: with Redis each is one round trip (a Lua script where it must be atomic),
  bounded by ``state.timeout`` (a few ms). When Redis is down or slow the call is answered by the local
  fallback (see ``fallback`` below), never by an exception and never by a wait longer than the budget.
- **Fleet views** (``generation``, ``paused_for``, ``flag``, ``peers``, ``replicas``) are plain methods that
  read a cache the backend refreshes in the background every ``state.sync_interval`` (0.25 s), so reading
  them costs a dict look-up and is safe on the per-request path. A change made on any replica is visible
  in every replica's view within ``sync_interval`` + one round trip (< 1 s).

Names are free-form strings chosen by the caller (``key:team-a:rpm``, ``provider:lanyun``); a backend
prefixes them with its namespace. Amounts are floats (tokens, money, requests).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from tailgate.state.priority import Lane

__all__ = [
    "Adjustment",
    "Admission",
    "Backend",
    "Claim",
    "Lease",
    "Reservation",
    "SharedState",
    "Slot",
    "StateStatus",
]

Backend = Literal["local", "redis"]


class Admission(msgspec.Struct, frozen=True):
    """The answer of :meth:`SharedState.take` (and :meth:`SharedState.acquire`).

    ``ok``: the amount was taken. ``retry_after_s``: when refused, the earliest time a retry of the same
    amount could succeed (0.0 when ok; ``inf`` when it never can, e.g. an amount above the limit or a spent
    budget without a window). ``remaining``: what is left under the limit after this decision. ``limit``:
    the limit decided against. ``reset_s``: seconds until the whole window's usage has rolled off (for
    ``x-ratelimit-reset-*``; 0.0 without a window).
    """

    ok: bool
    retry_after_s: float
    remaining: float
    limit: float
    reset_s: float = 0.0
    bucket: int | None = None
    """The window bucket the amount was counted in (None: refused, or no window). Pass it to ``adjust`` to
    refund exactly what this take counted."""
    local: bool = False
    """Decided by this replica's fallback (Redis down or slower than ``state.timeout``), not fleet-wide."""


class Adjustment(msgspec.Struct, frozen=True):
    """One correction for :meth:`SharedState.settle`: the arguments of :meth:`SharedState.adjust`."""

    name: str
    delta: float
    window_s: float | None
    bucket: int | None = None


class Claim(msgspec.Struct, frozen=True):
    """One part of a :meth:`SharedState.reserve`: the arguments of :meth:`SharedState.take`."""

    name: str
    amount: float
    limit: float
    window_s: float | None


class Slot(msgspec.Struct, frozen=True):
    """The concurrency slot of a :meth:`SharedState.reserve`: the arguments of :meth:`SharedState.acquire`."""

    name: str
    limit: int
    ttl_s: float = 600.0
    count: int = 1
    """Slots held at once, all or nothing (a replica's leased slots, ``state/allowance.py``); with Redis each
    is its own member (``token:1`` .. ``token:count`` when more than one), released one by one. The in-process
    backends hold one."""


class Reservation(msgspec.Struct, frozen=True):
    """The answer of :meth:`SharedState.reserve`: everything was taken (``ok``), or nothing is held.

    ``admissions``: each claim's decision, in order, up to and including the one refused (all of them when
    ``ok`` or when the slot refused); the buckets of an ``ok`` reservation are where its takes were counted.
    ``lease``: the slot (None when none was asked, or a claim refused first)."""

    ok: bool
    admissions: tuple[Admission, ...]
    lease: Lease | None = None

    @property
    def refused(self) -> Admission | Lease | None:
        """What said no: the refused claim's admission, or the slot's lease; None when ``ok``."""
        if self.ok:
            return None
        if self.admissions and not self.admissions[-1].ok:
            return self.admissions[-1]
        return self.lease


class Lease(msgspec.Struct, frozen=True):
    """One held slot of a concurrency gauge (:meth:`SharedState.acquire`); give it back with ``release``."""

    ok: bool
    token: str
    """Identifies this slot for ``release``; empty when refused."""
    in_use: int
    """Slots held fleet-wide after this decision (this one included when ok)."""
    limit: int


@dataclass(frozen=True, slots=True)
class StateStatus:
    """What ``/admin/config``, ``/metrics`` and the logs say about the state backend."""

    backend: Backend
    replica: str
    connected: bool
    """Redis answered the last sync (always True for ``local``)."""
    fallback_active: bool
    """Decisions are being made by the local fallback right now (Redis down or slow)."""
    replicas: int
    """Replicas seen alive in the last few sync intervals (this one included)."""


class SharedState(abc.ABC):
    """Fleet state behind one protocol; see the module docstring. ``await start()`` before use."""

    backend: Backend
    replica: str
    """This replica's id (``state.replica`` or ``host:pid``): the label of its series and its published data."""

    # -- lifecycle -----------------------------------------------------------------------------------

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect (Redis) and start the background sync; returns without waiting for Redis to answer."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the sync, withdraw this replica's published data and held slots where possible."""

    @abc.abstractmethod
    def status(self) -> StateStatus: ...

    # -- counters over a sliding window (rate limits, token limits, budgets) ---------------------------

    @abc.abstractmethod
    async def take(self, name: str, amount: float, limit: float, window_s: float | None) -> Admission:
        """Take ``amount`` under ``limit`` per ``window_s`` seconds for the counter ``name``, all or nothing.

        Sliding window in 1/60-window sub-buckets (1 s buckets for a 60 s window): the usage counted at
        time t is what was taken in the buckets that started within the last ``window_s``, so over any
        window of that length at most ``limit`` plus one bucket's takes can pass (exactly ``limit`` over
        windows aligned to buckets). ``window_s=None``: no window — a total (a budget) that only
        ``adjust`` lowers. ``amount`` above ``limit`` is refused with ``retry_after_s = inf``. ``amount``
        0 asks without taking.
        """

    @abc.abstractmethod
    async def adjust(self, name: str, delta: float, window_s: float | None, bucket: int | None = None) -> float:
        """Add ``delta`` to the usage of ``name``, whatever the limit (settling an estimate on the actual usage
        may go over it); usage never reads below 0. Returns the counter's usage over the window after.

        A refund (``delta < 0``) with the ``bucket`` of the take it corrects is applied to that bucket, at most
        down to 0, and dropped once that bucket has left the window (the take no longer counts anyway) —
        so a refund never lets more through than the window allows. Without ``bucket``, and for any
        ``delta > 0``, it goes to the current bucket. No client waits on it: with Redis it is bounded by 1 s,
        not by ``state.timeout``."""

    @abc.abstractmethod
    async def usage(self, name: str, window_s: float | None) -> float:
        """The counter's usage over the window now (no change)."""

    async def settle(self, adjustments: Sequence[Adjustment], lease: tuple[str, str] | None = None) -> None:
        """Apply every adjustment (as :meth:`adjust` does) and then release ``lease`` (name, token), if any.

        What a request does when it ends: correct its reservations to what it used and free its slot. A
        backend with round trips (Redis) sends them all at once; the default does them one by one."""
        try:
            for a in adjustments:
                await self.adjust(a.name, a.delta, a.window_s, a.bucket)
        finally:
            if lease is not None:
                await self.release(*lease)

    async def reserve(self, claims: Sequence[Claim], slot: Slot | None = None) -> Reservation:
        """Take every claim and then the slot, all or nothing: a refusal (or an exception) leaves nothing held.

        What a request does when it arrives: reserve its estimate under each of its key's limits and hold a
        concurrency slot. A backend with round trips (Redis) decides it all in one atomic call; the default
        takes the parts one by one and gives back what it took when a later part refuses."""
        admissions: list[Admission] = []
        lease: Lease | None = None
        ok = False
        try:
            for c in claims:
                adm = await self.take(c.name, c.amount, c.limit, c.window_s)
                admissions.append(adm)
                if not adm.ok:
                    break
            else:
                lease = await self.acquire(slot.name, slot.limit, slot.ttl_s) if slot is not None else None
                ok = lease is None or lease.ok
        finally:
            if not ok:
                refunds = [
                    Adjustment(c.name, -c.amount, c.window_s, a.bucket)
                    for c, a in zip(claims, admissions, strict=False)
                    if a.ok and c.amount
                ]
                await self.settle(refunds)
        return Reservation(ok, tuple(admissions), lease)

    # -- paced buckets (a provider's rpm / tpm, fleet-wide, with the batch lane behind interactive) -----

    @abc.abstractmethod
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
        """Take ``amount`` from the token bucket ``name`` (``rate`` per second, at most ``burst``), or nothing.

        The priority rule of ``state/priority.py`` (``keep_level``): an ``interactive`` take succeeds whenever the
        bucket holds ``amount - debt`` (it may leave a debt of ``debt`` ≤ ``amount``), a ``batch`` take only when
        it leaves ``reserve`` (≥ 0) + what an interactive take of its size needs. With Redis every replica takes
        from one bucket per name, on Redis's clock. ``remaining``: the level after the decision; ``limit``:
        ``burst``; ``retry_after_s``: when the same take could succeed (at ``rate``; ``inf`` when ``amount`` + the
        level it must keep is above ``burst``)."""

    # -- concurrency gauges ----------------------------------------------------------------------------

    @abc.abstractmethod
    async def acquire(self, name: str, limit: int, ttl_s: float = 600.0) -> Lease:
        """Hold one of ``limit`` slots of ``name`` (e.g. a key's ``max_concurrency``), or be refused.

        A slot not released within ``ttl_s`` (its replica died) is freed by itself."""

    @abc.abstractmethod
    async def release(self, name: str, token: str) -> None:
        """Give back the slot ``token`` of ``name`` (unknown or already expired tokens are ignored)."""

    async def renew(self, name: str, tokens: Sequence[str], ttl_s: float) -> None:
        """Let the slots ``tokens`` of ``name`` (``token:i`` members of a grant with ``Slot.count``) expire
        ``ttl_s`` from now instead; gone ones stay gone. A state without other replicas has nothing to do."""
        return

    # -- generations (a version per namespace: "something in here changed, reload it") -----------------

    @abc.abstractmethod
    async def bump(self, namespace: str) -> int:
        """Increment ``namespace``'s generation; returns the new value. Every replica's
        :meth:`generation` shows it within one sync interval."""

    @abc.abstractmethod
    def generation(self, namespace: str) -> int:
        """The generation of ``namespace`` as of the last sync (0 if never bumped). Cheap; per request ok."""

    # -- pauses (a provider's 429 Retry-After, a breaker's open cool-down) -----------------------------

    @abc.abstractmethod
    async def pause(self, name: str, seconds: float, reason: str = "") -> None:
        """Mark ``name`` paused for ``seconds`` fleet-wide; a longer pause in force stays. ``seconds <= 0``
        clears the pause."""

    @abc.abstractmethod
    def paused_for(self, name: str) -> float:
        """Seconds left of ``name``'s pause as of the last sync (0.0: not paused). Cheap."""

    @abc.abstractmethod
    def pause_reason(self, name: str) -> str:
        """The reason given with the pause in force ("" when none)."""

    # -- flags (drain / enable; persisted, survive restarts of every replica) -------------------------

    @abc.abstractmethod
    async def set_flag(self, name: str, value: bool | None) -> None:
        """Set ``name`` to ``value`` fleet-wide (None: remove it, back to each replica's default)."""

    @abc.abstractmethod
    def flag(self, name: str) -> bool | None:
        """The flag as of the last sync (None: never set). Cheap."""

    # -- published blobs (each replica's health windows, merged by every replica) ---------------------

    @abc.abstractmethod
    async def publish(self, channel: str, blob: bytes, ttl_s: float = 5.0) -> None:
        """Publish this replica's ``blob`` on ``channel``; it is dropped from views after ``ttl_s``."""

    @abc.abstractmethod
    def peers(self, channel: str) -> dict[str, bytes]:
        """The other live replicas' latest blobs on ``channel`` (replica id → blob), as of the last sync."""

    @abc.abstractmethod
    def replicas(self) -> int:
        """Replicas alive in the fleet (this one included), as of the last sync; 1 for ``local``."""


def check_pace(amount: float, rate: float, burst: float) -> None:
    """Refuse, by name, the arguments no backend's :meth:`SharedState.pace` accepts."""
    if not (math.isfinite(amount) and amount >= 0):
        raise ValueError(f"amount must be a finite number >= 0, got {amount!r}")
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be a positive finite number, got {rate!r}")
    if not (math.isfinite(burst) and burst > 0):
        raise ValueError(f"burst must be a positive finite number, got {burst!r}")


def check_take(amount: float, limit: float, window_s: float | None) -> None:
    """Refuse, by name, the arguments no backend's :meth:`SharedState.take` accepts."""
    if not (math.isfinite(amount) and amount >= 0):
        raise ValueError(f"amount must be a finite number >= 0, got {amount!r}")
    if not (limit >= 0):
        raise ValueError(f"limit must be >= 0, got {limit!r}")
    if window_s is not None and not (0 < window_s < math.inf):
        raise ValueError(f"window_s must be positive and finite (or None), got {window_s!r}")
