"""A discrete-event driver for the routing tests: requests, providers, probes — all on a fake clock.

Requests arrive at a constant rate and go to the first route of ``policy.order()``; each provider answers
after its current TTFT (first token), then 0.2 s later (end), or fails at once when it is down. Every
outcome goes to the health registry and the breakers exactly as the gateway sends them (``begin``,
``first_token``, ``observe``, ``record_result``). Optional probes every ``probe_interval`` (1 s while the
policy's ``factor()`` is below 0.5, as the gateway's prober does) feed health and breakers too.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tailgate.routing import AdaptivePolicy, BreakerRegistry, HealthRegistry, Route
from tailgate.upstream.events import CallResult


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def ok(ttft_s: float, e2e_s: float | None = None) -> CallResult:
    e2e = e2e_s if e2e_s is not None else ttft_s + 0.2
    return CallResult(200, None, 0.0, True, ttft_ms=ttft_s * 1000, e2e_ms=e2e * 1000, output_tokens=5)


def fault(error_class: str = "connect") -> CallResult:
    return CallResult(None, error_class, 0.0, True, e2e_ms=10.0)  # type: ignore[arg-type]


@dataclass
class Sent:
    """One client request: when, its class, the route that got it first."""

    t: float
    traffic_class: str | None
    provider: str


@dataclass
class FakeLoad:
    policy: AdaptivePolicy
    health: HealthRegistry
    clock: Clock
    routes: Sequence[Route]
    breakers: BreakerRegistry | None = None
    ttft: dict[str, float | list[float]] = field(default_factory=dict)
    """Provider → its TTFT now (seconds; a list is cycled through, one value per call); default 0.3."""
    down: set[str] = field(default_factory=set)
    probe_interval: float | None = None
    sent: list[Sent] = field(default_factory=list)
    _events: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _next_probe: dict[str, float] = field(default_factory=dict)
    _calls: itertools.count[int] = field(default_factory=itertools.count)

    def latency(self, provider: str) -> float:
        v = self.ttft.get(provider, 0.3)
        return v[next(self._calls) % len(v)] if isinstance(v, list) else v

    def _at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._events, (t, next(self._seq), fn))

    def _advance(self, t: float) -> None:
        while self._events and self._events[0][0] <= t:
            at, _, fn = heapq.heappop(self._events)
            self.clock.t = at
            fn()
        self.clock.t = t
        if self.probe_interval is not None:
            self._probes()

    def _model(self, provider: str) -> str:
        return next(r.model for r in self.routes if r.provider == provider)

    def _outcome(self, provider: str) -> CallResult | None:
        return fault() if provider in self.down else None

    def _probes(self) -> None:
        assert self.probe_interval is not None
        now = self.clock.t
        for r in self.routes:
            due = self._next_probe.setdefault(r.provider, now + self.probe_interval)
            if now < due:
                continue
            h = self.health.get(r.provider, r.model)
            res = self._outcome(r.provider) or ok(self.latency(r.provider))
            # A probe's result arrives after its TTFT; good enough to book it now (it is not client traffic).
            h.observe(res, probe=True)
            if self.breakers is not None:
                self.breakers.get(r.provider).record_result(res)
            fast = self.policy.factor(r) < 0.5
            self._next_probe[r.provider] = now + (1.0 if fast else self.probe_interval)

    def send(self, route: Route) -> None:
        h = self.health.get(route.provider, route.model)
        handle = h.begin(stream=True)
        now = self.clock.t
        failed = self._outcome(route.provider)
        breakers = self.breakers

        def end(res: CallResult) -> None:
            h.observe(res, handle=handle)
            if breakers is not None:
                breakers.get(route.provider).record_result(res)

        if failed is not None:
            self._at(now + 0.01, lambda: end(failed))
            return
        ttft = self.latency(route.provider)
        self._at(now + ttft, lambda: h.first_token(handle))
        self._at(now + ttft + 0.2, lambda: end(ok(ttft)))

    def run(self, seconds: float, rate: float, classes: Sequence[str | None] = (None,)) -> list[Sent]:
        """``seconds`` of traffic at ``rate`` req/s, classes in turn; returns what was sent."""
        start = self.clock.t
        n = round(seconds * rate)
        out = []
        for i in range(n):
            self._advance(start + i / rate)
            cls = classes[i % len(classes)]
            order = self.policy.order(self.routes, cls)
            first = order[0]
            if self.breakers is not None:
                first = next((r for r in order if self.breakers.get(r.provider).allow()), order[0])
            self.send(first)
            s = Sent(self.clock.t, cls, first.provider)
            out.append(s)
        self._advance(start + seconds)
        self.sent += out
        return out


def share(sent: Sequence[Sent], provider: str, lo: float = -1e18, hi: float = 1e18) -> float:
    picks = [s for s in sent if lo <= s.t < hi]
    return sum(1 for s in picks if s.provider == provider) / len(picks) if picks else 0.0
