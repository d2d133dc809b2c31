"""One simulated provider: an engine, its faults, its truth log, and its HTTP listener."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time

from aiohttp import web

from tailgate._aiohttp_internals import HardenedSite
from tailgate.sim.engine import Engine
from tailgate.sim.faults import Faults, RateLimiter, TimelineEntry
from tailgate.sim.prefix_cache import PrefixCache
from tailgate.sim.request import Abort, BatchState
from tailgate.sim.server import build_app
from tailgate.sim.spec import ProviderSpec
from tailgate.sim.text import text_seed, token_at
from tailgate.sim.truth import TruthLog

__all__ = ["ProviderSpec", "SimProvider"]

log = logging.getLogger("tailgate.sim")


class SimProvider:
    """A running simulated provider. ``await start()`` binds its port; ``url`` is its ``/v1`` base."""

    def __init__(self, spec: ProviderSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.rng = random.Random(spec.seed)
        self.faults = spec.faults
        self.limiter = RateLimiter()
        self.truth = TruthLog(spec.truth_size, spec.truth_jsonl)
        self.engine = Engine(
            spec.params,
            token_fn=token_at,
            time_scale=spec.time_scale,
            rng=random.Random(spec.seed + 1),
            multiplier=self.multiplier,
        )
        params = spec.params
        self.prefix_cache: PrefixCache | None = (
            PrefixCache(
                block_tokens=params.cache_block_tokens,
                capacity=params.cache_blocks,
                ttl_s=params.cache_ttl_s * spec.time_scale,
            )
            if params.prefix_cache
            else None
        )
        """The provider's prompt-prefix cache (``engine: {prefix_cache: false}``: None). Its TTL is a preset
        time, so ``time_scale`` scales it as it scales every other."""
        self.started_at = 0.0
        self.started_at_wall = 0.0
        self.counter = 0
        self.id_counter = 0
        self._ids = random.Random(spec.seed + 2)
        self.port = spec.port
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._listening = False
        self._timeline_handles: list[asyncio.TimerHandle] = []
        self._listener_lock = asyncio.Lock()
        self._released = asyncio.Event()
        """Set while the ``hold`` fault is off: held requests wait on it."""
        self.held = 0
        self.batches: BatchState | None = None
        """Its ``/v1/files`` + ``/v1/batches`` (set when its HTTP face is built)."""
        self._stopping = False
        """Requests waiting now under the ``hold`` fault (``/sim/state``'s ``held``)."""
        self._sync_hold()

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The OpenAI base URL clients use (``http://host:port/v1``)."""
        return f"http://{self.spec.host}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://{self.spec.host}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.started_at = time.perf_counter()
        self.started_at_wall = time.time()
        # handler_cancellation: a client that goes away cancels its handler at once, which frees the
        # engine slot (the handlers release it in `finally`) instead of decoding for nobody.
        self._runner = web.AppRunner(build_app(self), handler_cancellation=True, access_log=None)
        await self._runner.setup()
        await self._listen()
        for entry in self.spec.timeline:
            self._timeline_handles.append(loop.call_later(entry.at, self._apply_timeline, entry))
        if self.faults.outage and self.faults.outage_mode == "refuse":
            await self._sync_listener()

    async def stop(self) -> None:
        self._stopping = True
        self._released.set()  # held requests wake and drop their connections (wait_while_held)
        for handle in self._timeline_handles:
            handle.cancel()
        self._timeline_handles.clear()
        await self.engine.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._site = None
        self._listening = False
        self.truth.close()

    async def _listen(self) -> None:
        assert self._runner is not None
        # HardenedSite: parser-level errors (a header over the limit) in the OpenAI shape; no connection cap.
        # A listen backlog like a provider's front (aiohttp's default is 128): a gateway opening a thousand
        # upstream connections at once while this loop is busy would otherwise see SYNs dropped and connect
        # timeouts that no real provider would cause (benchmarks/stream_relay.py at 1,000 streams).
        self._site = HardenedSite(self._runner, self.spec.host, self.port, reuse_address=True, backlog=4096)
        await self._site.start()
        if self.port == 0:
            self.port = self._site.port
        self._listening = True

    async def _sync_listener(self) -> None:
        """Close the listening socket during a ``refuse`` outage; reopen it on the same port after."""
        async with self._listener_lock:
            refuse = self.faults.outage and self.faults.outage_mode == "refuse"
            if refuse and self._listening and self._site is not None:
                await self._site.stop()  # stop accepting; connections already open finish normally
                self._listening = False
                log.info("%s: listener closed (outage_mode=refuse)", self.name)
            elif not refuse and not self._listening and self._runner is not None:
                await self._listen()
                log.info("%s: listener reopened on %s", self.name, self.url)

    # -- faults -----------------------------------------------------------------------------------

    def set_faults(self, update: Faults) -> Faults:
        self.faults = self.faults.merged(update)
        self._after_fault_change()
        return self.faults

    def clear_faults(self) -> Faults:
        self.faults = Faults()
        self.limiter.reset()
        self._after_fault_change()
        return self.faults

    def _after_fault_change(self) -> None:
        log.info("%s: faults now %s", self.name, self.faults.model_dump(exclude_defaults=True) or "healthy")
        self._sync_hold()
        if self._runner is not None:
            asyncio.get_running_loop().create_task(self._sync_listener())

    def _sync_hold(self) -> None:
        if self.faults.hold:
            self._released.clear()
        else:
            self._released.set()  # wakes every held request at once

    async def wait_while_held(self) -> None:
        """Return once the ``hold`` fault is off (set false, or every fault cleared); raise :class:`Abort` (drop
        the connection) when the provider stops instead."""
        self.held += 1
        try:
            await self._released.wait()
        finally:
            self.held -= 1
        if self._stopping:
            raise Abort

    def _apply_timeline(self, entry: TimelineEntry) -> None:
        if entry.clear:
            self.clear_faults()
        if entry.set is not None:
            self.set_faults(entry.set)

    # -- the engine's view of time ----------------------------------------------------------------

    def multiplier(self, now: float) -> float:
        """Current slowdown: the latency fault times the preset's slow swing (1 … ``swing``)."""
        p = self.spec.params
        mult = self.faults.latency_multiplier
        if p.swing != 1.0 and p.swing_period_s > 0:
            period = p.swing_period_s * self.spec.time_scale
            phase = (now - self.started_at) / period
            mult *= 1.0 + (p.swing - 1.0) * (1.0 - math.cos(2.0 * math.pi * phase)) / 2.0
        return mult

    def pre_queue_delay(self, now: float) -> float:
        """Lognormal time before the request reaches the engine queue (network, provider gateway)."""
        p = self.spec.params
        if p.pre_median_s <= 0:
            return 0.0
        draw = p.pre_median_s * (self.rng.lognormvariate(0.0, p.pre_sigma) if p.pre_sigma > 0 else 1.0)
        return draw * self.spec.time_scale * self.multiplier(now)

    def new_id(self) -> str:
        """A fresh id for a request as it arrives (the response's id, and its ground-truth row's)."""
        self.id_counter += 1
        return f"{self.id_counter:x}{self._ids.getrandbits(32):08x}"

    def text_seed(self, request_seed: int | None) -> int:
        """The text seed of a request that reached generation (deterministic for the sim seed)."""
        self.counter += 1
        return text_seed(self.spec.seed, request_seed if request_seed is not None else self.counter)

    def next_request(self, request_seed: int | None) -> tuple[str, int]:
        """A fresh response id and the text seed for it (deterministic for the sim seed)."""
        self.counter += 1
        rid = f"{self.counter:x}{self.rng.getrandbits(32):08x}"
        return rid, text_seed(self.spec.seed, request_seed if request_seed is not None else self.counter)
