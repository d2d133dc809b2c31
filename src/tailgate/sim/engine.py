"""The simulated inference engine: batch slots, prefill, continuous-batching decode steps, a FIFO queue.

One engine is one provider's serving capacity. It is driven by a single ticker task: each decode step
lasts ``step_ms + step_per_seq_ms · (n − 1)`` (× jitter × the provider's current multiplier) for the
``n`` sequences decoding in it, and at the end of the step every one of them receives one token. So
10,000 concurrent streams cost one timer per step, not one sleep per token, and queueing appears the
way it does on a real server: once the slots are full, a request waits in the queue and its time to
first token grows with the queue (TTFT = queue wait + prefill + first step). Prompt tokens the provider's
prefix cache held (``Sequence.cached_tokens``) are not prefilled again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from tailgate._runtime import stop_task
from tailgate.sim.presets import EngineParams
from tailgate.stats import LatencyHistogram

log = logging.getLogger("tailgate.sim")


class QueueFull(Exception):
    """The engine's wait queue is at ``queue_limit``; the server answers ``overflow_status``."""


class Sequence:
    """One request inside the engine. The server reads ``out`` and awaits :meth:`wait`."""

    __slots__ = (
        "_waiter",
        "admitted_at",
        "answer_at",
        "cached_tokens",
        "cancelled",
        "degraded",
        "drip_s",
        "enqueued_at",
        "extra_delay_s",
        "finish_reason",
        "finished_at",
        "first_token_at",
        "forced_finish",
        "id",
        "ignore_eos",
        "last_emit",
        "length_reason",
        "min_tokens",
        "notify_each",
        "out",
        "prompt_tokens",
        "ready_at",
        "reasoning",
        "script",
        "seed",
        "sink",
        "stop",
        "tail",
        "target",
        "tool_call",
    )

    def __init__(
        self,
        seq_id: str,
        *,
        prompt_tokens: int,
        target: int,
        seed: int,
        script: list[str] | None = None,
        stop: list[str] | None = None,
        extra_delay_s: float = 0.0,
        drip_s: float = 0.0,
        length_reason: str = "length",
        notify_each: bool = True,
        reasoning: int = 0,
        ignore_eos: bool = False,
        min_tokens: int = 0,
        tool_call: tuple[str, str] | None = None,
    ) -> None:
        self.id = seq_id
        self.prompt_tokens = prompt_tokens
        self.cached_tokens = 0
        """Of ``prompt_tokens``, how many the provider's prefix cache held: their prefill is skipped."""
        self.target = target
        self.seed = seed
        self.script = script
        self.stop = stop or None
        self.extra_delay_s = extra_delay_s
        self.drip_s = drip_s
        self.length_reason = length_reason
        self.notify_each = notify_each
        """Wake the waiter on every token (streams) or only when finished (non-stream requests)."""
        """Finish reason when ``target`` is reached: ``length`` for max_tokens, ``stop`` for a natural end."""
        self.reasoning = reasoning
        """The first ``reasoning`` tokens are thinking (``reasoning_content``); the answer follows them."""
        self.ignore_eos = ignore_eos
        """Never end naturally (a scripted answer runs on with pseudo-text): decode exactly ``target``."""
        self.min_tokens = min_tokens
        """No stop string ends the sequence before this many tokens."""
        self.tool_call = tool_call
        """``(call id, function name)`` when the answer is a tool call; ``script`` then holds its argument
        fragments."""
        self.degraded: str | None = None
        """Which answer-quality degradation this answer serves (a quality fault, or a wrong canary answer);
        the truth row's ``degraded``."""
        self.forced_finish: str | None = None
        """A finish reason that replaces ``stop`` / ``length`` when the sequence ends (``content_filter``)."""
        self.out: list[str] = []
        self.tail = ""
        self.enqueued_at = 0.0
        self.admitted_at = 0.0
        self.ready_at = 0.0
        self.first_token_at = 0.0
        self.answer_at = 0.0
        """When the first answer (non-reasoning) token was decoded; 0.0 while none was."""
        self.finished_at = 0.0
        self.last_emit = -math.inf
        self.finish_reason: str | None = None
        self.cancelled = False
        self._waiter: asyncio.Future[None] | None = None
        self.sink: Callable[[Sequence], None] | None = None
        """Called synchronously after each token is appended (direct stream writes, see sim/stream.py)."""

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    async def wait(self) -> None:
        """Return once a new token was emitted or the sequence finished."""
        if self.finish_reason is not None:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


TokenFn = Callable[[int, int], str]


