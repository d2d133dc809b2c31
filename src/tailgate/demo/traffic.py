"""Background traffic for the demo: an open-loop Poisson stream of chat requests through the gateway.

Bodies come from the bench's :class:`~tailgate.bench.workload.Workload` and every request goes through
the measurement core (:func:`tailgate.upstream.call`), so the demo's numbers mean what bench's and the
gateway's mean. Open loop (docs/bench.md): request *i* is due at its intended time whatever happened to
earlier ones, and its latencies count from that time — a stalled provider cannot slow the schedule and
hide its own queueing.

The mix is our users' traffic: interactive chat (streamed, short answers, latency-sensitive) and a
share of batch work (not streamed, longer, ``x-tailgate-class: batch``, which the secondary takes first).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from dataclasses import dataclass

from tailgate.bench.workload import TraceEntry, Workload
from tailgate.demo.drill import RequestRecord
from tailgate.stats import LatencyHistogram
from tailgate.upstream import Chunk, Endpoint, Headers, Sent, Timeouts, UpstreamClient, call


@dataclass(frozen=True, slots=True)
class TrafficShape:
    """Rate and mix of the background traffic."""

    rate: float = 15.0
    """Requests per second (Poisson arrivals)."""
    batch_share: float = 0.1
    interactive_tokens: tuple[int, int] = (200, 64)
    """Input and output tokens of an interactive (streamed) request."""
    batch_tokens: tuple[int, int] = (600, 128)
    max_in_flight: int = 1000
    """Requests due while this many are in flight are counted as failed (``overload``), not sent."""
    seed: int = 0


@dataclass(frozen=True, slots=True)
class LiveStats:
    """The last few seconds of completed requests, for the progress line."""

    rate: float
    ttft_p99: float | None
    e2e_p99: float | None
    served: dict[str, float]
    errors: int
    in_flight: int


class Traffic:
    """Sends requests to ``base_url`` until :meth:`stop`; ``records`` holds every finished request."""

    def __init__(self, base_url: str, model: str, shape: TrafficShape | None = None) -> None:
        self.shape = shape or TrafficShape()
        self.model = model
        # Generous timeouts: the demo wants to *see* slow answers, and the gateway enforces its own.
        timeouts = Timeouts(connect=5.0, headers=120.0, first_token=120.0, idle=60.0, total=180.0)
        self.client = UpstreamClient(
            Endpoint("tailgate-demo", base_url, api_keys=("demo",), timeouts=timeouts, max_connections=2048)
        )
        self.workload = Workload(seed=self.shape.seed)
        self.records: list[RequestRecord] = []
        self.in_flight = 0
        self._rng = random.Random(self.shape.seed)
        self._stop = asyncio.Event()
        self._tasks: dict[asyncio.Task[None], float] = {}
        """Requests in flight and their intended send times (wall clock)."""
        self._recent: deque[tuple[float, RequestRecord]] = deque()
        # Wall time of a perf_counter() reading: sends are stored as wall time, to line up with the
        # simulators' ground truth (``received_at`` is wall time); durations stay on the monotonic clock.
        self._perf0 = time.perf_counter()
        self._wall0 = time.time()

    def wall(self, perf: float) -> float:
        return self._wall0 + (perf - self._perf0)

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Send on schedule until :meth:`stop` is called."""
        shape = self.shape
        next_at = time.perf_counter()
        while not self._stop.is_set():
            next_at += self._rng.expovariate(shape.rate)
            delay = next_at - time.perf_counter()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                if self._stop.is_set():
                    break
            batch = self._rng.random() < shape.batch_share
            if self.in_flight >= shape.max_in_flight:
                self._finish(
                    RequestRecord(
                        self.wall(next_at),
                        "batch" if batch else "interactive",
                        not batch,
                        False,
                        error_class="overload",
                    ),
                    time.perf_counter(),
                )
                continue
            task = asyncio.create_task(self._one(next_at, batch))
            self._tasks[task] = self.wall(next_at)
            task.add_done_callback(self._tasks.pop)

    def in_flight_sent_before(self, wall: float) -> int:
        """Requests still in flight whose intended send time is before ``wall``."""
        return sum(1 for sent in self._tasks.values() if sent < wall)

    async def drain(self, grace: float, stop: asyncio.Event | None = None) -> None:
        """Wait up to ``grace`` seconds (or until ``stop``) for requests in flight, then cancel the rest."""
        end = time.perf_counter() + grace
        while self._tasks and time.perf_counter() < end and not (stop is not None and stop.is_set()):
            await asyncio.wait(set(self._tasks), timeout=min(0.25, max(0.0, end - time.perf_counter())))
        pending = set(self._tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        await self.client.close()

    async def _one(self, intended: float, batch: bool) -> None:
        shape = self.shape
        tokens_in, tokens_out = shape.batch_tokens if batch else shape.interactive_tokens
        cls = "batch" if batch else "interactive"
        spec = self.workload.for_entry(
            TraceEntry(t=0.0, input_tokens=tokens_in, output_tokens=tokens_out, cls=cls, stream=not batch)
        )
        body = {**spec.body, "model": self.model}
        self.in_flight += 1
        lag = 0.0
        provider: str | None = None
        attempts: int | None = None
        streamed = False
        try:
            async with call(
                self.client,
                "/chat/completions",
                body,
                stream=spec.stream,
                client_wants_usage=True,
                headers={"x-tailgate-class": cls},
            ) as c:
                async for event in c:
                    if isinstance(event, Sent):
                        lag = max(0.0, event.t - intended)
                    elif isinstance(event, Headers):
                        provider = event.headers.get("x-tailgate-provider")
                        raw = event.headers.get("x-tailgate-attempts")
                        attempts = int(raw) if raw and raw.isdigit() else None
                    elif isinstance(event, Chunk) and event.has_token:
                        streamed = True
            result = c.result
        finally:
            self.in_flight -= 1
        assert result is not None
        record = RequestRecord(
            sent=self.wall(intended),
            traffic_class=cls,
            stream=spec.stream,
            ok=result.ok,
            provider=provider,
            attempts=attempts,
            status=result.status,
            error_class=result.error_class,
            streamed=streamed,
            ttft_s=None if result.ttft_ms is None else result.ttft_ms / 1000.0 + lag,
            e2e_s=None if result.e2e_ms is None else result.e2e_ms / 1000.0 + lag,
        )
        self._finish(record, time.perf_counter())

    def _finish(self, record: RequestRecord, now: float) -> None:
        if record.error_class == "cancelled":
            return  # stopped by the demo itself (Ctrl-C), not a failure anyone saw
        self.records.append(record)
        self._recent.append((now, record))

    def live(self, window: float = 5.0) -> LiveStats:
        """Requests completed in the last ``window`` seconds: rate, P99s, share per provider, errors."""
        now = time.perf_counter()
        while self._recent and self._recent[0][0] < now - window:
            self._recent.popleft()
        recs = [r for _, r in self._recent]
        ttft, e2e = LatencyHistogram(), LatencyHistogram()
        served: dict[str, int] = {}
        for r in recs:
            if not r.ok:
                continue
            served[r.provider or "?"] = served.get(r.provider or "?", 0) + 1
            if r.e2e_s is not None:
                e2e.record(r.e2e_s * 1000.0)
            if r.stream and r.ttft_s is not None:
                ttft.record(r.ttft_s * 1000.0)
        ok = sum(served.values())
        span = min(window, now - self._perf0) or 1.0
        return LiveStats(
            rate=len(recs) / span,
            ttft_p99=ttft.percentile(99) / 1000.0 if ttft.count else None,
            e2e_p99=e2e.percentile(99) / 1000.0 if e2e.count else None,
            served={k: v / ok for k, v in sorted(served.items(), key=lambda kv: -kv[1])} if ok else {},
            errors=sum(1 for r in recs if not r.ok),
            in_flight=self.in_flight,
        )
