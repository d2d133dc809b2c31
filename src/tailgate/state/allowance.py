"""Allowances: a replica admits a key's requests from slices it holds, and reconciles with Redis in the background.

On Redis, a request that asked Redis for its ``tpm``, budgets and ``max_concurrency`` would wait for a round trip
before it could start and hold its concurrency slot until Redis answered again (CHANGELOG.md has the numbers). Here
each replica holds, per counter, an *allowance*: a slice of the limit it took from Redis in one atomic take (counted
there like any reservation), and per concurrency cap a few *spare slots* it acquired there (real members of the
cap's set). A request whose parts all fit in what the replica holds is admitted by :meth:`Allowances.reserve_now` —
a few dict operations, no Redis call — and its settlement (the actual tokens, the slot) goes back into the allowance
locally (:meth:`settle_now`). What cannot be corrected locally (a refund to an older window bucket, an overrun of a
window) is summed and sent in one ``settle`` at most ``max_age_s`` (1 s) later, in the background.

The sizes (``_size``): a slice holds what this replica spent of the counter over the last ``max_age_s``
(1 s) × 2, at least ``min_requests`` (4) requests' worth, at most ``fraction`` (1 %) of the limit ÷ the
replicas seen — and never more than a quarter of the room Redis last reported ÷ replicas, so near a budget's
end the slices shrink. Where even ``min_requests`` requests' worth exceeds that cap — a tiny limit (``tpm``
small against a request's size, ``rpm: 60`` in ``gateway/fleet/fleet_sync.py``'s limiter by the same rule) or a budget
near its end — the counter is decided **per request, exactly**: that request's own amount in Redis, nothing
more. Spare slots: a replica holds at most ``spare_fraction`` (10 %) of ``max_concurrency`` ÷ the replicas it
sees *free* (``_spare_cap``; a slot released beyond that goes back to Redis at once), besides one per request
in flight; under 1 (a cap below 10 × replicas) each request holds its own slot in Redis, as before.

Renewal ahead of need: when a slice is down to half, or older than ``max_age_s``, while it is being used, a
background task takes the next one (``SharedState.take``: bounded by ``state.timeout`` and then the documented
fallback, so a slow Redis never holds a request). A slice unused for a tick, or older than ``max_age_s`` after a
renewal, goes back (a refund to its bucket). Only a request that finds an allowance exhausted awaits
:meth:`reserve`: the missing slices (and the request's own amounts) in one atomic ``RESERVE`` — again bounded by
``state.timeout`` — and, when Redis has no room for a slice, the request's own amounts alone (exact). Only the part
missing is asked (``_fetch``): slices alone when a spare slot is free here, a slot (with spares) alone when the
slices cover the request. Asking both whenever either ran out made a replica hold spare slots beyond its bound and
balances it did not need: with slices renewed every few requests, a cap of 60 over three replicas refused 24
requests in flight.

The promises (docs/fleet.md, "Allowances"): every unit a request holds was first counted in Redis by an
atomic take, so a budget or a concurrency cap is never exceeded by reservations; a window (``tpm``) admits
at most its limit plus the slices spent after their bucket left the window: ≤ replicas × slice ≤ 1 % of the
limit. A slice lives in a window bucket, so a dead replica's unspent slice of a window frees itself when that
bucket leaves the window (≤ 60 s); a dead replica's unspent budget slice stays counted (the budget admits up
to one slice less: ≤ 1 % ÷ replicas); its spare slots free within ``spare_ttl_s`` (30 s; renewed every 10 s
while it lives).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailgate._runtime import stop_task
from tailgate.state.protocol import Adjustment, Admission, Claim, Lease, Reservation, SharedState, Slot

__all__ = ["Allowances"]

_LEASED = "lease|"
"""Prefix of a slot token that is one of this replica's spare slots (freed locally, not in Redis)."""


