"""The gateway's passive numbers: per-minute aggregates of its own requests, stored beside the probes.

``observe()`` runs once per finished request on the event loop: it adds the request to the bucket of
its wall-clock minute, provider and upstream model — a dictionary lookup, a few additions and two
histogram records (≈ 1.3 µs; memory stays constant whatever the request rate — a list of raw latencies
per minute grew by megabytes a minute at a few thousand req/s); finished minutes are serialized in a
worker thread. A
background task hands finished minutes to a :class:`~tailgate.ledger.samples.SampleStore` on the
ledger's database, written in the store's own thread, so the request path never waits on disk.
``close()`` writes everything, the current minute included. Each worker process writes its own rows;
readers merge rows of the same minute (the table is ``traffic_minutes``, documented in docs/monitor.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tailgate._runtime import stop_task
from tailgate.ledger.samples import SampleStore, TrafficMinute
from tailgate.routing import Route
from tailgate.stats import LatencyHistogram

__all__ = ["TrafficAggregator"]

log = logging.getLogger("tailgate.gateway")

# Outcomes that say nothing about the provider: the client went away.
_IGNORED = frozenset({"client_closed"})


@dataclass(slots=True)
class _Bucket:
    requests: int = 0
    errors: int = 0
    output_tokens: int = 0
    tok_s_sum: float = 0.0
    tok_s_n: int = 0
    ttft: LatencyHistogram = field(default_factory=LatencyHistogram)
    e2e: LatencyHistogram = field(default_factory=LatencyHistogram)


def _hist_json(hist: LatencyHistogram) -> str | None:
    if not hist.count:
        return None
    return json.dumps(hist.to_dict(), separators=(",", ":"))


def _rows(done: list[tuple[tuple[float, str, str], _Bucket]]) -> list[TrafficMinute]:
    """Finished buckets as table rows; serialized here, in a worker thread, not on the event loop."""
    return [
        TrafficMinute(
            minute=minute,
            provider=provider,
            model=model,
            requests=b.requests,
            errors=b.errors,
            output_tokens=b.output_tokens,
            tok_s_sum=b.tok_s_sum,
            tok_s_n=b.tok_s_n,
            ttft_hist=_hist_json(b.ttft),
            e2e_hist=_hist_json(b.e2e),
        )
        for (minute, provider, model), b in done
    ]


class TrafficAggregator:
    """Per-minute traffic aggregates → ``traffic_minutes``; ``path=None`` makes it a no-op (ledger off).

    ``clock`` is the wall clock (Unix seconds) that picks the minute; ``flush_interval`` how often the
    background task looks for finished minutes.
    """

    def __init__(
        self, path: str | Path | None, *, flush_interval: float = 5.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = Path(path) if path is not None else None
        self._flush_interval = flush_interval
        self._clock = clock
        self._buckets: dict[tuple[float, str, str], _Bucket] = {}
        self._store: SampleStore | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.before_flush: Callable[[], Awaitable[None]] | None = None
        """Called first by :meth:`flush`: the gateway's requests ended but not yet booked are booked now
        (gateway/request_path/bookkeeping.py)."""

    @property
    def enabled(self) -> bool:
        return self.path is not None and not self._closed

    def observe(
        self,
        provider: str | None,
        model: str | None,
        outcome: str,
        output_tokens: int | None,
        ttft_ms: float | None,
        e2e_ms: float | None,
        *,
        stream: bool,
    ) -> None:
        """Count one finished request (served or failed) against its provider × upstream model.

        Requests no provider was tried for, and those the client abandoned, are not counted. Latencies
        and tok/s are taken from successful requests only (``outcome == "ok"``); TTFT and tok/s from
        streamed ones only: a non-streamed answer arrives in one piece, so its "first token" is its whole
        answer and E2E − TTFT is the time to read the body (≈ 0.05 ms: a tok/s in the hundreds of
        thousands), not generation time (docs/monitor.md).
        """
        if provider is None or model is None or self.path is None or self._closed or outcome in _IGNORED:
            return
        minute = self._clock() // 60.0 * 60.0
        key = (minute, provider, model)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket()
        bucket.requests += 1
        if outcome != "ok":
            bucket.errors += 1
            return
        bucket.output_tokens += output_tokens or 0
        if stream and ttft_ms is not None:
            bucket.ttft.record(ttft_ms if ttft_ms > 0.0 else 0.0)
        if e2e_ms is not None:
            bucket.e2e.record(e2e_ms if e2e_ms > 0.0 else 0.0)
            # tok/s inlined (tailgate.ledger.samples.tok_s): this runs once per request on the event loop.
            if stream and ttft_ms is not None and output_tokens is not None and output_tokens > 1 and e2e_ms > ttft_ms:
                bucket.tok_s_sum += (output_tokens - 1) * 1000.0 / (e2e_ms - ttft_ms)
                bucket.tok_s_n += 1

    def observe_route(
        self,
        route: Route | None,
        outcome: str,
        output_tokens: int | None,
        ttft_ms: float | None,
        e2e_ms: float | None,
        *,
        stream: bool,
    ) -> None:
        """``observe`` for the route a gateway request was served by (or tried last); None: no route tried."""
        if route is not None:
            self.observe(route.provider, route.model, outcome, output_tokens, ttft_ms, e2e_ms, stream=stream)

    async def start(self) -> None:
        """Open the store (raises like the ledger on an unusable path) and start the flush task."""
        if self.path is None or self._store is not None:
            return
        store = SampleStore(self.path)
        await store.start()
        self._store = store
        self._task = asyncio.create_task(self._run(), name="tailgate-traffic-flush")

    async def flush(self, *, everything: bool = False) -> None:
        """Write finished minutes (``everything``: the current one too)."""
        if self.before_flush is not None:
            await self.before_flush()
        store = self._store
        if store is None:
            return
        current = self._clock() // 60.0 * 60.0
        done = [(key, self._buckets.pop(key)) for key in list(self._buckets) if everything or key[0] < current]
        if done:
            for row in await asyncio.to_thread(_rows, done):
                store.add_traffic(row)
        await store.flush()  # a failed write keeps the rows in the store for the next flush

    async def close(self) -> None:
        """Write everything (the current minute included) and close the store. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            await stop_task(self._task, reraise=True)
        if self._store is not None:
            await self.flush(everything=True)
            await self._store.close()
            self._store = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._flush_interval)
            try:
                await self.flush()
            except Exception:  # never let the aggregator die: the next tick retries
                log.exception("traffic aggregates: flush failed")
