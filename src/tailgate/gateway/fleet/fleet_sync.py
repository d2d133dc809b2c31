"""The gateway's side of the fleet: what it shares through the state layer, and how (docs/fleet.md).

- **Gateway keys' rpm**: a sliding-window counter per key in the state backend, through a
  :class:`LeasedLimiter` (slices for large limits, one atomic take per request for small ones).
- **Provider pacing**: each replica paces a provider at its *share* of the provider's limits; the shares
  are proportional to the demand each replica publishes every sync tick, so they always add up to the
  provider's pacing target and follow the load balancer's spread. Nothing per request goes to Redis.
- **Priority and small limits** (``pace``): the batch lane (``state/priority.py``) takes only what interactive
  traffic leaves, and may wait for it; a provider whose per-replica slice of the bucket would hold fewer than
  two requests is paced on one fleet-wide bucket (``SharedState.pace``, a round trip per attempt at these low
  rates): slices that small left budget idle (a full slice wastes its refill until its replica's next request).
- **429 pauses**: a provider's Retry-After pauses it fleet-wide (``provider:NAME`` pause).
- **Breakers**: a replica whose breaker opens on its own evidence publishes ``breaker:NAME`` for the
  cool-down; every other replica's breaker is opened at its next sync (≤ ``sync_interval``) and held while
  the trials run. The first replica to go half-open takes the ``trial:NAME`` slot and runs the trials; the
  others stay open. When the trials pass it bumps the ``breaker:NAME`` generation and every replica closes
  (and forgets the outage's samples, as a lone replica does).
- **Drain / enable**: persistent flags ``drain:NAME``; applied by every replica at its next sync.
- **Health windows**: each replica publishes its own TTFT and E2E windows every ``publish_interval``;
  every replica routes on its own plus the others' (:class:`FleetWindow`), so adaptive weights agree.
- **Live view**: each replica publishes a small summary of its live state (in flight, provider states,
  breakers, effective weights, config version) with its windows, so the dashboard of any replica behind a
  load balancer shows every replica, names the one that answered, and reads the fleet-merged windows.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import logging
import math
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from tailgate._runtime import stop_task
from tailgate.gateway.fleet.lane_pacing import LanePacer
from tailgate.routing import BreakerRegistry, HealthRegistry, ProviderHealth, Transition
from tailgate.state import Admission, LocalState, SharedState
from tailgate.state.lease import LeasedLimiter
from tailgate.state.priority import Lane, lane_weights
from tailgate.stats import SlidingWindow
from tailgate.stats.window import ROUTING_PRECISION
from tailgate.wire import errors as wire_errors

if TYPE_CHECKING:
    from tailgate.config.schema import StateConfig
    from tailgate.gateway.metrics.gateway_metrics import StateSeries
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.gateway.request_path.routes import RouteTable

__all__ = ["Fleet", "FleetWindow"]

log = logging.getLogger("tailgate.gateway")

_FLEET = "fleet: "
"""Prefix of the reason of a breaker transition made because of the fleet (not republished)."""
_TRIAL_HOLD_S = 10.0
"""How long a replica keeps a fleet-opened breaker open after the cool-down while another runs the trials."""
_DEMAND_FLOOR = 0.05
"""Each replica's demand counts at least this many requests per second in the share split, so a replica
that has seen no traffic yet can still send its first requests."""
_DEMAND_WINDOW_S = 2.0
"""A replica's demand is its request rate over about this long (a sliding window of sync ticks)."""
_BATCH_KEY = "\x1fbatch"
"""Suffix of a provider's name in the published demand: the batch lane's part of it."""


class FleetWindow(SlidingWindow):
    """A window that routing reads as this replica's samples plus the fleet's; ``own`` holds ours only."""

    __slots__ = ("own",)

    def __init__(self, width_s: float, buckets: int, clock: Callable[[], float]) -> None:
        super().__init__(width_s, buckets, clock, precision=ROUTING_PRECISION)
        self.own = SlidingWindow(width_s, buckets, clock, precision=ROUTING_PRECISION)

    def record(self, value: float, count: int = 1) -> None:
        super().record(value, count)
        self.own.record(value, count)

    def incr(self, name: str, n: int = 1) -> None:
        super().incr(name, n)
        self.own.incr(name, n)

    def reset(self) -> None:
        super().reset()
        self.own.reset()

    def rebuild(self, peers: list[bytes]) -> None:
        """Ours plus the peers' latest published windows (a malformed one is skipped)."""
        SlidingWindow.reset(self)
        self.merge_from(self.own)
        for blob in peers:
            with contextlib.suppress(ValueError):
                self.merge_bytes(blob)