class Engine:
    """Continuous-batching engine with one ticker task (started on first use inside a running loop).

    ``multiplier(now)`` scales step time at each step (latency faults, slow swings); ``time_scale``
    scales every preset time so tests can run the same shapes 100× faster.
    """

    EARLY_WAKE_S = 0.0015

    def __init__(
        self,
        params: EngineParams,
        *,
        token_fn: TokenFn,
        time_scale: float = 1.0,
        rng: random.Random | None = None,
        multiplier: Callable[[float], float] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.params = params
        self._clock = clock
        self.time_scale = time_scale
        self._token_fn = token_fn
        self._rng = rng or random.Random(0)
        self._multiplier = multiplier or (lambda _now: 1.0)
        self._queue: OrderedDict[str, Sequence] = OrderedDict()
        self._prefilling: dict[str, Sequence] = {}
        self._decoding: dict[str, Sequence] = {}
        self._task: asyncio.Task[None] | None = None
        self._kick: asyncio.Future[None] | None = None
        self._closed = False
        self.lateness_ms = LatencyHistogram()
        """Actual − scheduled end of each decode step, in ms: is the simulator keeping its own time?"""
        self.steps = 0
        self.tokens_emitted = 0

    # -- public API --------------------------------------------------------------------------------

    @property
    def active(self) -> int:
        return len(self._prefilling) + len(self._decoding)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def submit(self, seq: Sequence) -> None:
        """Admit ``seq`` to a free slot or the FIFO queue; raise :class:`QueueFull` past the limit."""
        if self._closed:
            raise RuntimeError("engine is closed")
        loop = asyncio.get_running_loop()
        now = self._clock()
        seq.enqueued_at = now
        if self.active < self.params.slots:
            self._admit(seq, now)
        elif len(self._queue) < self.params.queue_limit:
            self._queue[seq.id] = seq
        else:
            raise QueueFull(f"queue full ({self.params.queue_limit} waiting, {self.params.slots} slots busy)")
        if self._task is None:
            self._task = loop.create_task(self._run(), name="tailgate-sim-engine")
        self._poke()

    def decode_now(self, seq: Sequence) -> None:
        """Decode ``seq`` to its end at once, outside the slots, the queue and the clock: a batch line, whose
        time is its batch's turnaround (:mod:`tailgate.sim.batches`), runs on an engine of its own."""
        now = self._clock()
        while not seq.done:
            self._emit([seq], now)

    def cancel(self, seq: Sequence) -> None:
        """Free the slot (or queue place) of a sequence whose client went away."""
        if seq.done:
            return
        seq.cancelled = True
        seq.finish_reason = "cancelled"
        if self._queue.pop(seq.id, None) is None and (
            self._prefilling.pop(seq.id, None) is not None or self._decoding.pop(seq.id, None) is not None
        ):
            self._fill_slots(self._clock())

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            await stop_task(self._task, reraise=True)
            self._task = None
        for seq in [*self._queue.values(), *self._prefilling.values(), *self._decoding.values()]:
            seq.finish_reason = seq.finish_reason or "cancelled"
            seq._wake()
        self._queue.clear()
        self._prefilling.clear()
        self._decoding.clear()

    def reset_stats(self) -> None:
        """Forget the step lateness histogram and the step/token counters (``DELETE /sim/state``).

        Slots, queue and sequences in flight are untouched; a benchmark calls this after its warm-up
        so the numbers it reads afterwards cover only the measured window.
        """
        self.lateness_ms.reset()
        self.steps = 0
        self.tokens_emitted = 0

    def snapshot(self) -> dict[str, Any]:
        """Live state for ``/sim/state``."""
        return {
            "slots": self.params.slots,
            "active": self.active,
            "decoding": len(self._decoding),
            "queued": len(self._queue),
            "steps": self.steps,
            "tokens_emitted": self.tokens_emitted,
            "lateness_ms": self.lateness_ms.summary(),
        }

    # -- internals ---------------------------------------------------------------------------------

    def prefill_seconds(self, seq: Sequence, now: float) -> float:
        """The model's prefill of ``seq``: its uncached prompt tokens at ``prefill_tps`` (× scale, multiplier)."""
        uncached = seq.prompt_tokens - seq.cached_tokens
        return uncached / self.params.prefill_tps * self.time_scale * self._multiplier(now)

    def _admit(self, seq: Sequence, now: float) -> None:
        seq.admitted_at = now
        seq.ready_at = now + self.prefill_seconds(seq, now) + seq.extra_delay_s
        self._prefilling[seq.id] = seq

    def _fill_slots(self, now: float) -> None:
        while self._queue and self.active < self.params.slots:
            _, seq = self._queue.popitem(last=False)
            self._admit(seq, now)

    def _poke(self) -> None:
        kick = self._kick
        if kick is not None and not kick.done():
            kick.set_result(None)

    async def _sleep_until(self, when: float, *, wakeable: bool) -> None:
        """Sleep until ``when`` on the engine clock; a wakeable sleep ends early on :meth:`submit`."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        handle = loop.call_later(max(0.0, when - self._clock()), _resolve, fut)
        if wakeable:
            self._kick = fut
        try:
            await fut
        finally:
            handle.cancel()
            if wakeable:
                self._kick = None

    async def _sleep_until_step(self, deadline: float, step_s: float) -> None:
        """Wake at ``deadline`` as exactly as the machine allows.

        Event-loop timers are only millisecond-precise (epoll and libuv round timeouts to whole ms),
        which alone makes every step up to ~1 ms late. So the timer is set a little early, and the
        last stretch is a short blocking sleep. That stretch is capped at 10% of the step (and 1.5 ms),
        so the loop is never held long and sub-millisecond steps (``instant``) never block at all.
        """
        early = min(self.EARLY_WAKE_S, 0.1 * step_s)
        if deadline - early > self._clock():
            await self._sleep_until(deadline - early, wakeable=False)
        remaining = deadline - self._clock()
        if 0.0 < remaining <= 2 * early:
            time.sleep(remaining)  # noqa: ASYNC251 - bounded sub-ms wait, see docstring
        elif remaining > 0.0:
            await self._sleep_until(deadline, wakeable=False)

    def _step_seconds(self, n: int, now: float) -> float:
        p = self.params
        step_ms = p.step_ms + p.step_per_seq_ms * (n - 1)
        if p.jitter > 0:
            step_ms *= self._rng.lognormvariate(0.0, p.jitter)
        return step_ms / 1000.0 * self.time_scale * self._multiplier(now)

    async def _run(self) -> None:
        clock = self._clock
        start: float | None = None
        while not self._closed:
            now = clock()
            if self._prefilling:
                ready = [s for s in self._prefilling.values() if s.ready_at <= now]
                for seq in ready:
                    del self._prefilling[seq.id]
                    self._decoding[seq.id] = seq
            if not self._decoding:
                start = None
                if self._prefilling:
                    await self._sleep_until(min(s.ready_at for s in self._prefilling.values()), wakeable=True)
                else:
                    await self._sleep_until(now + 3600.0, wakeable=True)
                continue
            if start is None or start < now - 0.05:
                # Idle, or far behind: restart the schedule from now instead of bursting to catch up.
                start = now
            batch = list(self._decoding.values())
            step_s = self._step_seconds(len(batch), start)
            deadline = start + step_s
            if deadline > now:
                await self._sleep_until_step(deadline, step_s)
            now = clock()
            self.lateness_ms.record(max(0.0, (now - deadline) * 1000.0))
            self.steps += 1
            self._emit(batch, now)
            start = deadline

    def _emit(self, batch: list[Sequence], now: float) -> None:
        freed = False
        token_fn = self._token_fn
        emitted = 0
        for seq in batch:
            if seq.done:
                continue
            if seq.drip_s and now - seq.last_emit < seq.drip_s:
                continue
            index = len(seq.out)
            script = seq.script
            answer = index - seq.reasoning  # < 0 while thinking
            if script is None and answer >= 0:  # the common case first: pseudo-text answer
                token = token_fn(seq.seed, answer)
            elif answer < 0:
                token = token_fn(seq.seed ^ _REASONING_SALT, index)
            elif script is not None and answer < len(script):
                token = script[answer]
            elif not seq.ignore_eos:
                self._finish(seq, "stop", now)
                freed = True
                continue
            else:
                token = token_fn(seq.seed, answer)
            if seq.stop is not None and answer >= 0 and index >= seq.min_tokens:
                tail = seq.tail + token
                if any(s in tail for s in seq.stop):
                    self._finish(seq, "stop", now)
                    freed = True
                    continue
                seq.tail = tail[-64:]
            seq.out.append(token)
            seq.last_emit = now
            emitted += 1
            if index == 0:
                seq.first_token_at = now
            if answer == 0:
                seq.answer_at = now
            if seq.sink is not None:
                try:
                    seq.sink(seq)
                except Exception:  # a broken client socket must never stop the engine for everyone
                    log.exception("stream sink of %s failed; cancelling it", seq.id)
                    seq.sink = None
                    self._finish(seq, "cancelled", now)
                    freed = True
                    continue
            if index + 1 >= seq.target:
                natural = script is not None and not seq.ignore_eos and answer + 1 >= len(script)
                self._finish(seq, "stop" if natural else seq.length_reason, now)
                freed = True
            elif seq.notify_each and seq.sink is None:
                seq._wake()
        self.tokens_emitted += emitted
        if freed:
            self._fill_slots(now)

    def _finish(self, seq: Sequence, reason: str, now: float) -> None:
        if seq.forced_finish is not None and reason != "cancelled":
            reason = seq.forced_finish
        seq.finish_reason = reason
        seq.finished_at = now
        self._decoding.pop(seq.id, None)
        seq._wake()


_REASONING_SALT = 0x5EA5_0F7E_A5_0F1E
"""Thinking draws its words from another walk of the vocabulary than the answer."""


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
