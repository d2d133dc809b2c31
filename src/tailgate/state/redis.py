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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from tailgate._runtime import stop_task
from tailgate.config.schema import StateConfig
from tailgate.state import _lua
from tailgate.state.fallback import Fallback
from tailgate.state.local import default_replica_id
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
    check_take,
)
from tailgate.state.views import FleetViews

__all__ = ["RedisState"]

log = logging.getLogger("tailgate.state")

_FAILURES_TO_DOWN = 3
_DOWN_AFTER_S = 0.5
_POOL_SIZE = 16
_WARM = 4
"""Connections opened (and scripts loaded) at start and on every reconnect, so the first burst finds them."""
_BACKOFF_MIN_S, _BACKOFF_MAX_S = 0.1, 5.0
_SYNC_TIMEOUT_S = 1.0
_HEARTBEAT_TTL_S = 3.0
_Failure = (RedisError, OSError, asyncio.TimeoutError)


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
        self.timeout = config.timeout
        self._p = config.namespace + ":"
        # A bounded pool: a burst of requests waits (within its budget) for one of a few warm connections
        # instead of opening dozens of new ones at once, which is what made calls slow under load.
        pool = aioredis.BlockingConnectionPool.from_url(
            config.url.get_secret_value(),
            max_connections=_POOL_SIZE,
            timeout=None,
            socket_connect_timeout=1.0,
            socket_timeout=_SYNC_TIMEOUT_S,
            retry_on_timeout=False,
            health_check_interval=0,
        )
        self._r: aioredis.Redis = aioredis.Redis(connection_pool=pool)
        # The sync loop has a connection of its own: it is the liveness signal, and behind a busy request pool
        # (a replica at full CPU, every connection held by calls past their budget) it waited its turn past
        # its 1 s budget and marked a healthy Redis down (issue 15's Redis hop: 8-11 times a run).
        self._rs: aioredis.Redis = aioredis.Redis.from_url(
            config.url.get_secret_value(),
            socket_connect_timeout=1.0,
            socket_timeout=_SYNC_TIMEOUT_S,
            retry_on_timeout=False,
            health_check_interval=0,
            single_connection_client=True,
        )
        self._take = self._r.register_script(_lua.TAKE)
        self._adjust = self._r.register_script(_lua.ADJUST)
        self._usage = self._r.register_script(_lua.USAGE)
        self._acquire = self._r.register_script(_lua.ACQUIRE)
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
        self._pending_bumps: dict[str, int] = {}
        # Health of the connection.
        self.connected = False
        self._down = True  # until the first sync answers
        self._failures = 0
        self._last_ok = 0.0
        self._backoff = _BACKOFF_MIN_S
        self._announced_down = False
        self._task: asyncio.Task[None] | None = None
        self._late: set[asyncio.Future[Any]] = set()
        """Calls past their budget, still running (and the undo work they caused); batches being sent."""
        self._settling: _SettleBatch | None = None
        """Settlements of this turn of the loop, sent together by the next (see ``settle``)."""
        self._reserving: list[_Reserving] | None = None
        """Reservations of this turn of the loop, sent together by the next (see ``reserve``)."""
        self.calls = 0
        self.fallbacks = 0
        """Decisions made by the fallback (Redis down, slow or failing) since start."""
        self.timeouts = 0
        self.late_answers = 0
        """Calls whose reply was waiting in the socket when their budget ran out (taken, not timed out)."""
        self.loop_waits = 0
        """Calls past their budget because this process's event loop was late, waited for (see ``_ours``)."""
        self.last_sync: float | None = None

    # -- lifecycle --------------------------------------------------------------------------------------

    async def start(self) -> None:
        with contextlib.suppress(*_Failure):
            async with asyncio.timeout(_SYNC_TIMEOUT_S):
                await self._sync_once()
        if self._down:
            self._announce_down("not reachable at start")
        self._task = asyncio.create_task(self._sync_loop(), name="tailgate-state-sync")

    async def close(self) -> None:
        if self._late:
            await asyncio.wait(list(self._late), timeout=_SYNC_TIMEOUT_S)
        if self._task is not None:
            await stop_task(self._task)
        if not self._down:
            with contextlib.suppress(*_Failure):
                async with asyncio.timeout(_SYNC_TIMEOUT_S):
                    await self._r.hdel(self._p + "replicas", self.replica)
        await self._r.aclose(close_connection_pool=True)  # the pool was passed in: not closed by default
        await self._rs.aclose()

    def status(self) -> StateStatus:
        return StateStatus("redis", self.replica, self.connected, self._down, self._views.replicas)

    # -- the call wrapper -------------------------------------------------------------------------------

    async def _call(self, coro: Any, budget: float | None = None, late: Callable[[Any], None] | None = None) -> Any:
        """Run one Redis call within the budget; raises ``_Unavailable`` for the caller's fallback.

        A call past its budget is not cancelled: it runs on in the background (cancelling would drop the
        connection, and the script may already have run in Redis). ``late`` gets its result if it succeeds,
        so what Redis did after the fallback had decided can be undone (a take refunded, a slot released)."""
        if self._down:
            coro.close()
            self.fallbacks += 1
            raise _Unavailable
        self.calls += 1
        task = asyncio.ensure_future(coro)
        loop = asyncio.get_running_loop()
        limit = budget or self.timeout
        start = loop.time()
        try:
            try:
                out = await asyncio.wait_for(asyncio.shield(task), limit)
            except TimeoutError:
                if not await self._ours(task, loop.time() - start - limit, limit):
                    self.timeouts += 1
                    self._orphan(task, late)
                    self._failed("slower than state.timeout")
                    raise _Unavailable from None
                try:
                    out = task.result()
                except _Failure as err:
                    self._failed(type(err).__name__)
                    raise _Unavailable from None
            except _Failure as err:
                self._failed(type(err).__name__)
                raise _Unavailable from None
        except asyncio.CancelledError:
            # The caller went away (its client hung up) while Redis decided: the call runs on, and what it
            # took is given back by ``late`` (nothing here decided to keep it), not left to count for a window.
            self._orphan(task, late)
            raise
        self._failures = 0
        self._last_ok = time.monotonic()
        return out

    async def _ours(self, task: asyncio.Future[Any], lateness: float, limit: float) -> bool:
        """After a call's budget ran out: was the delay this process's, and has the call now finished?

        The budget is for Redis's slowness. Two signs that the time went to this process instead: the reply
        was already in its socket (it completes within a few loop turns: libuv runs timers before it polls
        for I/O), or the budget's own timer fired later than the budget is long (the event loop is saturated,
        so no reply could have been read in time). Then the call is waited for, within the background budget,
        rather than decided by the fallback, whose decision a late Redis answer would have to reconcile: more
        Redis work exactly when the replica has the least CPU to spare (issue 15's Redis hop at c=50)."""
        if await _answered_late(task):
            self.late_answers += 1
            return True
        if lateness <= limit:
            return False  # the loop was on time: Redis was slow
        self.loop_waits += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), _SYNC_TIMEOUT_S)
        return task.done()

    def _orphan(self, task: asyncio.Future[Any], late: Callable[[Any], None] | None) -> None:
        """No one waits for ``task`` any more: hand its result to ``late`` when it comes (now, if it has)."""
        if task.done():
            self._finish_late(task, late)
            return
        self._late.add(task)
        task.add_done_callback(lambda t: self._finish_late(t, late))

    def _finish_late(self, task: asyncio.Future[Any], late: Callable[[Any], None] | None) -> None:
        self._late.discard(task)
        if task.cancelled() or late is None:
            return
        late(None if task.exception() is not None else task.result())

    def _settle_late(
        self, name: str, amount: float, window_s: float | None, decided: list[bool]
    ) -> Callable[[Any], None]:
        """Reconcile a take whose Redis answer came after the fallback had decided it (``decided[0]``), so
        Redis counts it exactly once: granted in Redis but refused here (or no longer wanted: ``decided`` is
        empty when the caller was cancelled) → refunded to its bucket; admitted here but refused (or lost) in
        Redis → charged to the current bucket, for the whole fleet to see."""

        def settle(result: Any) -> None:
            if not amount:
                return
            here = bool(decided) and decided[0]
            granted = result is not None and bool(result[0])
            if granted and not here:
                at = int(result[4]) if result[4] != b"-" else None
                self._spawn(self.adjust(name, -amount, window_s, at, mirror=False))
            elif here and not granted:
                self._spawn(self.adjust(name, amount, window_s, mirror=False))

        return settle

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._late.add(task)
        task.add_done_callback(self._late.discard)

    def _failed(self, why: str) -> None:
        self.fallbacks += 1
        self._failures += 1
        # A few slow calls under a burst are not an outage: only failures that persist mark Redis down.
        persistent = time.monotonic() - self._last_ok > _DOWN_AFTER_S
        if self._failures >= _FAILURES_TO_DOWN and persistent and not self._down:
            self._down = True
            self.connected = False
            self._announce_down(why)

    def _announce_down(self, why: str) -> None:
        if not self._announced_down:
            self._announced_down = True
            log.warning(
                "state: Redis unavailable (%s): deciding with the %s fallback until it answers again",
                why,
                self.config.fallback,
            )

    # -- counters ---------------------------------------------------------------------------------------

    def _counter(self, name: str, window_s: float | None) -> str:
        """The Redis key of the counter ``name`` over ``window_s`` (one hash per name and window)."""
        return f"{self._p}c:{window_s or 0:g}:{name}"

    async def take(self, name: str, amount: float, limit: float, window_s: float | None) -> Admission:
        check_take(amount, limit, window_s)
        key = self._counter(name, window_s)
        decided: list[bool] = []  # filled with the fallback's answer, for a late Redis answer to reconcile
        try:
            ok, retry, remaining, reset, bucket = await self._call(
                self._take(keys=[key], args=[amount, limit, window_s or 0]),
                late=self._settle_late(name, amount, window_s, decided),
            )
        except _Unavailable:
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
            out = _f(await self._call(self._adjust(keys=[key], args=[delta, window_s or 0, at]), _SYNC_TIMEOUT_S))
        except _Unavailable:
            return self._alone.mirror(name, delta, window_s, applied=False) if mirror else 0.0
        if mirror:
            self._alone.mirror(name, delta, window_s, applied=True)
        return out

    async def settle(self, adjustments: Sequence[Adjustment], lease: tuple[str, str] | None = None) -> None:
        """Requests' corrections and slot releases, gathered per turn of the event loop into one script call
        (``SETTLE``). A request's settlement follows its answer, so no client waits on it; the requests that
        end in the same turn (many, on a busy replica) share one round trip where each cost one, and each
        part of theirs, one command, before (issue 15).

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
            self._spawn(self._send_settles(batch))
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
            await self._call(self._settle(keys=keys, args=args), _SYNC_TIMEOUT_S)
            applied = True
        except _Unavailable:
            pass
        finally:
            for a in adjustments:
                self._alone.mirror(a.name, a.delta, a.window_s, applied=applied)
            if not batch.sent.done():
                batch.sent.set_result(None)

    async def reserve(self, claims: Sequence[Claim], slot: Slot | None = None) -> Reservation:
        """Every claim and the slot in one atomic script (``RESERVE``), where taking the parts one by one cost
        a round trip each (issue 15: a key with a tpm, two budgets and a slot spent four). The reservations
        of one turn of the event loop go together in one call, each still all or nothing: on a busy replica
        many requests share a round trip, and none waits more than that turn for it.

        Redis unavailable or slower than ``state.timeout``: the fallback decides each reservation, as
        :meth:`take` and :meth:`acquire` decide theirs, and a late Redis answer is reconciled so that Redis
        counts what this replica decided exactly once. A caller that goes away while Redis decides (its
        client hung up) leaves nothing held."""
        for c in claims:
            check_take(c.amount, c.limit, c.window_s)
        if len(claims) + (slot is not None) < 2:
            return await super().reserve(claims, slot)  # one part: its own call is as cheap
        token = ""
        if slot is not None:
            self._tokens += 1
            token = f"{self.replica}/{self._tokens}"
        entry = _Reserving(claims, slot, token, asyncio.get_running_loop().create_future())
        batch = self._reserving
        if batch is None:
            batch = self._reserving = []
            self._spawn(self._send_reservations(batch))  # runs next turn, once this turn's requests joined
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
                args += [e.token, e.slot.limit, e.slot.ttl_s]
        try:
            try:
                replies = await self._call(
                    self._reserve(keys=keys, args=args), late=lambda out: self._reserved_late(batch, out)
                )
            except _Unavailable:
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
                    e.done.set_exception(err if isinstance(err, Exception) else _Unavailable())
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
            self._reserve_late(e.claims, e.slot, e.token, e.decided)(None if replies is None else replies[i])

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
        self._spawn(self.settle(refunds, lease))

    def _reserve_late(
        self, claims: Sequence[Claim], slot: Slot | None, token: str, decided: list[bool]
    ) -> Callable[[Any], None]:
        """Reconcile a reservation Redis answered after the fallback had decided it (or after its caller went
        away), as :meth:`_settle_late` does for one take: what Redis granted but this replica did not keep is
        refunded to its buckets; what this replica admitted but Redis refused is charged. A slot Redis granted
        late is always released (the request holds the fallback's, or none)."""

        def settle(result: Any) -> None:
            here = bool(decided) and decided[0]
            granted = result is not None and bool(result[0])
            if granted and slot is not None:
                self._spawn(self.release(slot.name, token))
            if granted and not here:
                for c, i in zip(claims, range(3, len(result), 5), strict=False):
                    bucket = result[i + 4]
                    at = int(bucket) if bucket != b"-" else None
                    if c.amount:
                        self._spawn(self.adjust(c.name, -c.amount, c.window_s, at, mirror=False))
            elif here and not granted:
                for c in claims:
                    if c.amount:
                        self._spawn(self.adjust(c.name, c.amount, c.window_s, mirror=False))

        return settle

    async def usage(self, name: str, window_s: float | None) -> float:
        key = self._counter(name, window_s)
        try:
            return _f(await self._call(self._usage(keys=[key], args=[window_s or 0])))
        except _Unavailable:
            return await self.fallback.usage(name, window_s)

    # -- gauges -----------------------------------------------------------------------------------------

    async def acquire(self, name: str, limit: int, ttl_s: float = 600.0) -> Lease:
        self._tokens += 1
        token = f"{self.replica}/{self._tokens}"
        try:
            ok, n = await self._call(
                self._acquire(keys=[f"{self._p}g:{name}"], args=[token, limit, ttl_s]),
                late=lambda result: (
                    self._spawn(self.release(name, token)) if result is not None and result[0] else None
                ),
            )
        except _Unavailable:
            return self._alone.acquire(name, limit, ttl_s)
        return Lease(bool(ok), token if ok else "", int(n), limit)

    async def release(self, name: str, token: str) -> None:
        if token.startswith("local:"):
            self._alone.release(name, token)
            return
        with contextlib.suppress(_Unavailable):
            await self._call(self._r.zrem(f"{self._p}g:{name}", token))

    # -- generations ------------------------------------------------------------------------------------

    async def bump(self, namespace: str) -> int:
        try:
            n = int(await self._call(self._r.hincrby(self._p + "gen", namespace, 1)))
        except _Unavailable:
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
        with contextlib.suppress(_Unavailable):
            await self._call(self._pause(keys=[self._p + "pause"], args=[name, seconds, reason]))

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
            await self._call(self._r.hdel(key, name) if value is None else self._r.hset(key, name, int(value)))
        except _Unavailable:
            self._pending_flags[name] = value  # sent when Redis answers again

    def flag(self, name: str) -> bool | None:
        return self._views.flags.get(name)

    # -- blobs ------------------------------------------------------------------------------------------

    async def publish(self, channel: str, blob: bytes, ttl_s: float = 5.0) -> None:
        self._views.channels.add(channel)
        if self._down:
            return
        with contextlib.suppress(*_Failure):
            async with asyncio.timeout(_SYNC_TIMEOUT_S):  # background work: not the request path's budget
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
            await asyncio.sleep(self.config.sync_interval if not self._down else self._backoff)
            try:
                async with asyncio.timeout(_SYNC_TIMEOUT_S):
                    await self._sync_once()
            except _Failure as err:
                self.connected = False
                if not self._down:
                    self._down = True
                    self._announce_down(type(err).__name__)
                self._backoff = min(_BACKOFF_MAX_S, self._backoff * 2)
            except Exception:  # a bug must not stop the views from refreshing for good
                log.exception("state: sync failed")

    async def _sync_once(self) -> None:
        p = self._p
        channels = sorted(self._views.channels)
        keys = [p + "gen", p + "pause", p + "flag", p + "replicas", *(f"{p}pub:{c}" for c in channels)]
        if self._down:
            await self._warm()
            for name, value in list(self._pending_flags.items()):
                rs = self._rs
                await (rs.hdel(p + "flag", name) if value is None else rs.hset(p + "flag", name, int(value)))
                self._pending_flags.pop(name, None)
            for namespace, n in list(self._pending_bumps.items()):
                await self._rs.hincrby(p + "gen", namespace, n)
                self._pending_bumps.pop(namespace, None)
        out = await self._sync(keys=keys, args=[self.replica, max(_HEARTBEAT_TTL_S, 3 * self.config.sync_interval)])
        mono = self._views.apply(out, channels)
        self.last_sync = mono
        self.connected = True
        self._failures = 0
        self._last_ok = mono
        self._backoff = _BACKOFF_MIN_S
        if self._down:
            self._down = False
            if self._announced_down:
                log.warning("state: Redis answers again; fleet-wide decisions resumed")
            self._announced_down = False


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


class _Unavailable(Exception):
    """Redis could not decide this call (down, slow, failing): the fallback decides it."""


_LATE_TURNS = 3
"""Loop turns a timed-out call gets to finish from a reply already received (poll, read, parse)."""


async def _answered_late(task: asyncio.Future[Any]) -> bool:
    """Whether ``task`` completes, successfully, within :data:`_LATE_TURNS` turns of the loop (no waiting)."""
    for _ in range(_LATE_TURNS):
        if task.done():
            break
        await asyncio.sleep(0)
    return task.done() and not task.cancelled() and task.exception() is None