@dataclass(slots=True)
class _Allowance:
    """A slice of one counter held by this replica."""

    limit: float
    window_s: float | None
    size: float
    balance: float
    bucket: int | None
    remaining: float
    """Room the counter had left (fleet-wide) when the slice was taken, after it."""
    reset_at: float
    taken_at: float
    spent: float = 0.0
    used: bool = True
    renewing: bool = False
    older: dict[int | None, float] = field(default_factory=dict)
    """Units of the balance counted in older window buckets than ``bucket`` (bucket → units, oldest first): what
    a renewal carried over. A refund to a bucket takes back at most what that bucket counted (the Lua ``adjust``
    stops at 0), so these go back to their own bucket, never to the renewal's (which would keep them counted
    until their bucket leaves the window: budget lost); and they are spent first. The rest of the balance,
    ``balance - sum(older)``, is ``bucket``'s (below 0: overruns settled into the slice, charged at give-back)."""

    def spend(self, amount: float) -> int | None:
        """Take ``amount`` (:meth:`Allowances._covered`): from the oldest carried part that holds it whole, else
        from the newest units; the bucket it is counted in, where a refund of it goes."""
        self.balance -= amount
        self.spent += amount
        for bucket, units in self.older.items():
            if units >= amount:
                if units > amount:
                    self.older[bucket] = units - amount
                else:
                    del self.older[bucket]
                return bucket
        return self.bucket

    def put_back(self, bucket: int | None, amount: float) -> None:
        """``amount`` counted in ``bucket`` returns to the balance (a take undone, a refund settled here)."""
        self.balance += amount
        if bucket != self.bucket:
            self.older[bucket] = self.older.get(bucket, 0.0) + amount

    def carry(self, bucket: int | None) -> None:
        """A renewal counted in ``bucket`` is joining: the newest units held so far become a carried part."""
        if bucket == self.bucket:
            return
        newest = self.balance - sum(self.older.values())
        if newest > 0:
            self.older[self.bucket] = self.older.get(self.bucket, 0.0) + newest


@dataclass(slots=True)
class _Spare:
    """Slots of one concurrency cap held by this replica: ``free`` members not in use, ``busy`` in use."""

    limit: int
    free: list[str] = field(default_factory=list)
    busy: set[str] = field(default_factory=set)
    peak: int = 0
    used: bool = True


