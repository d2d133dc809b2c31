"""Passive health of one provider × upstream model, from every finished call (and every probe).

``ProviderHealth`` keeps, over a sliding window (default 60 s in 12 buckets of 5 s):

- TTFT and E2E histograms (ms) → P50/P90/P99. TTFT is recorded whenever a *streamed* call produced a
  first token (a stream cut after its first token still tells us how fast the provider started; a
  non-streamed call's answer is its E2E, and judging it against a TTFT SLO would call a healthy batch
  route slow); E2E only for successful calls, since a failed call's duration is the failure's.
- counters: ``requests`` (every observed call except ``cancelled``), ``faults`` (calls that failed for
  a reason that is the provider's: see ``PROVIDER_FAULTS``), ``error:<class>`` for every failure class,
  ``429`` (status 429, whatever its class), ``probes`` / ``probe_faults``, and output tokens over
  generation time of streamed successes for tok/s.
- an in-flight count (``begin()`` when an attempt is sent, ``observe()`` when it ends) and two
  peak-EWMA latency estimates (TTFT and E2E, time constant 30 s as in Helicone's balancer) for the
  least-latency policy.
- the attempts still **waiting** for their first token (a stream) or their answer (non-stream), with
  their send times: ``begin()`` returns a handle, ``first_token(handle)`` or ``observe(..., handle=)`` ends
  the wait. ``stalled_s(stream, now)`` is the age of the second-oldest waiting attempt of that kind —
  evidence that exists *before* any slow call completes. A provider that slows five-fold shows up here
  within about one SLO, while the window's P90 only moves once enough slow calls have finished (after
  their whole, now longer, latency). Two attempts, not one, so a single slow request is not a stall.

Probe results feed the same windows and estimates (a probe's latency is the provider's latency) and are
also counted apart, so a snapshot says how much of the evidence came from probes. Probes do not touch
the in-flight count: they are not client traffic.

Neutral outcomes — ``cancelled`` (the client went away), ``http_4xx`` (the request was bad) and
``rate_limited`` (pacing's business, see ``pacing.py``) — are counted by class but are not faults, so
they never lower a provider's health factor nor open its breaker.

Everything reads time through the injected ``clock`` (seconds, monotonic); nothing here does I/O.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from tailgate.stats.ewma import PeakEWMA
from tailgate.stats.window import ROUTING_PRECISION, SlidingWindow
from tailgate.upstream.events import CallResult, ErrorClass

__all__ = ["NEUTRAL_ERRORS", "PROVIDER_FAULTS", "HealthRegistry", "ProviderHealth", "is_fault"]

NEUTRAL_ERRORS: frozenset[ErrorClass] = frozenset({"cancelled", "http_4xx", "rate_limited"})
"""Failure classes that say nothing about the provider's health."""

PROVIDER_FAULTS: frozenset[ErrorClass] = frozenset(
    {
        "connect",
        "timeout_headers",
        "timeout_first_token",
        "timeout_idle",
        "timeout_total",
        "insufficient_quota",
        "http_5xx",
        "http_other",
        "malformed",
        "stream_error",
        "cut",
    }
)
"""Failure classes that count against a provider (error rate, breaker)."""

DECISIONS_KEPT = 512
"""How many decided attempts ``ProviderHealth.decisions`` keeps (the router reads the last few seconds)."""

FAULT_PENALTY_MS = 2000.0
"""A fault feeds the peak-EWMA estimates at least this much (and at least twice the current estimate),
so a provider that fails fast never looks fast to the least-latency policy."""
FAULT_PENALTY_CAP_MS = 30_000.0
"""...but never more than this: doubling on every fault of a long outage would otherwise leave an estimate
that takes many minutes (a 30 s time constant per factor e) to come back after the provider recovers."""


def is_fault(error_class: ErrorClass | None) -> bool:
    """True when ``error_class`` counts against the provider."""
    return error_class is not None and error_class in PROVIDER_FAULTS


