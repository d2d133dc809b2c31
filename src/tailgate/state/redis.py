"""The ``redis`` backend: fleet state in one Redis (or Valkey), with a local fallback when it is away.

Keys (all under ``{namespace}:``): ``c:{window}:{name}`` counter hashes (bucket epoch → amount, ``t`` for a
total), ``g:{name}`` concurrency zsets (token → expiry), and four hashes read by every sync tick: ``gen``
(namespace → generation), ``pause`` (name → ``until|reason``), ``flag`` (name → ``0``/``1``, persistent),
``replicas`` (replica → heartbeat expiry), plus ``pub:{channel}`` (replica → ``until|blob``). Times are
Redis's (``TIME`` in the scripts), so hosts' clocks never have to agree.

Failure handling (docs/fleet.md, "Redis down or slow"): each call on the request path is bounded by
``state.timeout``; a call that fails or runs past it is answered by the fallback for that call. Three
failures in a row with no success for 0.5 s, or a failed sync, mark Redis *down*: calls then go straight
to the fallback (no wait at all) while the sync loop retries with exponential back-off (0.1 s doubling to
5 s). The first
sync that succeeds marks it up again and re-sends the drain flags set meanwhile. Down and up are logged
once each. ``fallback: local`` decides limits in an in-process :class:`LocalState` at ``limit ÷`` the
replicas last seen; ``fallback: closed`` refuses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from tailgate._runtime import stop_task
from tailgate.config.resolve import display_url
from tailgate.config.schema import StateConfig
from tailgate.state import _lua
from tailgate.state.clients import request_client, sync_client
from tailgate.state.fallback import Fallback
from tailgate.state.late_answers import Reconcile, late_reservation, late_take
from tailgate.state.link import FAILURE, SYNC_TIMEOUT_S, Link, Unavailable
from tailgate.state.local import default_replica_id
from tailgate.state.priority import Lane, keep_level
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
from tailgate.state.views import FleetViews

__all__ = ["RedisState"]

log = logging.getLogger("tailgate.state")

_WARM = 4
"""Connections opened (and scripts loaded) at start and on every reconnect, so the first burst finds them."""
_HEARTBEAT_TTL_S = 3.0


def _f(v: Any) -> float:
    s = v.decode() if isinstance(v, bytes) else str(v)
    return math.inf if s == "inf" else float(s)


class RedisState(SharedState):
    """Fleet state in Redis; see the module docstring."""

    backend: Backend = "redis"

    def __init__(self, config: StateConfig, *, replica: str | None = None) -> None:
        assert config.url is not None  # the schema requires it for this backend
        self.config = config
        self.replica = replica or config.replica or default_replica_id()
        self._p = config.namespace + ":"
        url = config.url.get_secret_value()
        self._r: aioredis.Redis = request_client(url, SYNC_TIMEOUT_S)
        self._rs: aioredis.Redis = sync_client(url, SYNC_TIMEOUT_S)  # the sync loop's own (clients.py)
        self._take = self._r.register_script(_lua.TAKE)
        self._adjust = self._r.register_script(_lua.ADJUST)
        self._usage = self._r.register_script(_lua.USAGE)
        self._acquire = self._r.register_script(_lua.ACQUIRE)
        self._pace = self._r.register_script(_lua.PACE)
        self._renew = self._r.register_script(_lua.RENEW)
        self._reserve = self._r.register_script(_lua.RESERVE)
        self._settle = self._r.register_script(_lua.SETTLE)
        self._pause = self._r.register_script(_lua.PAUSE)
        self._publish = self._r.register_script(_lua.PUBLISH)
        self._sync = self._rs.register_script(_lua.SYNC)
        self._views = FleetViews(self.replica, config.replicas_hint)
        self._alone = Fallback(self.replica, closed=config.fallback == "closed", replicas=lambda: self._views.replicas)
        self.fallback = self._alone.local
        """The in-process counters, gauges and pauses this replica decides with alone (``fallback.py``)."""
        self._tokens = 0
        # Views, refreshed by the sync loop; deadlines on *our* monotonic clock.
        self._pending_flags: dict[str, bool | None] = {}
        self._pending_pauses: dict[str, tuple[float, str]] = {}
        """Pauses Redis did not take (down, or the call failed): name → (until, monotonic; reason), sent by the
        next sync that reaches Redis with what is left of them, so a 429 seen during a blip still pauses the
        fleet."""
        self._pending_bumps: dict[str, int] = {}
        self._link = Link(config.timeout, config.fallback, display_url(url))
        """Each call's budget and Redis's health (``link.py``)."""
        self._settling: _SettleBatch | None = None
        """Settlements of this turn of the loop, sent together by the next (see ``settle``)."""
        self._reserving: list[_Reserving] | None = None
        """Reservations of this turn of the loop, sent together by the next (see ``reserve``)."""
        self._reconcile = Reconcile(
            lambda *a: self._link.spawn(self.adjust(*a, mirror=False)),
            lambda name, token: self._link.spawn(self.release(name, token)),
        )
        """What a late Redis answer's reconciliation does (``late_answers.py``): refunds and charges sent in the
        background, unmirrored (the fallback decided already), and slots released."""
        self.last_sync: float | None = None

    # -- lifecycle --------------------------------------------------------------------------------------

    async def start(self) -> None:
        with contextlib.suppress(*FAILURE):
            async with asyncio.timeout(SYNC_TIMEOUT_S):
                await self._sync_once()
        if self._link.down:
            self._link.announce_down("not reachable at start")
        self._task = asyncio.create_task(self._sync_loop(), name="tailgate-state-sync")

    async def close(self) -> None:
        if self._link.late:
            await asyncio.wait(list(self._link.late), timeout=SYNC_TIMEOUT_S)
        if self._task is not None:
            await stop_task(self._task)
        if not self._link.down:
            with contextlib.suppress(*FAILURE):
                async with asyncio.timeout(SYNC_TIMEOUT_S):
                    await self._r.hdel(self._p + "replicas", self.replica)
        await self._r.aclose(close_connection_pool=True)  # the pool was passed in: not closed by default
        await self._rs.aclose()

    def status(self) -> StateStatus:
        return StateStatus("redis", self.replica, self._link.connected, self._link.down, self._views.replicas)

    # Redis's health and the call counters, kept by the link; read by /metrics (gateway/fleet/fleet_sync.py) and tests.
    @property
    def timeout(self) -> float:
        """The request path's budget per Redis call (``state.timeout``)."""
        return self._link.timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._link.timeout = value

    @property
    def connected(self) -> bool:
        return self._link.connected

    @property
    def calls(self) -> int:
        return self._link.calls

    @property
    def fallbacks(self) -> int:
        """Decisions made by the fallback (Redis down, slow or failing) since start."""
        return self._link.fallbacks

    @property
    def timeouts(self) -> int:
        return self._link.timeouts

    @property
    def late_answers(self) -> int:
        return self._link.late_answers

    @property
    def loop_waits(self) -> int:
        return self._link.loop_waits

    @property
    def _late(self) -> set[asyncio.Future[Any]]:
        """Calls past their budget still running, and the undo work they caused (``Link.late``)."""
        return self._link.late

    # -- counters ---------------------------------------------------------------------------------------

    def _counter(self, name: str, window_s: float | None) -> str:
        """The Redis key of the counter ``name`` over ``window_s`` (one hash per name and window)."""
        return f"{self._p}c:{window_s or 0:g}:{name}"

    async def take(self, name: str, amount: float, limit: float, window_s: float | None) -> Admission:
        check_take(amount, limit, window_s)
        key = self._counter(name, window_s)
        decided: list[bool] = []  # filled with the fallback's answer, for a late Redis answer to reconcile
        try:
            ok, retry, remaining, reset, bucket = await self._link.call(
                self._take(keys=[key], args=[amount, limit, window_s or 0]),
                late=late_take(self._reconcile, name, amount, window_s, decided),
            )
        except Unavailable:
            adm = self._alone.take(name, amount, limit, window_s)
            decided.append(adm.ok)
            return adm
        return self._decided(name, amount, limit, window_s, ok, retry, remaining, reset, bucket)

    def _decided(
        self, name: str, amount: float, limit: float, window_s: float | None, *reply: Any, mirror: bool = True
    ) -> Admission:
        """A take's Redis reply (``take()``'s five fields in the Lua) as an Admission, with its bookkeeping."""
        ok, retry, remaining, reset, bucket = reply
        self._alone.granted(name, amount, window_s, _f(remaining), mirror=bool(ok) and mirror)
        at = int(bucket) if ok and bucket != b"-" else None
        return Admission(bool(ok), _f(retry), _f(remaining), limit, _f(reset), at)

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
        """One bucket per name for the whole fleet (``_lua.PACE``). Redis down or slow: this replica's own bucket
        at its share (``rate`` and ``burst`` ÷ the replicas alive), marked ``local``."""
        check_pace(amount, rate, burst)
        key = f"{self._p}pace:{name}"
        keep = keep_level(lane, amount, reserve, debt)
        try:
            ok, retry, level = await self._link.call(self._pace(keys=[key], args=[amount, rate, burst, keep]))
        except Unavailable:
            n = max(1, self._views.replicas)
            share = rate / n, max(burst / n, 1.0)
            adm = self._alone.local.pace_now(name, amount, *share, lane=lane, reserve=reserve / n, debt=debt)
            return Admission(adm.ok, adm.retry_after_s, adm.remaining, adm.limit, local=True)
        return Admission(bool(ok), _f(retry), _f(level), burst)

    async def adjust(
        self, name: str, delta: float, window_s: float | None, bucket: int | None = None, *, mirror: bool = True
    ) -> float:
        if not math.isfinite(delta):
            raise ValueError(f"delta must be finite, got {delta!r}")
        key = self._counter(name, window_s)
        at = bucket if bucket is not None else "-"
        try:
            # A refund or a settlement follows an admission: no client waits on it, and a lost refund would
            # leave Redis counting what was never spent. So it gets the background budget, not state.timeout.
            out = _f(await self._link.call(self._adjust(keys=[key], args=[delta, window_s or 0, at]), SYNC_TIMEOUT_S))
        except Unavailable:
            return self._alone.mirror(name, delta, window_s, applied=False) if mirror else 0.0
        if mirror:
            self._alone.mirror(name, delta, window_s, applied=True)
        return out

    async def settle(self, adjustments: Sequence[Adjustment], lease: tuple[str, str] | None = None) -> None:
        """Requests' corrections and slot releases, gathered per turn of the event loop into one script call
        (``SETTLE``). A request's settlement follows its answer, so no client waits on it; the requests that
        end in the same turn (many, on a busy replica) share one round trip where each cost one, and each
        part of theirs, one command, before.

        Redis unavailable: the fallback's counters take the corrections, as :meth:`adjust` does, and a slot
        held in Redis frees itself at its TTL, as with :meth:`release`. A script cache flushed by a restart
        (``NOSCRIPT``) is reloaded by the call itself."""
        for a in adjustments:
            if not math.isfinite(a.delta):
                raise ValueError(f"delta must be finite, got {a.delta!r}")
        if lease is not None and lease[1].startswith("local:"):
            self._alone.release(*lease)
            lease = None
        if not adjustments and lease is None:
            return
        batch = self._settling
        if batch is None:
            batch = self._settling = _SettleBatch(asyncio.get_running_loop().create_future())
            # The task's first step runs in the next turn of the loop, after every callback ready now: the
            # settlements of this turn join the batch first.
            self._link.spawn(self._send_settles(batch))
        batch.adjustments.extend(adjustments)
        if lease is not None:
            batch.leases.append(lease)
        await asyncio.shield(batch.sent)

    async def _send_settles(self, batch: _SettleBatch) -> None:
        self._settling = None
        adjustments = batch.adjustments
        keys = [self._counter(a.name, a.window_s) for a in adjustments]
        args: list[Any] = [len(adjustments)]
        for a in adjustments:
            args += [a.delta, a.window_s or 0, a.bucket if a.bucket is not None else "-"]
        for name, token in batch.leases:
            keys.append(f"{self._p}g:{name}")
            args.append(token)
        applied = False
        try:
            # A lost refund would leave Redis counting what was never spent: the background budget, not
            # state.timeout (as adjust).
            await self._link.call(self._settle(keys=keys, args=args), SYNC_TIMEOUT_S)
            applied = True
        except Unavailable:
            pass
        finally:
            for a in adjustments:
                self._alone.mirror(a.name, a.delta, a.window_s, applied=applied)
            if not batch.sent.done():
                batch.sent.set_result(None)

    async def reserve(self, claims: Sequence[Claim], slot: Slot | None = None) -> Reservation:
        """Every claim and the slot in one atomic script (``RESERVE``), where taking the parts one by one cost
        a round trip each (a key with a tpm, two budgets and a slot spent four). The reservations
        of one turn of the event loop go together in one call, each still all or nothing: on a busy replica
        many requests share a round trip, and none waits more than that turn for it.

        Redis unavailable or slower than ``state.timeout``: the fallback decides each reservation, as
        :meth:`take` and :meth:`acquire` decide theirs, and a late Redis answer is reconciled so that Redis
        counts what this replica decided exactly once. A caller that goes away while Redis decides (its
        client hung up) leaves nothing held."""
        for c in claims:
            check_take(c.amount, c.limit, c.window_s)
        if len(claims) + (slot is not None) < 2 and (slot is None or slot.count == 1):
            return await super().reserve(claims, slot)  # one part: its own call is as cheap
        token = ""
        if slot is not None:
            self._tokens += 1
            token = f"{self.replica}/{self._tokens}"
        entry = _Reserving(claims, slot, token, asyncio.get_running_loop().create_future())
        batch = self._reserving
        if batch is None:
            batch = self._reserving = []
            self._link.spawn(self._send_reservations(batch))  # runs next turn, once this turn's requests joined
        batch.append(entry)
        try:
            return await asyncio.shield(entry.done)
        except asyncio.CancelledError:
            entry.done.add_done_callback(lambda f: self._abandon(entry, f))
            raise

    async def _send_reservations(self, batch: list[_Reserving]) -> None:
        self._reserving = None
        keys: list[str] = []
        args: list[Any] = [len(batch)]
        for e in batch:
            keys += [self._counter(c.name, c.window_s) for c in e.claims]
            args += [len(e.claims), int(e.slot is not None)]
            for c in e.claims:
                args += [c.amount, c.limit, c.window_s or 0]
            if e.slot is not None:
                keys.append(f"{self._p}g:{e.slot.name}")
                args += [e.token, e.slot.limit, e.slot.ttl_s, e.slot.count]
        try:
            try:
                replies = await self._link.call(
                    self._reserve(keys=keys, args=args), late=lambda out: self._reserved_late(batch, out)
                )
            except Unavailable:
                for e in batch:
                    res = self._alone.reserve(e.claims, e.slot)
                    e.decided.append(res.ok)
                    e.done.set_result(res)
                return
            for e, reply in zip(batch, replies, strict=True):
                e.done.set_result(self._reservation(e, reply))
        except BaseException as err:  # a bug, or the replica closing: no caller is left waiting forever
            for e in batch:
                if not e.done.done():
                    e.done.set_exception(err if isinstance(err, Exception) else Unavailable())
            if not isinstance(err, Exception):
                raise

    def _reservation(self, e: _Reserving, reply: list[Any]) -> Reservation:
        """One reservation's Redis reply as a :class:`Reservation`, with each take's bookkeeping."""
        ok = bool(reply[0])
        groups = [reply[i : i + 5] for i in range(3, len(reply), 5)]
        admissions = tuple(
            self._decided(c.name, c.amount, c.limit, c.window_s, *g, mirror=ok)
            for c, g in zip(e.claims, groups, strict=False)
        )
        lease = None
        if e.slot is not None and (ok or int(reply[1]) == len(e.claims) + 1):  # asked: every claim passed
            lease = Lease(ok, e.token if ok else "", int(reply[2]), e.slot.limit)
        return Reservation(ok, admissions, lease)

    def _reserved_late(self, batch: list[_Reserving], replies: list[Any] | None) -> None:
        for i, e in enumerate(batch):
            late_reservation(self._reconcile, e.claims, e.slot, e.token, e.decided)(
                None if replies is None else replies[i]
            )

    def _abandon(self, e: _Reserving, done: asyncio.Future[Reservation]) -> None:
        """Give back a reservation whose caller went away before it was answered."""
        if done.cancelled() or done.exception() is not None:
            return
        res = done.result()
        if not res.ok:
            return
        lease = (e.slot.name, res.lease.token) if e.slot is not None and res.lease is not None else None
        if any(a.local for a in res.admissions):  # the fallback's decision; a late Redis grant is refunded
            if e.decided:
                e.decided[0] = False
            self._alone.untake(e.claims)
            if lease is not None:
                self._alone.release(*lease)
            return
        refunds = [
            Adjustment(c.name, -c.amount, c.window_s, a.bucket)
            for c, a in zip(e.claims, res.admissions, strict=True)
            if c.amount
        ]
        if e.slot is not None and e.slot.count > 1 and lease is not None:
            for member in _lua.slot_members(lease[1], e.slot.count):
                self._link.spawn(self.release(e.slot.name, member))
            lease = None
        self._link.spawn(self.settle(refunds, lease))

    async def usage(self, name: str, window_s: float | None) -> float:
        key = self._counter(name, window_s)
        try:
            return _f(await self._link.call(self._usage(keys=[key], args=[window_s or 0])))
        except Unavailable:
            return await self.fallback.usage(name, window_s)

    # -- gauges -----------------------------------------------------------------------------------------

    async def acquire(self, name: str, limit: int, ttl_s: float = 600.0) -> Lease:
        self._tokens += 1
        token = f"{self.replica}/{self._tokens}"
        try:
            ok, n = await self._link.call(
                self._acquire(keys=[f"{self._p}g:{name}"], args=[token, limit, ttl_s]),
                late=lambda result: (
                    self._link.spawn(self.release(name, token)) if result is not None and result[0] else None
                ),
            )
        except Unavailable:
            return self._alone.acquire(name, limit, ttl_s)
        return Lease(bool(ok), token if ok else "", int(n), limit)

    async def release(self, name: str, token: str) -> None:
        if token.startswith("local:"):
            self._alone.release(name, token)
            return
        with contextlib.suppress(Unavailable):
            await self._link.call(self._r.zrem(f"{self._p}g:{name}", token))

    async def renew(self, name: str, tokens: Sequence[str], ttl_s: float) -> None:
        members = [t for t in tokens if not t.startswith("local:")]
        if members:
            with contextlib.suppress(Unavailable):  # not renewed: they expire at their TTL, as a dead replica's
                await self._link.call(self._renew(keys=[f"{self._p}g:{name}"], args=[ttl_s, *members]))

    # -- generations ------------------------------------------------------------------------------------

    async def bump(self, namespace: str) -> int:
        try:
            n = int(await self._link.call(self._r.hincrby(self._p + "gen", namespace, 1)))
        except Unavailable:
            n = self._views.generations.get(namespace, 0) + 1  # seen here only, and sent when Redis answers again
            self._pending_bumps[namespace] = self._pending_bumps.get(namespace, 0) + 1
        self._views.generations[namespace] = max(n, self._views.generations.get(namespace, 0))
        return n

    def generation(self, namespace: str) -> int:
        return self._views.generations.get(namespace, 0)

    # -- pauses -----------------------------------------------------------------------------------------

    async def pause(self, name: str, seconds: float, reason: str = "") -> None:
        if seconds > 0 and not math.isfinite(seconds):
            raise ValueError(f"seconds must be finite, got {seconds!r}")
        # Our own view at once (the sync would show it within an interval anyway).
        self.fallback.pause_now(name, seconds, reason)
        if seconds <= 0:
            self._views.pauses.pop(name, None)
        try:
            await self._link.call(self._pause(keys=[self._p + "pause"], args=[name, seconds, reason]))
        except Unavailable:
            self._pending_pauses[name] = (time.monotonic() + seconds, reason)  # sent when Redis answers again
        else:
            self._pending_pauses.pop(name, None)  # Redis has this one: an older one queued must not follow it

    def paused_for(self, name: str) -> float:
        own = self.fallback.paused_for(name)
        p = self._views.paused_until(name)
        return max(own, p[0] - time.monotonic()) if p is not None else own

    def pause_reason(self, name: str) -> str:
        p = self._views.paused_until(name)
        if p is not None and p[0] > time.monotonic():
            return p[1]
        return self.fallback.pause_reason(name)

    # -- flags ------------------------------------------------------------------------------------------

    async def set_flag(self, name: str, value: bool | None) -> None:
        if value is None:
            self._views.flags.pop(name, None)
        else:
            self._views.flags[name] = value
        try:
            key = self._p + "flag"
            await self._link.call(self._r.hdel(key, name) if value is None else self._r.hset(key, name, int(value)))
        except Unavailable:
            self._pending_flags[name] = value  # sent when Redis answers again

    def flag(self, name: str) -> bool | None:
        return self._views.flags.get(name)

    # -- blobs ------------------------------------------------------------------------------------------

    async def publish(self, channel: str, blob: bytes, ttl_s: float = 5.0) -> None:
        self._views.channels.add(channel)
        if self._link.down:
            return
        with contextlib.suppress(*FAILURE):
            async with asyncio.timeout(SYNC_TIMEOUT_S):  # background work: not the request path's budget
                await self._publish(keys=[f"{self._p}pub:{channel}"], args=[self.replica, ttl_s, blob])

    def peers(self, channel: str) -> dict[str, bytes]:
        return self._views.live_peers(channel)

    def replicas(self) -> int:
        return self._views.replicas

    async def _warm(self) -> None:
        """Open a few connections and load the scripts (a reconnect, or the start)."""
        await asyncio.gather(*(self._r.ping() for _ in range(_WARM)))
        scripts = (self._take, self._adjust, self._usage, self._acquire, self._reserve, self._settle, self._pause)
        for script in (*scripts, self._publish, self._sync):
            await self._r.script_load(script.script)

    # -- the sync loop ----------------------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.sync_interval if not self._link.down else self._link.backoff)
            try:
                async with asyncio.timeout(SYNC_TIMEOUT_S):
                    await self._sync_once()
            except FAILURE as err:
                self._link.lost(type(err).__name__)
            except Exception:  # a bug must not stop the views from refreshing for good
                log.exception("state: sync failed")

    async def _sync_once(self) -> None:
        p = self._p
        channels = sorted(self._views.channels)
        keys = [p + "gen", p + "pause", p + "flag", p + "replicas", *(f"{p}pub:{c}" for c in channels)]
        if self._link.down:
            await self._warm()
            for name, value in list(self._pending_flags.items()):
                rs = self._rs
                await (rs.hdel(p + "flag", name) if value is None else rs.hset(p + "flag", name, int(value)))
                self._pending_flags.pop(name, None)
            for namespace, n in list(self._pending_bumps.items()):
                await self._rs.hincrby(p + "gen", namespace, n)
                self._pending_bumps.pop(namespace, None)
        for name, (until, reason) in list(self._pending_pauses.items()):
            left = until - time.monotonic()
            if left > 0:
                await self._pause(keys=[p + "pause"], args=[name, left, reason])
            self._pending_pauses.pop(name, None)
        out = await self._sync(keys=keys, args=[self.replica, max(_HEARTBEAT_TTL_S, 3 * self.config.sync_interval)])
        mono = self._views.apply(out, channels)
        self.last_sync = mono
        self._link.answered(mono)


@dataclass(slots=True)
class _SettleBatch:
    sent: asyncio.Future[None]
    adjustments: list[Adjustment] = field(default_factory=list)
    leases: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class _Reserving:
    claims: Sequence[Claim]
    slot: Slot | None
    token: str
    done: asyncio.Future[Reservation]
    decided: list[bool] = field(default_factory=list)
    """The fallback's answer, when it decided (for a late Redis answer to reconcile); empty otherwise."""