class Allowances:
    """Reserve and settle a key's requests from allowances held locally; see the module docstring."""

    def __init__(
        self,
        state: SharedState,
        *,
        tick_s: float = 0.2,
        max_age_s: float = 1.0,
        fraction: float = 0.01,
        min_requests: int = 4,
        spare_fraction: float = 0.1,
        spare_ttl_s: float = 30.0,
        spare_renew_s: float = 10.0,
    ) -> None:
        self.state = state
        self.tick_s = tick_s
        self.max_age_s = max_age_s
        self.fraction = fraction
        self.min_requests = min_requests
        self.spare_fraction = spare_fraction
        self.spare_ttl_s = spare_ttl_s
        """TTL of a grant with spare slots (all its members), renewed every ``spare_renew_s`` while held: a
        replica that dies holding spares blocks them for at most this long, not the slot TTL (600 s)."""
        self.spare_renew_s = spare_renew_s
        self._slices: dict[str, _Allowance] = {}
        self._spares: dict[str, _Spare] = {}
        self._rate: dict[str, float] = {}
        """name → units per second this replica spent from its last slice (sizes the next one)."""
        self._pending: dict[tuple[str, float | None, int | None], float] = {}
        """Corrections not absorbed locally, summed per (name, window, bucket), sent by the next tick."""
        self._refused: dict[str, tuple[float, float, Admission]] = {}
        """name → (monotonic time, amount, the refusal): a window's refusal Redis gave an amount, valid for that
        amount or more until enough of the window rolls off (or a refund of the name makes room): a flood over a
        ``tpm`` costs no round trip per refused request."""
        self._locks: dict[tuple[str, ...], asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self.local = 0
        """Reservations answered from allowances (no Redis call)."""
        self.remote = 0
        """Reservations that waited for the backend (an allowance exhausted, or a limit decided exactly)."""
        self.refusals_remembered = 0
        """Refusals answered from a remembered Redis refusal of the same window (no Redis call)."""
        self.renewals = 0
        """Background takes that renewed a slice ahead of need."""
        self.waits: list[float] = []
        """Seconds each remote reservation waited (the last 1000): the time a request spent on Redis."""

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._ticks(), name="tailgate-allowance-ticks")

    async def close(self) -> None:
        """Give back every slice and spare slot, and send the corrections still pending."""
        if self._task is not None:
            await stop_task(self._task)
            self._task = None
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for name in list(self._slices):
            self._give_back(name)
        releases = [(name, m) for name, sp in self._spares.items() for m in sp.free]
        self._spares.clear()
        await self._flush(releases)

    # -- admission --------------------------------------------------------------------------------------

    def reserve_now(self, claims: Sequence[Claim], slot: Slot | None) -> Reservation | None:
        """The reservation from the allowances held, or None when one of them cannot cover it (nothing taken)."""
        if not self._covered(claims):
            return None
        lease: Lease | None = None
        if slot is not None:
            lease = self._lease_now(slot)
            if lease is None:
                return None
        self.local += 1
        return Reservation(True, self._take_now(claims), lease)

    def _covered(self, claims: Sequence[Claim]) -> bool:
        """Every claim fits in the slice held of its counter."""
        for c in claims:
            a = self._slices.get(c.name)
            if a is None or a.limit != c.limit or a.window_s != c.window_s or a.balance < c.amount:
                return False
        return True

    def _take_now(self, claims: Sequence[Claim]) -> tuple[Admission, ...]:
        """Take ``claims`` (:meth:`_covered`) from the slices held; a slice down to half is renewed."""
        now = time.monotonic()
        admissions = []
        for c in claims:
            a = self._slices[c.name]
            bucket = a.spend(c.amount)
            a.used = True
            if not a.renewing and (a.balance < a.size / 2 or now - a.taken_at > self.max_age_s):
                self._renew(c.name, a)
            admissions.append(
                Admission(True, 0.0, max(0.0, a.remaining + a.balance), c.limit, max(0.0, a.reset_at - now), bucket)
            )
        return tuple(admissions)

    def _untake(self, claims: Sequence[Claim], admissions: Sequence[Admission]) -> None:
        """Give :meth:`_take_now`'s takes back to the slices (a request refused for its slot)."""
        for c, adm in zip(claims, admissions, strict=True):
            a = self._slices.get(c.name)
            if a is not None and a.limit == c.limit and a.window_s == c.window_s:
                a.put_back(adm.bucket, c.amount)
                a.spent -= c.amount
            else:  # given back meanwhile: the take went back with it, and Redis must see this one back too
                self._pending_add(c.name, c.window_s, adm.bucket, -c.amount)

    def _lease_now(self, slot: Slot) -> Lease | None:
        """One of the spare slots of ``slot``'s cap free here, or None."""
        sp = self._spares.get(slot.name)
        if sp is None or sp.limit != slot.limit or not sp.free:
            return None
        member = sp.free.pop()
        sp.busy.add(member)
        sp.used = True
        sp.peak = max(sp.peak, len(sp.busy))
        return Lease(True, _LEASED + member, len(sp.busy), slot.limit)

    async def reserve(self, claims: Sequence[Claim], slot: Slot | None) -> Reservation:
        """:meth:`reserve_now`, else wait for the backend: the request's own amounts plus new slices in one
        atomic reservation (``SharedState.reserve``, bounded by ``state.timeout`` and then its fallback), or
        its own amounts alone where a limit is decided exactly or Redis has no room for a slice."""
        res = self.reserve_now(claims, slot)
        if res is not None:
            return res
        refused = self._still_refused(claims)
        if refused is not None:
            return refused
        key = tuple(c.name for c in claims) + ((slot.name,) if slot is not None else ())
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        t0 = time.monotonic()
        try:
            # One fetch per key at a time: the requests that find the allowance spent meanwhile wait for it
            # instead of each fetching (and each waiting for) their own.
            async with lock:
                res = self.reserve_now(claims, slot)
                if res is not None:
                    return res
                refused = self._still_refused(claims)
                if refused is not None:
                    return refused
                self.remote += 1
                res = await self._fetch(claims, slot)
                if not res.ok and res.admissions and not res.admissions[-1].ok:
                    adm, c = res.admissions[-1], claims[len(res.admissions) - 1]
                    if c.window_s is not None and not adm.local and 0 < adm.retry_after_s < math.inf:
                        self._refused[c.name] = (time.monotonic() + adm.retry_after_s, c.amount, adm)
                return res
        finally:
            self.waits.append(time.monotonic() - t0)
            if len(self.waits) > 1000:
                del self.waits[:500]

    def known(self, name: str, limit: float) -> Admission | None:
        """The window ``name`` as this replica last heard of it from Redis, without a call: a refusal remembered
        (its room and reset, aged), else the slice held (the room Redis reported after it, plus its unspent
        balance). None when it knows nothing current (a refused request's ``x-ratelimit-*`` then asks Redis)."""
        now = time.monotonic()
        hit = self._refused.get(name)
        if hit is not None and hit[0] > now and hit[2].limit == limit:
            until, _, adm = hit
            since = now - (until - adm.retry_after_s)
            return Admission(True, 0.0, max(0.0, adm.remaining), limit, max(0.0, adm.reset_s - since))
        a = self._slices.get(name)
        if a is not None and a.limit == limit:
            return Admission(True, 0.0, max(0.0, a.remaining + a.balance), limit, max(0.0, a.reset_at - now))
        return None

    def _still_refused(self, claims: Sequence[Claim]) -> Reservation | None:
        """The refusal Redis gave one of ``claims``' windows, while nothing can have rolled off it since."""
        if not self._refused:
            return None
        now = time.monotonic()
        for i, c in enumerate(claims):
            hit = self._refused.get(c.name)
            if hit is None:
                continue
            until, amount, adm = hit
            if until <= now or adm.limit != c.limit:
                del self._refused[c.name]
                continue
            if c.amount < amount:
                continue
            wait = until - now
            self.refusals_remembered += 1
            ok = tuple(Admission(True, 0.0, 0.0, x.limit) for x in claims[:i])
            return Reservation(False, (*ok, Admission(False, wait, adm.remaining, c.limit, wait)))
        return None

    async def _fetch(self, claims: Sequence[Claim], slot: Slot | None) -> Reservation:
        """What the allowances could not cover, from Redis: only the part missing. A slot (and spares) asked
        while a spare is free here, or slices asked while the slices held cover the request, would add to what
        this replica holds beside what it has not used: members of the cap's set (a cap of 60 refused 24
        requests in flight) or balances Redis counts as spent (a quarter of a tpm held unspent)."""
        if slot is not None:
            lease = self._lease_now(slot)
            if lease is not None:
                return await self._fetch_slices(claims, slot, lease)
            if claims and self._covered(claims):
                return await self._fetch_slot(claims, slot)
        sizes = [self._size(c) for c in claims]
        spare = self._spare_size(slot) if slot is not None else 0
        asked = [Claim(c.name, c.amount + size, c.limit, c.window_s) for c, size in zip(claims, sizes, strict=True)]
        ask_slot = slot
        if slot is not None and spare:  # renewed while held (``_renew_spares``): a dead replica's free soon
            ask_slot = Slot(slot.name, slot.limit, min(slot.ttl_s, self.spare_ttl_s), 1 + spare)
        res = await self.state.reserve(asked, ask_slot)
        if not res.ok and (any(sizes) or spare):
            # No room for the slices: the last units of the limit go one request at a time, exactly.
            sizes, spare = [0.0] * len(claims), 0
            res = await self.state.reserve(claims, slot)
        if not res.ok:
            return res
        now = time.monotonic()
        admissions = []
        for c, size, adm in zip(claims, sizes, res.admissions, strict=True):
            if size > 0:
                self._keep(c.name, c, size, adm, now)
            admissions.append(Admission(True, 0.0, adm.remaining + size, c.limit, adm.reset_s, adm.bucket, adm.local))
        lease = res.lease
        if slot is not None and lease is not None and spare and not lease.token.startswith("local:"):
            members = [f"{lease.token}:{i}" for i in range(1, spare + 2)]
            sp = self._spares.get(slot.name)
            if sp is None or sp.limit != slot.limit:
                old = self._spares.pop(slot.name, None)
                if old is not None:
                    self._spawn(self._flush([(slot.name, m) for m in old.free]))
                sp = self._spares[slot.name] = _Spare(slot.limit)
            sp.busy.add(members[0])
            sp.free.extend(members[1:])
            sp.used = True
            sp.peak = max(sp.peak, len(sp.busy))
            self._trim(slot.name, sp)  # released meanwhile: free slots beyond the bound go back
            lease = Lease(True, _LEASED + members[0], lease.in_use, slot.limit)
        return Reservation(True, tuple(admissions), lease)

    async def _fetch_slices(self, claims: Sequence[Claim], slot: Slot, lease: Lease) -> Reservation:
        """A spare slot free here (``lease``, taken), a slice exhausted: only the slices are asked of Redis."""
        try:
            res = await self._fetch(claims, None) if claims else Reservation(True, ())
        except BaseException:
            self.release_now(slot.name, lease.token)
            raise
        if not res.ok:
            self.release_now(slot.name, lease.token)
            return res
        return Reservation(True, res.admissions, lease)

    async def _fetch_slot(self, claims: Sequence[Claim], slot: Slot) -> Reservation:
        """The slices held cover the claims (taken), no spare slot is free: only the slot (and spares) is asked
        of Redis; refused, the claims go back to the slices and the refusal is the slot's."""
        admissions = self._take_now(claims)
        try:
            res = await self._fetch([], slot)
        except BaseException:
            self._untake(claims, admissions)
            raise
        if not res.ok:
            self._untake(claims, admissions)
            return Reservation(False, admissions, res.lease)
        return Reservation(True, admissions, res.lease)

    def _keep(self, name: str, c: Claim, size: float, adm: Admission, now: float) -> None:
        """Add a slice Redis (or its fallback) granted to what this replica holds of ``name``."""
        a = self._slices.get(name)
        if a is not None and (a.limit != c.limit or a.window_s != c.window_s):
            self._give_back(name)
            a = None
        if a is None:
            self._slices[name] = _Allowance(
                c.limit, c.window_s, size, size, adm.bucket, adm.remaining, now + adm.reset_s, now
            )
            return
        # The balance left joins the new slice, as its own bucket's part (``_Allowance.older``).
        a.carry(adm.bucket)
        a.balance += size
        a.size, a.bucket, a.remaining, a.reset_at, a.taken_at = size, adm.bucket, adm.remaining, now + adm.reset_s, now

    def _size(self, c: Claim) -> float:
        """The slice of ``c``'s counter to take with it (0: decided exactly, per request)."""
        replicas = max(1, self.state.replicas())
        cap = c.limit * self.fraction / replicas
        a = self._slices.get(c.name)
        if a is not None and a.limit == c.limit:
            cap = min(cap, a.remaining / (4 * replicas))
        floor = self.min_requests * c.amount
        if c.amount <= 0 or cap < floor:
            return 0.0
        return min(cap, max(floor, 2 * self._rate.get(c.name, 0.0) * self.max_age_s))

    def _spare_cap(self, limit: int) -> int:
        """The most spare (free) slots this replica holds of a cap of ``limit``: ``spare_fraction`` of it ÷ the
        replicas it sees (0: the cap is decided per request)."""
        return math.floor(limit * self.spare_fraction / max(1, self.state.replicas()))

    def _spare_size(self, slot: Slot) -> int:
        """Spare slots to acquire with a request's own (0: the cap is decided per request)."""
        cap = self._spare_cap(slot.limit)
        if cap < 1:
            return 0
        sp = self._spares.get(slot.name)
        busy = len(sp.busy) if sp is not None else 0
        free = len(sp.free) if sp is not None and sp.limit == slot.limit else 0
        return max(0, min(cap, math.ceil(busy / 4) + 1) - free)

    def _trim(self, name: str, sp: _Spare) -> None:
        """Release the free slots beyond :meth:`_spare_cap` (in Redis, in the background)."""
        extra = len(sp.free) - max(0, self._spare_cap(sp.limit))
        if extra > 0:
            releases = [(name, sp.free.pop()) for _ in range(extra)]
            self._spawn(self._flush(releases))

    def _renew(self, name: str, a: _Allowance) -> None:
        """Take the next slice of ``name`` in the background, before this one runs out."""
        a.renewing = True
        self._spawn(self._renewal(name, a))

    async def _renewal(self, name: str, a: _Allowance) -> None:
        try:
            age = max(1e-3, time.monotonic() - a.taken_at)
            self._rate[name] = max(self._rate.get(name, 0.0) * 0.5, a.spent / age)
            c = Claim(name, 0.0, a.limit, a.window_s)
            replicas = max(1, self.state.replicas())
            size = min(c.limit * self.fraction / replicas, a.remaining / (4 * replicas))
            size = min(size, max(a.size, 2 * self._rate[name] * self.max_age_s))
            if size <= 0:
                return
            adm = await self.state.take(name, size, a.limit, a.window_s)
            if self._slices.get(name) is not a:
                if adm.ok:  # given back meanwhile: this slice is not wanted
                    self._pending_add(name, a.window_s, adm.bucket, -size)
                return
            if not adm.ok:
                a.remaining = adm.remaining
                return
            self.renewals += 1
            a.spent = 0.0
            self._keep(name, c, size, adm, time.monotonic())
        finally:
            a.renewing = False

    # -- settlement -------------------------------------------------------------------------------------

    def release_now(self, name: str, token: str) -> bool:
        """Free a slot this replica leased (it becomes spare again); False when ``token`` is not one of them."""
        if not token.startswith(_LEASED):
            return False
        member = token[len(_LEASED) :]
        sp = self._spares.get(name)
        if sp is not None and member in sp.busy:
            sp.busy.discard(member)
            if len(sp.free) < self._spare_cap(sp.limit):
                sp.free.append(member)
                return True
        # Spares at their bound (``_spare_cap``), or the group given back while this slot was in use: the slot
        # goes back to the cap in Redis (in the background, batched with this turn's other settlements).
        self._spawn(self._flush([(name, member)]))
        return True

    def settle_now(self, adjustments: Sequence[Adjustment]) -> list[Adjustment]:
        """Apply a request's corrections: into the slice held where it can (a refund to the slice's bucket, any
        correction of a budget), else, for a counter this replica holds a slice of, summed per bucket for the
        background ``settle`` at most ``max_age_s`` later. Returns the corrections of counters decided per
        request (no slice held), for the caller to send now: their refunds are the room the next request of
        a small limit or a nearly spent budget needs, exactly accounted."""
        now: list[Adjustment] = []
        for adj in adjustments:
            if adj.delta < 0:
                self._refused.pop(adj.name, None)  # a refund may have made room
            a = self._slices.get(adj.name)
            if a is None or a.window_s != adj.window_s:
                now.append(adj)
            elif adj.window_s is None or adj.bucket == a.bucket:
                a.balance -= adj.delta
                if adj.delta > 0:
                    a.spent += adj.delta
            elif adj.delta < 0 and adj.bucket in a.older:  # a refund of units carried over from an older bucket
                a.put_back(adj.bucket, -adj.delta)
            else:
                self._pending_add(adj.name, adj.window_s, adj.bucket if adj.delta < 0 else None, adj.delta)
        return now

    def _pending_add(self, name: str, window_s: float | None, bucket: int | None, delta: float) -> None:
        k = (name, window_s, bucket)
        self._pending[k] = self._pending.get(k, 0.0) + delta

    # -- the background -----------------------------------------------------------------------------------

    def _give_back(self, name: str) -> None:
        a = self._slices.pop(name, None)
        if a is None:
            return
        age = max(1e-3, time.monotonic() - a.taken_at)
        self._rate[name] = a.spent / age
        for bucket, units in a.older.items():  # each carried part to the bucket that counted it
            if units > 0:
                self._pending_add(name, a.window_s, bucket, -units)
        newest = a.balance - sum(a.older.values())
        if newest > 0:
            self._pending_add(name, a.window_s, a.bucket, -newest)
        elif newest < 0:  # overruns settled into the slice: charge them
            self._pending_add(name, a.window_s, None, -newest)

    async def _flush(self, releases: Sequence[tuple[str, str]] = ()) -> None:
        """Send the pending corrections and release ``releases`` (spare slots): ``settle`` calls made in one
        turn of the loop, which Redis sends as one script call (``RedisState.settle``)."""
        pending, self._pending = self._pending, {}
        adjustments = [Adjustment(n, d, w, b) for (n, w, b), d in pending.items() if d]
        calls = [self.state.settle([], (n, m)) for n, m in releases]
        if adjustments:
            calls.append(self.state.settle(adjustments))
        if calls:
            await asyncio.gather(*calls, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _renew_spares(self) -> None:
        """Push the expiry of every spare slot held (free or in use) ``spare_ttl_s`` ahead, one call per cap."""
        held = [(name, [*sp.free, *sp.busy]) for name, sp in self._spares.items()]
        await asyncio.gather(*(self.state.renew(name, members, self.spare_ttl_s) for name, members in held if members))

    async def _ticks(self) -> None:
        ticks = 0
        renewed_at = time.monotonic()
        while True:
            await asyncio.sleep(self.tick_s)
            ticks += 1
            now = time.monotonic()
            if self._spares and now - renewed_at >= self.spare_renew_s:
                renewed_at = now
                self._spawn(self._renew_spares())
            for name, a in list(self._slices.items()):
                if not a.used or (now - a.taken_at > 2 * self.max_age_s and not a.renewing):
                    self._give_back(name)
                else:
                    a.used = False
            releases: list[tuple[str, str]] = []
            for name, sp in list(self._spares.items()):
                # Spare slots beyond twice what a tick's peak needs go back (down to what it needs), all of
                # them after an idle tick: the hysteresis keeps a busy key from releasing and re-acquiring.
                # Never more than the bound (``_spare_cap``; it shrinks when more replicas show up).
                cap = self._spare_cap(sp.limit)
                keep = 0 if not sp.used else min(math.ceil(sp.peak / 4) + 1, cap)
                if len(sp.free) > 2 * keep or len(sp.free) > cap:
                    while len(sp.free) > keep:
                        releases.append((name, sp.free.pop()))
                if not sp.free and not sp.busy:
                    del self._spares[name]
                sp.used, sp.peak = False, len(sp.busy)
            # Corrections (and give-backs) go at most ``max_age_s`` after they were made, with any release at once.
            due = ticks * self.tick_s >= self.max_age_s
            if releases or (self._pending and due):
                ticks = 0
                self._spawn(self._flush(releases))
            elif due:
                ticks = 0