class ProviderHealth:
    """Windowed latency and error stats of one provider × upstream model; see the module docstring."""

    def __init__(
        self,
        provider: str,
        model: str,
        *,
        window_s: float = 60.0,
        buckets: int = 12,
        peak_tau_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self.model = model
        self._clock = clock
        self.ttft = SlidingWindow(window_s, buckets, clock, precision=ROUTING_PRECISION)
        self.e2e = SlidingWindow(window_s, buckets, clock, precision=ROUTING_PRECISION)
        """Latencies of successful calls plus every counter (see the module docstring)."""
        self.ttft_peak = PeakEWMA(tau_s=peak_tau_s, clock=clock)
        self.e2e_peak = PeakEWMA(tau_s=peak_tau_s, clock=clock)
        self.in_flight = 0
        self.last_observed: float | None = None
        self._waiting: dict[int, tuple[float, bool]] = {}
        """handle → (send time, stream?) of attempts without a first token (an answer) yet."""
        self._next_handle = 0
        self.decisions: deque[tuple[float, float, bool]] = deque(maxlen=DECISIONS_KEPT)
        """The newest *decided* attempts and probes, in the order decided: (sent at, latency s, stream?). A
        stream is decided at its first token (latency = TTFT), a non-stream at its answer (E2E), a fault when
        it happens (latency ``inf``). First-token evidence for the router (``routing/promises.py``)."""

    # -- writing ---------------------------------------------------------------------------

    def begin(self, *, stream: bool = True) -> int:
        """An attempt was sent to this provider (pair with ``observe`` of its result); returns its handle
        for ``first_token`` / ``observe(handle=)``, which end its wait for a first token."""
        self.in_flight += 1
        handle = self._next_handle = self._next_handle + 1
        self._waiting[handle] = (self._clock(), stream)
        return handle

    def first_token(self, handle: int) -> None:
        """The attempt ``handle`` produced its first token (or, non-streamed, its answer)."""
        waited = self._waiting.pop(handle, None)
        if waited is not None:
            self.decisions.append((waited[0], self._clock() - waited[0], waited[1]))

    def waiting(self) -> list[tuple[float, bool]]:
        """(send time, stream?) of every attempt still waiting for its first token (its answer)."""
        return list(self._waiting.values())

    def stalled_s(self, stream: bool, now: float | None = None) -> float | None:
        """Seconds the second-oldest attempt of this kind has waited for its first token (stream) or its
        answer (non-stream); None with fewer than two waiting. See the module docstring."""
        first = second = float("inf")
        for t, is_stream in self._waiting.values():
            if is_stream is stream:
                if t < first:
                    first, second = t, first
                elif t < second:
                    second = t
        if second == float("inf"):
            return None
        return (self._clock() if now is None else now) - second

    def observe(self, result: CallResult, *, probe: bool = False, handle: int | None = None) -> None:
        """Fold in one finished call; ``probe=True`` for an active probe (not client traffic).

        A non-probe result also ends one in-flight attempt (``begin()`` must have been called for it), and
        its wait when ``handle`` is given.
        """
        if not probe and self.in_flight > 0:
            self.in_flight -= 1
        waited = self._waiting.pop(handle, None) if handle is not None else None
        now = self.last_observed = self._clock()
        if result.error_class is None or is_fault(result.error_class):
            took = (result.e2e_ms or result.ttft_ms or 0.0) / 1000.0
            if is_fault(result.error_class):
                sent, stream = waited if waited is not None else (now - took, result.stream)
                self.decisions.append((sent, math.inf, stream))
            elif waited is not None:  # answered without a first-token event (non-stream): decided now
                self.decisions.append((waited[0], now - waited[0], waited[1]))
            elif probe and result.ttft_ms is not None:
                self.decisions.append((now - took, result.ttft_ms / 1000.0, True))
        w = self.e2e
        cls = result.error_class
        if probe:
            w.incr("probes")
        if cls == "cancelled":
            w.incr("error:cancelled")
            return
        w.incr("requests")
        if result.status == 429:
            w.incr("429")
        if result.ttft_ms is not None:
            if result.stream:  # a non-streamed call's "first token" is its whole answer: its E2E, not a TTFT
                self.ttft.record(result.ttft_ms)
            self.ttft_peak.update(result.ttft_ms)
        elif result.ok and result.e2e_ms is not None:
            # A non-streamed call: its first byte is its whole answer.
            self.ttft_peak.update(result.e2e_ms)
        if result.ok:
            if result.e2e_ms is not None:
                w.record(result.e2e_ms)
                self.e2e_peak.update(result.e2e_ms)
                gen_ms = result.e2e_ms - (result.ttft_ms or 0.0)
                # Streamed calls only: a non-streamed body arrives whole, its E2E − TTFT is the read of
                # the body (≈ 0.05 ms), not generation time.
                if result.stream and result.output_tokens > 1 and gen_ms > 0:
                    w.incr("gen_tokens", result.output_tokens - 1)
                    w.incr("gen_ms", max(1, round(gen_ms)))
            return
        w.incr(f"error:{cls}")
        if is_fault(cls):
            w.incr("faults")
            if probe:
                w.incr("probe_faults")
            for est in (self.ttft_peak, self.e2e_peak):
                est.update(max(FAULT_PENALTY_MS, min(2.0 * est.value, FAULT_PENALTY_CAP_MS), result.e2e_ms or 0.0))

    def forget(self) -> None:
        """Drop the windows and the latency estimates (the in-flight count, the waits and the last seconds'
        ``decisions`` stay): called when the provider's breaker closes after an outage, or the router
        re-admits it on probe evidence, so the degradation's faults and slow samples do not hold its weight
        down for a whole window once it has shown itself healthy again. The decisions stay because they are
        that evidence: the breaker's successful trial probes re-admit the route at once."""
        self.ttft.reset()
        self.e2e.reset()
        self.ttft_peak = PeakEWMA(tau_s=self.ttft_peak.tau_s, clock=self._clock)
        self.e2e_peak = PeakEWMA(tau_s=self.e2e_peak.tau_s, clock=self._clock)

    # -- reading ---------------------------------------------------------------------------

    @property
    def requests(self) -> int:
        """Calls in the window (probes included, cancelled ones not)."""
        return self.e2e.counter("requests")

    @property
    def error_rate(self) -> float:
        """Faults / requests over the window (0.0 with no requests)."""
        c = self.e2e.counters()
        n = c.get("requests", 0)
        return c.get("faults", 0) / n if n else 0.0

    def error_rates(self) -> dict[str, float]:
        """Per failure class: count / requests over the window."""
        c = self.e2e.counters()
        n = c.get("requests", 0) or 1
        return {k.removeprefix("error:"): v / n for k, v in sorted(c.items()) if k.startswith("error:")}

    def p90_s(self, metric: str = "ttft", *, min_samples: int = 1) -> float | None:
        """P90 of ``metric`` (``ttft`` or ``e2e``) in seconds, or None with fewer than ``min_samples``."""
        return self.percentile_s(metric, 90.0, min_samples=min_samples)

    def recent_p90_s(self, metric: str, min_samples: int) -> float | None:
        """P90 of the newest ``min_samples`` or so samples (whole buckets, newest first), in seconds; None
        with fewer in the window. Fresh evidence: a recovered provider shows here before its bad samples
        have left the window."""
        window = self.ttft if metric == "ttft" else self.e2e
        hist = window.recent_histogram(min_samples)
        if hist.count < max(1, min_samples):
            return None
        return hist.percentile(90.0) / 1000.0

    def percentile_s(self, metric: str, q: float, *, min_samples: int = 1) -> float | None:
        window = self.ttft if metric == "ttft" else self.e2e
        hist = window.histogram()
        if hist.count < max(1, min_samples):
            return None
        return hist.percentile(q) / 1000.0

    @property
    def tokens_per_s(self) -> float | None:
        """Decode speed over the window: output tokens after the first / generation seconds."""
        c = self.e2e.counters()
        ms = c.get("gen_ms", 0)
        return c.get("gen_tokens", 0) * 1000.0 / ms if ms else None

    def latency_estimate_ms(self, metric: str = "ttft", default_ms: float = 250.0) -> float:
        """The peak-EWMA estimate in ms (``default_ms`` before any sample)."""
        est = self.ttft_peak if metric == "ttft" else self.e2e_peak
        return est.value if est.is_set else default_ms

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able view for ``/admin/providers`` and metrics (latencies in ms)."""
        c = self.e2e.counters()
        out: dict[str, Any] = {"provider": self.provider, "model": self.model}
        for name, window in (("ttft_ms", self.ttft), ("e2e_ms", self.e2e)):
            hist = window.histogram()
            if hist.count:
                p = hist.percentiles((50.0, 90.0, 99.0))
                out[name] = {"p50": p[50.0], "p90": p[90.0], "p99": p[99.0], "count": hist.count}
            else:
                out[name] = {"p50": None, "p90": None, "p99": None, "count": 0}
        out.update(
            requests=c.get("requests", 0),
            faults=c.get("faults", 0),
            error_rate=self.error_rate,
            errors={k.removeprefix("error:"): v for k, v in sorted(c.items()) if k.startswith("error:")},
            http_429=c.get("429", 0),
            probes=c.get("probes", 0),
            probe_faults=c.get("probe_faults", 0),
            in_flight=self.in_flight,
            tokens_per_s=self.tokens_per_s,
            ttft_estimate_ms=self.ttft_peak.value if self.ttft_peak.is_set else None,
            e2e_estimate_ms=self.e2e_peak.value if self.e2e_peak.is_set else None,
            window_s=self.e2e.width_s,
        )
        return out


class HealthRegistry:
    """``ProviderHealth`` per (provider, upstream model), created on first use with shared settings."""

    def __init__(
        self,
        *,
        window_s: float = 60.0,
        buckets: int = 12,
        peak_tau_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window_s = window_s
        self._buckets = buckets
        self._peak_tau_s = peak_tau_s
        self.clock = clock
        self._by_key: dict[tuple[str, str], ProviderHealth] = {}

    def get(self, provider: str, model: str) -> ProviderHealth:
        key = (provider, model)
        h = self._by_key.get(key)
        if h is None:
            h = self._by_key[key] = ProviderHealth(
                provider,
                model,
                window_s=self._window_s,
                buckets=self._buckets,
                peak_tau_s=self._peak_tau_s,
                clock=self.clock,
            )
        return h

    def __iter__(self) -> Iterator[ProviderHealth]:
        return iter(list(self._by_key.values()))

    def snapshot(self) -> list[dict[str, Any]]:
        return [h.snapshot() for h in self]