class Fleet:
    """This replica's side of the fleet over its :class:`SharedState`; see the module docstring.

    It is handed what it shares, never the gateway: the providers, the route table and the running config's
    version (published for ``/admin/config`` and in the dashboard's fleet view) — at construction and again by
    :meth:`install` after each reload —, the health windows and breakers, its series (``StateSeries``) and a
    callback for a drain flag that changed (the gauges)."""

    def __init__(
        self,
        state: SharedState,
        config: StateConfig,
        *,
        routes: RouteTable,
        providers: Mapping[str, ProviderState],
        version: str,
        health: HealthRegistry,
        breakers: BreakerRegistry,
        series: StateSeries,
        on_drained: Callable[[Mapping[str, ProviderState]], None],
    ) -> None:
        self.state = state
        self._providers = providers
        self._routes = routes
        self._version = version
        self.health = health
        self.breakers = breakers
        self._series = series
        self._on_drained = on_drained
        self.shared = state.backend != "local"
        self.limiter = LeasedLimiter(state)
        self.sync_interval = config.sync_interval
        self.publish_interval = config.publish_interval
        self._task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[object]] = set()
        self._breaker_gen: dict[str, int] = {}
        self._trial_tokens: dict[str, str] = {}
        self._wanted: dict[str, int] = {}
        self._wanted_batch: dict[str, int] = {}
        self._batch_ticks: dict[str, collections.deque[tuple[float, int]]] = {}
        """Per provider: the batch lane's part of ``_wanted`` and of the demand ticks."""
        self._fleet_batch: dict[str, float] = {}
        self._fleet_interactive: dict[str, float] = {}
        """Per provider: the fleet's batch and interactive demand (requests per second) as last published."""
        self.lanes = LanePacer(state, self.shared, self._fleet_interactive, self._fleet_batch, _DEMAND_WINDOW_S)
        """Priority at the pacer: the batch lane takes only what interactive traffic leaves."""
        self._demand: dict[str, float] = {}
        """Per provider (every one since ``install``): requests that wanted it this tick, and its demand."""
        self._demand_ticks: dict[str, collections.deque[tuple[float, int]]] = {}
        """Per provider: (tick length s, requests that wanted it) of the last ``_DEMAND_WINDOW_S``."""
        self._published_demand: dict[str, float] = {}
        self._peer_demand: dict[str, tuple[bytes, dict[str, float], dict[str, float]]] = {}
        """Per peer replica: (its latest blob, its latest demands, the demands it published before)."""
        self._last_tick = time.monotonic()
        self._windows: dict[tuple[str, str], tuple[FleetWindow, FleetWindow]] = {}
        self.published = 0
        self._counted = {"fallbacks": 0, "local": 0, "backend": 0, "calls": 0}
        """The state's counts already added to the series."""
        self.install()

    # -- lifecycle --------------------------------------------------------------------------------------

    def install(
        self,
        routes: RouteTable | None = None,
        providers: Mapping[str, ProviderState] | None = None,
        version: str | None = None,
    ) -> None:
        """Hook the shared parts in (before serving, and after a reload, given what the reload swapped in): fleet
        windows on the health of every (provider, upstream model) of the route table, the fleet's pauses on every
        provider."""
        if routes is not None:
            self._routes = routes
        if providers is not None:
            self._providers = providers
        if version is not None:
            self._version = version
        targets = self._routes.targets()
        for name in self._providers:
            self._wanted.setdefault(name, 0)
            self._demand.setdefault(name, 0.0)
        if not self.shared:
            return
        for target in targets:
            if target not in self._windows:
                h = self.health.get(*target)
                clock = self.health.clock
                h.ttft = FleetWindow(h.ttft.width_s, h.ttft.buckets, clock)
                h.e2e = FleetWindow(h.e2e.width_s, h.e2e.buckets, clock)
                self._windows[target] = (h.ttft, h.e2e)
        for p in self._providers.values():
            p.shared = self.state
            p.on_pause = self._pause_provider

    def _pause_provider(self, name: str, seconds: float) -> None:
        self._spawn(self.state.pause(f"provider:{name}", seconds, f"429 seen by {self.state.replica}"))

    @property
    def replica_label(self) -> str | None:
        """The ``replica`` label of every series in a fleet (``state: redis``); None alone."""
        return self.state.replica if self.shared else None

    def refresh_metrics(self) -> None:
        """Bring the state gauges and counters up to date (at scrape)."""
        st = self.state.status()
        self._series.connected.set(1 if st.connected else 0)
        self._series.fallback_active.set(1 if st.fallback_active else 0)
        self._series.replicas.set(st.replicas)
        now = {
            "fallbacks": int(getattr(self.state, "fallbacks", 0)),
            "local": self.limiter.local_takes,
            "backend": self.limiter.remote_takes,
            "calls": int(getattr(self.state, "calls", 0)),
        }
        self._series.calls.inc(now["calls"] - self._counted["calls"])
        self._series.fallbacks.inc(now["fallbacks"] - self._counted["fallbacks"])
        self._series.limit_takes.labels("local").inc(now["local"] - self._counted["local"])
        self._series.limit_takes.labels("backend").inc(now["backend"] - self._counted["backend"])
        self._counted = now

    async def start(self) -> None:
        await self.state.start()
        self.limiter.start()
        if self.shared:
            n = self.state.replicas()
            for p in self._providers.values():
                if p.pacer.limited and n > 1:
                    p.pacer.set_share(1.0 / n)  # until the demands are known
            for name in self._providers:
                self._breaker_gen[name] = self.state.generation(f"breaker:{name}")
            self._apply_flags()
            self._task = asyncio.create_task(self._loop(), name="tailgate-fleet")

    async def close(self) -> None:
        if self._task is not None:
            await stop_task(self._task, reraise=True)
        for task in list(self._pending):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        for name, token in self._trial_tokens.items():
            await self.state.release(f"trial:{name}", token)
        await self.limiter.close()
        await self.state.close()

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        task: asyncio.Task[object] = asyncio.ensure_future(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    # -- gateway keys -----------------------------------------------------------------------------------

    async def admit_key(self, key_id: str, rpm: float) -> Admission:
        """Count one request against the key's rpm fleet-wide (the answer: what :meth:`refund_key` needs to give
        it back if the request is refused later); a 429 with Retry-After and x-ratelimit-* headers when it is
        spent."""
        adm = await self.limiter.take(f"key:{key_id}:rpm", 1.0, rpm, 60.0)
        if adm.ok:
            return adm
        wait = adm.retry_after_s if math.isfinite(adm.retry_after_s) else 60.0
        err = wire_errors.rate_limited(f"Rate limit of this gateway key reached. Retry after {wait:.1f}s.")
        err.headers = {
            "Retry-After": str(max(1, math.ceil(wait))),
            "x-ratelimit-limit-requests": f"{rpm:g}",
            "x-ratelimit-remaining-requests": str(max(0, math.floor(adm.remaining))),
            "x-ratelimit-reset-requests": f"{max(wait, adm.reset_s):.3f}s",
        }
        raise err

    def refund_key(self, key_id: str, adm: Admission) -> None:
        """Give back the request ``admit_key`` counted (answered ``adm``): the request was refused later, and a
        refusal keeps nothing (docs/keys.md). In-process state: at once; Redis: in the background."""
        fix = self.limiter.refund_now(f"key:{key_id}:rpm", 1.0, 60.0, adm)
        if fix is None:
            return
        if isinstance(self.state, LocalState):
            self.state.adjust_now(fix.name, fix.delta, fix.window_s, fix.bucket)
        else:
            self._spawn(self.state.adjust(fix.name, fix.delta, fix.window_s, fix.bucket))

    # -- views ------------------------------------------------------------------------------------------

    def view(self, own: bool) -> dict[str, Any]:
        """What ``/admin/providers`` says about the fleet it shows."""
        st = self.state.status()
        return {
            "backend": st.backend,
            "replica": st.replica,
            "replicas": st.replicas,
            "windows": "replica" if own or not self.shared else "fleet",
            "fallback_active": st.fallback_active,
        }

    def window_snapshot(self, h: ProviderHealth, *, own: bool) -> dict[str, Any]:
        """``h.snapshot()``: the fleet's merged windows, or with ``own`` this replica's alone."""
        if not own or not isinstance(h.ttft, FleetWindow) or not isinstance(h.e2e, FleetWindow):
            return h.snapshot()
        mine = copy.copy(h)
        mine.ttft, mine.e2e = h.ttft.own, h.e2e.own
        return mine.snapshot()

    # -- pacing demand ----------------------------------------------------------------------------------

    def wanted(self, provider: str, lane: Lane = "interactive", *, metered: bool = True) -> None:
        """A request wanted to go to ``provider`` (admitted or paced out): this replica's demand (the batch lane's
        also counted apart: the split gives it only what the fleet's interactive demand leaves). ``metered``
        False: an interactive attempt at a provider with no known limits, which needs no batch-lane reserve."""
        self._wanted[provider] = self._wanted.get(provider, 0) + 1
        if lane == "batch":
            self._wanted_batch[provider] = self._wanted_batch.get(provider, 0) + 1
        elif metered:  # every interactive attempt, paced here or on the fleet's bucket: the batch lane's reserve
            self.lanes.meter(provider).add()

    # -- priority at the pacer (lane_pacing.py) -------------------------------------------------------------

    def fleet_paced(self, provider: ProviderState) -> bool:
        """Whether ``provider`` is paced on the fleet's one shared bucket (:meth:`LanePacer.fleet_paced`)."""
        return self.lanes.fleet_paced(provider)

    async def pace(self, provider: ProviderState, tokens: float, lane: Lane, wait_s: float) -> bool:
        """Take ``provider``'s pacing for one attempt of ``tokens`` in ``lane`` (:meth:`LanePacer.pace`)."""
        return await self.lanes.pace(provider, tokens, lane, wait_s)

    # -- drain / enable ---------------------------------------------------------------------------------

    async def set_drained(self, name: str, drained: bool) -> None:
        """Drain or enable ``name`` here now and, through the state, on every replica (persistent)."""
        self._providers[name].drained = drained  # KeyError: unknown provider
        self._on_drained(self._providers)
        await self.state.set_flag(f"drain:{name}", drained)

    def set_drained_soon(self, name: str, drained: bool) -> None:
        """``set_drained`` from synchronous code (the dashboard's controls): here now, the fleet shortly."""
        self._providers[name].drained = drained
        self._on_drained(self._providers)
        self._spawn(self.state.set_flag(f"drain:{name}", drained))

    def _apply_flags(self) -> None:
        changed = False
        for name, p in self._providers.items():
            flag = self.state.flag(f"drain:{name}")
            if flag is not None and flag != p.drained:
                p.drained = flag
                changed = True
                log.info("provider %s %s by the fleet", name, "drained" if flag else "enabled")
        if changed:
            self._on_drained(self._providers)

    # -- breakers ---------------------------------------------------------------------------------------

    def on_breaker(self, provider: str, tr: Transition) -> None:
        """Called for every breaker transition of this replica (``Gateway._on_breaker``)."""
        if not self.shared or tr.reason.startswith(_FLEET):
            return
        breaker = self.breakers.get(provider)
        key = f"breaker:{provider}"
        if tr.to_state == "open":
            self._spawn(self.state.pause(key, breaker.last_cooldown_s, f"{self.state.replica}: {tr.reason}"))
            self._spawn(self._release_trial(provider))
        elif tr.to_state == "half_open":
            self._spawn(self._take_trial(provider))
        elif tr.to_state == "closed":
            self._spawn(self._close_fleet(provider))

    async def _take_trial(self, provider: str) -> None:
        lease = await self.state.acquire(f"trial:{provider}", 1, ttl_s=self.breakers.config.trial_timeout_s)
        if lease.ok:
            self._trial_tokens[provider] = lease.token
            return
        breaker = self.breakers.get(provider)
        if breaker.state == "half_open":
            breaker.force_open(_TRIAL_HOLD_S, _FLEET + "another replica runs the half-open trials")

    async def _release_trial(self, provider: str) -> None:
        token = self._trial_tokens.pop(provider, None)
        if token is not None:
            await self.state.release(f"trial:{provider}", token)

    async def _close_fleet(self, provider: str) -> None:
        await self._release_trial(provider)
        await self.state.pause(f"breaker:{provider}", 0)
        self._breaker_gen[provider] = await self.state.bump(f"breaker:{provider}")

    def _apply_breakers(self) -> None:
        for name in self._providers:
            breaker = self.breakers.get(name)
            key = f"breaker:{name}"
            gen = self.state.generation(key)
            if gen != self._breaker_gen.get(name, 0):
                self._breaker_gen[name] = gen
                if breaker.state != "closed":
                    breaker.force_close(_FLEET + "another replica's trials passed")
                    for h in self.health:
                        if h.provider == name:
                            h.forget()
                continue
            left = self.state.paused_for(key)
            if self.state.pause_reason(key).startswith(self.state.replica + ":"):
                continue  # our own open: our breaker keeps its own time (it runs the trials)
            if left > 0 and breaker.state != "open":
                breaker.force_open(left + _TRIAL_HOLD_S, _FLEET + (self.state.pause_reason(key) or "opened"))
            elif left > 0 and breaker.retry_in() < left:
                breaker.force_open(left + _TRIAL_HOLD_S, _FLEET + "re-opened")

    # -- the loop ---------------------------------------------------------------------------------------

    async def _loop(self) -> None:
        next_publish = 0.0
        while True:
            await asyncio.sleep(self.sync_interval)
            try:
                self._apply_flags()
                self._apply_breakers()
                await self._share_pacing()
                now = time.monotonic()
                if now >= next_publish:
                    next_publish = now + self.publish_interval
                    await self._publish_windows()
                    await self._publish_version()
            except Exception:  # the loop must outlive any one bad tick
                log.exception("fleet sync tick failed")

    async def _publish_version(self) -> None:
        """Tell the fleet which config this replica runs (``/admin/config``'s ``fleet_versions``)."""
        with contextlib.suppress(Exception):
            await self.state.publish("config", self._version.encode(), ttl_s=5.0)

    async def _share_pacing(self) -> None:
        """Publish this replica's demand per limited provider and pace at ``own ÷ Σ demands``, the demands
        weighed by lane (``lane_weights``: interactive first, batch on what the fleet's interactive demand leaves).

        The replicas tick at different moments, so a replica sees a peer's new demand up to one tick
        after the peer itself acted on it. To keep the shares' sum ≤ 1 through such changes, a replica's
        own demand counts at the lower of its last two published values and each peer's at the higher
        of the two last seen: whichever of a replica's two values its peers hold, they count it at least
        as high as it counts itself. The demand is a rate over the last ``_DEMAND_WINDOW_S`` (an EMA
        of 0.25 s ticks was noisy enough to over-allocate by ~30 % for a tick: one upstream 429)."""
        now = time.monotonic()
        dt, self._last_tick = max(1e-3, now - self._last_tick), now
        limited = [n for n, p in self._providers.items() if p.pacer.limited]
        batch: dict[str, float] = {}
        for name in self._wanted:
            for counts, store, out in (
                (self._wanted, self._demand_ticks, self._demand),
                (self._wanted_batch, self._batch_ticks, batch),
            ):
                ticks = store.setdefault(name, collections.deque())
                ticks.append((dt, counts.get(name, 0)))
                counts[name] = 0
                span = sum(t for t, _ in ticks)
                while len(ticks) > 1 and span - ticks[0][0] >= _DEMAND_WINDOW_S:
                    span -= ticks.popleft()[0]
                out[name] = sum(n for _, n in ticks) / span
        if not limited:
            return
        mine = {n: round(self._demand[n], 3) for n in limited}
        # The batch lane's part under its own key (a replica without lanes ignores a name it has no provider for).
        mine |= {n + _BATCH_KEY: round(batch.get(n, 0.0), 3) for n in limited}
        before, self._published_demand = self._published_demand, mine
        await self.state.publish("pacing", msgspec.json.encode(mine), ttl_s=max(1.0, 4 * self.sync_interval))
        seen: dict[str, tuple[bytes, dict[str, float], dict[str, float]]] = {}
        for replica, blob in self.state.peers("pacing").items():
            old = self._peer_demand.get(replica)
            if old is not None and old[0] == blob:
                seen[replica] = old
            else:
                latest = msgspec.json.decode(blob, type=dict[str, float])
                seen[replica] = (blob, latest, old[1] if old is not None else latest)
        self._peer_demand = seen
        for name in limited:
            key = name + _BATCH_KEY
            low = {k: min(mine[k], before.get(k, mine[k])) for k in (name, key)}
            demands = [(low[name] - low[key], low[key])]
            for _, new, prev in seen.values():
                total = max(new.get(name, 0.0), prev.get(name, 0.0))
                part = max(new.get(key, 0.0), prev.get(key, 0.0))
                demands.append((total - part, part))
            self._fleet_interactive[name] = sum(max(0.0, i) for i, _ in demands)
            self._fleet_batch[name] = sum(max(0.0, b) for _, b in demands)
            pacer = self._providers[name].pacer
            target = pacer.rpm_limit * pacer.headroom / 60.0 if pacer.rpm_limit is not None else None
            weights = [w + _DEMAND_FLOOR for w in lane_weights(target, demands)]
            pacer.set_share(weights[0] / sum(weights))

    # -- the dashboard's fleet view ----------------------------------------------------------------------

    def _live_summary(self) -> dict[str, Any]:
        """This replica's live state in brief, as published on ``live`` for the others' dashboards."""
        table = self._routes
        weights = {
            alias: {p: e["effective_weight"] for p, e in table.policy_for(alias).explain(routes).items()}
            for alias, routes in table.aliases.items()
        }
        providers = self._providers
        now = time.monotonic()
        return {
            "replica": self.state.replica,
            "at": time.time(),
            "in_flight": {name: p.in_flight for name, p in providers.items()},
            "providers": {name: p.snapshot(now)["state"] for name, p in providers.items()},
            "breakers": {name: self.breakers.get(name).state for name in providers},
            "weights": weights,
            "config": self._version,
        }

    def live_view(self) -> dict[str, Any]:
        """Every replica's live state (ours now, the others' as last published) and the routes' windows:
        fleet-merged when the state is shared, this process's own otherwise."""
        ours = self._live_summary() | {"answering": True}
        peers = []
        for replica, blob in sorted(self.state.peers("live").items()):
            with contextlib.suppress(ValueError, TypeError):
                data = msgspec.json.decode(blob, type=dict[str, Any])
                peers.append(data | {"replica": replica, "answering": False})
        windows = []
        for routes in self._routes.aliases.values():
            for r in routes:
                h = self.health.get(r.provider, r.model)
                ttft, e2e = h.ttft.histogram(), h.e2e.histogram()
                windows.append(
                    {
                        "provider": r.provider,
                        "model": r.model,
                        "ttft_ms": _summary(ttft),
                        "e2e_ms": _summary(e2e),
                    }
                )
        return {
            "shared": self.shared,
            "replica": self.state.replica,
            "replicas": [ours, *peers],
            "windows_scope": "fleet" if self.shared else "process",
            "windows": windows,
        }

    async def _publish_windows(self) -> None:
        blob = msgspec.msgpack.encode(
            {f"{p}\x1f{m}": (t.own.to_bytes(), e.own.to_bytes()) for (p, m), (t, e) in self._windows.items()}
        )
        await self.state.publish("health", blob, ttl_s=max(3.0, 3 * self.publish_interval))
        live = msgspec.json.encode(self._live_summary())
        await self.state.publish("live", live, ttl_s=max(3.0, 3 * self.publish_interval))
        self.published += 1
        peers = [
            msgspec.msgpack.decode(b, type=dict[str, tuple[bytes, bytes]]) for b in self.state.peers("health").values()
        ]
        for (p, m), (ttft, e2e) in self._windows.items():
            k = f"{p}\x1f{m}"
            ttft.rebuild([peer[k][0] for peer in peers if k in peer])
            e2e.rebuild([peer[k][1] for peer in peers if k in peer])


def _summary(hist: Any) -> dict[str, float] | None:
    """P50/P90/P99 and count of a window's histogram in ms, or None while it is empty."""
    if not hist.count:
        return None
    return {k: round(float(v), 3) for k, v in hist.summary().items() if k in ("p50", "p90", "p99", "count")}
