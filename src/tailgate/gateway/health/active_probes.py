"""Active probes: a tiny standardized request per provider × upstream model, on an interval.

Passive stats only see providers that get traffic. A provider the adaptive policy has cut to its 1 %
floor, or whose breaker is open, gets little or none, so its recovery would go unseen; probes keep
evidence flowing. Each probe is a streamed chat completion (``PROBE_PROMPT``, ``max_tokens`` 8,
temperature 0) sent through the measurement core (``tailgate.upstream.call``), so its TTFT and E2E mean
what the gateway's mean. Its result

- feeds the provider's health windows flagged as a probe (``ProviderHealth.observe(result, probe=True)``),
- is an outcome for the provider's circuit breaker (in half-open it counts as a trial: three successful
  probes close a recovered provider's breaker without risking client requests),
- is counted in ``tailgate_probes_total{provider, outcome}``.

Timing: every ``interval`` × (1 ± ``jitter`` × u) per target (the first one interval after start, so a
gateway that starts and stops at once sends none), every ``degraded_interval`` (1 s) instead while the
``degraded(provider, model)`` callback says the router holds the target down (adaptive factor < 0.5:
demoted, or re-admitted and still early in its slow start) — looked at every ``degraded_interval``, so a
route demoted in the middle of a 10 s wait is probed within a second;
when a breaker opens, the probe waits for its cool-down, and while it is half-open probes go back to
back (``half_open_gap`` apart) until it closes or re-opens. A probe takes a slot from the provider's
pacer (a probe never causes a 429 of its own; when the pacer is full the probe is skipped, outcome
``paced``); drained providers are not probed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter

from tailgate._runtime import stop_task
from tailgate.config.schema import ProbesConfig
from tailgate.routing import BreakerRegistry, HealthRegistry, Transition
from tailgate.upstream import CallResult, call

if TYPE_CHECKING:
    from tailgate.gateway.request_path.providers import ProviderState

__all__ = ["PROBE_PROMPT", "ProbeStats", "Prober"]

PROBE_PROMPT = "Reply with the single word: ok"
_PROMPT_TOKENS = 16  # the probe's prompt, rounded up, for the provider's TPM pacer
_MAX_PAUSE_S = 300.0

log = logging.getLogger("tailgate.gateway.health.active_probes")


@dataclass(slots=True)
class ProbeStats:
    """What ``/admin/providers`` shows about one target's probes (since start)."""

    sent: int = 0
    ok: int = 0
    faults: int = 0
    paced: int = 0
    last_outcome: str | None = None
    last_ttft_ms: float | None = None
    last_e2e_ms: float | None = None
    last_at: float | None = None
    """Wall-clock Unix time of the last probe's answer."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "ok": self.ok,
            "faults": self.faults,
            "paced": self.paced,
            "last_outcome": self.last_outcome,
            "last_ttft_ms": self.last_ttft_ms,
            "last_e2e_ms": self.last_e2e_ms,
            "last_at": self.last_at,
        }


class Prober:
    """Probe loops for ``targets`` (provider, upstream model); ``start()`` in the loop, ``await close()``."""

    def __init__(
        self,
        providers: Mapping[str, ProviderState],
        targets: Sequence[tuple[str, str]],
        *,
        health: HealthRegistry,
        breakers: BreakerRegistry,
        config: ProbesConfig,
        counter: Counter,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        degraded: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.providers = providers
        self.degraded = degraded
        self.targets = list(dict.fromkeys(targets))
        self.health = health
        self.breakers = breakers
        self.config = config
        self._clock = clock
        self._rng = rng or random.Random()
        self.counter = counter
        """``tailgate_probes`` by provider and outcome (made by the metrics owner)."""
        self.stats: dict[tuple[str, str], ProbeStats] = {t: ProbeStats() for t in self.targets}
        self._wake: dict[tuple[str, str], asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start one loop per target (call inside the running event loop)."""
        if not self.config.enabled or self._tasks:
            return
        for target in self.targets:
            self._wake[target] = asyncio.Event()
            self._tasks.append(asyncio.create_task(self._loop(*target), name=f"probe {target[0]}/{target[1]}"))

    async def close(self) -> None:
        """Cancel every loop and wait for them (a probe in flight is cancelled, its connection released)."""
        tasks, self._tasks = self._tasks, []
        await asyncio.gather(*(stop_task(task) for task in tasks))

    async def retarget(
        self,
        providers: Mapping[str, ProviderState],
        config: ProbesConfig,
        targets: Sequence[tuple[str, str]],
        degraded: Callable[[str, str], bool] | None,
    ) -> None:
        """After a reload: stop, take the new providers, settings, targets and the new route table's ``degraded``
        (a target's stats stay), start."""
        await self.close()
        self.providers = providers
        self.config = config
        self.degraded = degraded
        self.targets = list(dict.fromkeys(targets))
        for t in self.targets:
            self.stats.setdefault(t, ProbeStats())
        self.start()

    def on_transition(self, provider: str, transition: Transition) -> None:
        """A breaker moved: wake the provider's loops so they re-plan (wait out an open, probe a half-open)."""
        for (name, _), event in self._wake.items():
            if name == provider:
                event.set()

    # -- the loop ----------------------------------------------------------------------------

    def _interval(self, provider: str = "", model: str = "") -> float:
        c = self.config
        base = c.interval
        if self.degraded is not None and c.degraded_interval < base and self.degraded(provider, model):
            base = c.degraded_interval
        return base * (1.0 + c.jitter * (2.0 * self._rng.random() - 1.0))

    async def _loop(self, provider: str, model: str) -> None:
        breaker = self.breakers.get(provider)
        event = self._wake[(provider, model)]
        last = self._clock()
        due = last + self._interval()
        fast = self.config.degraded_interval
        while True:
            state = breaker.state  # reading it turns an open breaker half-open once its cool-down is over
            now = self._clock()
            if state == "half_open":
                wait = 0.0
            elif state == "open":
                wait = breaker.retry_in()
            else:
                if self.degraded is not None and fast < self.config.interval and self.degraded(provider, model):
                    due = min(due, last + fast)  # held down by the router: probe it often from now on
                wait = due - now
                if self.degraded is not None:
                    wait = min(wait, fast)  # look again whether the router holds it down
            if wait > 0:
                event.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await event.wait()
                continue
            try:
                await self.probe(provider, model)
            except Exception:  # a bug in one probe must not end the loop (no more probes, silently)
                log.exception("probe of %s/%s failed", provider, model)
            last = self._clock()
            due = last + self._interval(provider, model)
            if breaker.state == "half_open":
                await asyncio.sleep(self.config.half_open_gap)

    async def probe(self, provider: str, model: str) -> CallResult | None:
        """Send one probe now and feed its result everywhere; None when skipped (drained or paced)."""
        p = self.providers[provider]
        stats = self.stats.setdefault((provider, model), ProbeStats())
        if p.drained:
            return None
        if not p.pacer.try_acquire(_PROMPT_TOKENS + self.config.max_tokens):
            stats.paced += 1
            self.counter.labels(provider, "paced").inc()
            return None
        payload = {
            "model": model,
            "messages": [{"role": "user", "content": PROBE_PROMPT}],
            "max_tokens": self.config.max_tokens,
            "temperature": 0,
            "stream": True,
        }
        stats.sent += 1
        result = await self._send(p, payload)
        self.health.get(provider, model).observe(result, probe=True)
        self.breakers.get(provider).record_result(result)
        outcome = result.error_class or "ok"
        self.counter.labels(provider, outcome).inc()
        if result.ok:
            stats.ok += 1
        elif outcome not in ("cancelled", "http_4xx", "rate_limited"):
            stats.faults += 1
        if result.error_class == "rate_limited":
            p.pause(min(_MAX_PAUSE_S, result.retry_after_s if result.retry_after_s is not None else 1.0))
        stats.last_outcome = outcome
        stats.last_ttft_ms = result.ttft_ms
        stats.last_e2e_ms = result.e2e_ms
        stats.last_at = time.time()
        return result

    async def _send(self, p: ProviderState, payload: Mapping[str, Any]) -> CallResult:
        timeout = self.config.timeout
        started = time.time()
        try:
            async with asyncio.timeout(timeout):
                async with call(
                    p.client,
                    "/chat/completions",
                    payload,
                    stream=True,
                    client_wants_usage=False,
                    request_id=f"probe-{uuid.uuid4().hex[:16]}",
                ) as c:
                    async for _ in c:
                        pass
        except TimeoutError:
            # The call saw a cancellation (neutral); for health a probe that never finished is a timeout.
            return CallResult(
                status=None,
                error_class="timeout_total",
                started_at=started,
                stream=True,
                detail=f"probe did not finish within {timeout:g}s",
                e2e_ms=timeout * 1000.0,
            )
        assert c.result is not None
        return c.result
