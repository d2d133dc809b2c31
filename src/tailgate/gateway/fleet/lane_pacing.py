"""Priority at the pacer for one gateway replica: the batch lane takes only the pacing budget interactive traffic
leaves (``state/priority.py``: ``keep_level``; docs/routing.md, "Pacing"), on this replica's own buckets or on the
fleet's one shared bucket when slices would be too small or the fleet has batch work."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tailgate.state import SharedState
from tailgate.state.priority import Lane, LaneMeter

if TYPE_CHECKING:
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.routing.pacing import Pacer

__all__ = ["LanePacer"]

_FLEET_BUCKET_BELOW = 2.0
"""A per-replica slice of a provider's bucket under this many requests is paced on the fleet's shared bucket."""


class LanePacer:
    """The batch lane's waiting line and this replica's interactive demand per provider, and the pacing decision
    for one attempt. ``fleet_interactive`` / ``fleet_batch``: the fleet's published demand per provider (requests
    per second), kept current by the fleet's sync."""

    def __init__(
        self,
        state: SharedState,
        shared: bool,
        fleet_interactive: Mapping[str, float],
        fleet_batch: Mapping[str, float],
        window_s: float,
    ) -> None:
        self._state = state
        self._shared = shared
        self._fleet_interactive = fleet_interactive
        self._fleet_batch = fleet_batch
        self._window_s = window_s
        self._meters: dict[str, LaneMeter] = {}
        """Per provider: this replica's interactive demand (requests), the batch lane's reserve."""
        self._lines: dict[str, asyncio.Lock] = {}
        """Per provider: the batch lane's line (FIFO: only its head polls the pacer)."""

    def meter(self, provider: str) -> LaneMeter:
        """This replica's interactive demand for ``provider`` (fed by ``Fleet.wanted``)."""
        meter = self._meters.get(provider)
        if meter is None:
            meter = self._meters[provider] = LaneMeter(self._window_s)
        return meter

    def fleet_paced(self, provider: ProviderState) -> bool:
        """Whether ``provider`` is paced on the fleet's one shared bucket: a shared state, an rpm limit, and either
        batch work in the fleet for it (slices would leave an interactive replica's margin idle) or a per-replica
        slice of the bucket under two requests (a slice that small wastes its refill while full)."""
        pacer = provider.pacer
        if not self._shared or pacer.rpm_limit is None or pacer.rpm is None:
            return False
        if self._fleet_batch.get(provider.name, 0.0) > 0:
            return True  # batch work in the fleet: one bucket, so the lane uses all interactive traffic leaves
        rate = pacer.rpm_limit * pacer.headroom / 60.0
        return rate * pacer.burst_s / max(1, self._state.replicas()) < _FLEET_BUCKET_BELOW

    async def pace(self, provider: ProviderState, tokens: float, lane: Lane, wait_s: float) -> bool:
        """Take ``provider``'s pacing for one attempt of ``tokens`` in ``lane``; a batch attempt may wait up to
        ``wait_s`` for it, in a FIFO line per provider (only its head asks the pacer). An interactive attempt asks
        once and never waits behind the line. True: admitted (the pacer's share is taken)."""
        meter = self.meter(provider.name)  # fed by ``wanted`` (the caller's, before this)
        if lane == "interactive":
            return await self._pace_once(provider, tokens, lane, meter) == 0.0
        deadline = time.monotonic() + wait_s
        line = self._lines.setdefault(provider.name, asyncio.Lock())
        if line.locked():
            if wait_s <= 0:
                return False  # others wait already: a batch request that may not wait is behind them
            try:
                await asyncio.wait_for(line.acquire(), wait_s)
            except TimeoutError:
                return False
        else:
            await line.acquire()  # free: taken at once (a timeout of 0 would refuse even a free lock)
        try:
            while True:
                wait = await self._pace_once(provider, tokens, lane, meter)
                if wait == 0.0:
                    return True
                if time.monotonic() + wait > deadline:
                    return False
                await asyncio.sleep(wait)
        finally:
            line.release()

    async def _pace_once(self, provider: ProviderState, tokens: float, lane: Lane, meter: LaneMeter) -> float:
        """One try: 0.0 when admitted, else the seconds until a retry could succeed."""
        pacer = provider.pacer
        now = time.monotonic()
        if pacer.paused_until > now:
            return pacer.paused_until - now
        if self.fleet_paced(provider):
            assert pacer.rpm_limit is not None  # fleet_paced says so
            rate = pacer.rpm_limit * pacer.headroom / 60.0
            if (wait := pacer.tokens_in(tokens)) > 0:
                return wait
            # The fleet's interactive reserve: the interactive demand the replicas published (at least this one's
            # measured now × the replicas, before the first publications).
            fleet_rate = max(self._fleet_interactive.get(provider.name, 0.0), meter.rate())
            burst = max(1.0, rate * pacer.burst_s)
            # A debt of one request where the headroom covers it: over any minute the fleet then sends at most
            # headroom × limit + the bucket + that one request, still within the limit.
            debt = 1.0 if (1.0 - pacer.headroom) * pacer.rpm_limit >= burst + 1.0 else 0.0
            # The reserve, at most what the bucket holds beside a batch request and an interactive one's need: a
            # full bucket's next token would be lost, so the lane may always take it.
            reserve = min(fleet_rate * pacer.burst_s, max(0.0, burst - 2.0 + debt)) if lane == "batch" else 0.0
            adm = await self._state.pace(
                f"provider:{provider.name}:rpm", 1.0, rate, burst, lane=lane, reserve=reserve, debt=debt
            )
            if not adm.ok:
                return max(adm.retry_after_s, 1e-3)
            pacer.take_tokens(tokens)
            return 0.0
        keep = (0.0, 0.0)
        if lane == "batch":
            keep = self._batch_keep(pacer, meter, tokens)
        wait = pacer.available_in(tokens, keep)
        if wait > 0:
            return wait
        return 0.0 if pacer.try_acquire(tokens, keep) else 1e-3

    @staticmethod
    def _batch_keep(pacer: Pacer, meter: LaneMeter, tokens: float) -> tuple[float, float]:
        """What a batch take must leave in this replica's buckets: one interactive request and the interactive
        reserve (requests; tokens at the size of this request), at most what the bucket holds beside the batch's
        own request (a full bucket's next token would be lost: the lane may always take it)."""
        reserve = meter.reserve(pacer.burst_s)
        rpm = pacer.rpm
        keep_requests = reserve + (1.0 if rpm is not None and rpm.burst >= 2.0 + reserve else 0.0)
        if rpm is not None:  # at most what the bucket holds beside the batch request: a full bucket's next token
            keep_requests = min(keep_requests, max(0.0, rpm.burst - 1.0))  # would be lost, so it may take it
        keep_tokens = 0.0
        if pacer.tpm is not None and tokens > 0:
            keep_tokens = min(keep_requests * tokens, max(0.0, pacer.tpm.burst - tokens))
        return keep_requests, keep_tokens
