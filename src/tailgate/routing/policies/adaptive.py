"""The ``adaptive`` policy: configured weights scaled by a smoothed health factor from measured P90s.

For each route (provider × upstream model), at most every ``recompute_s`` (1 s) on demand:

- latency factor, per metric ``m`` in (TTFT, E2E) with at least ``min_samples`` samples in the window:
  ``1`` when ``p90_m <= slo_m``, else ``(slo_m / p90_m) ** exponent`` (exponent 4: 1.25× the SLO → ×0.41,
  1.5× → ×0.2, twice → ×0.06: continuous, no cliff, but steep — a provider a few times over its SLO
  next to a healthy one keeps about the floor, so the alias's P99 stays near the healthy provider's);
  the worse of the two counts: ``min(f_ttft, f_e2e)``. Attempts still **waiting** count too: when the
  second-oldest stream without a first token (request without an answer) has waited longer than the
  window's P90, its age stands in for the P90 (``ProviderHealth.stalled_s``) — so a provider that slows
  down is seen within about one SLO, not only after its slow calls have finished. Recovery is believed on
  fresh evidence: when the newest ``min_samples`` samples (``recent_p90_s``; the probes come every
  ``probes.degraded_interval`` while a route is down-weighted) have a lower P90 than the whole window,
  theirs is used — so the slow samples of a past degradation do not hold the weight down for a window;
- error factor: ``max(0, 1 - error_rate / error_rate_zero)`` (``error_rate_zero`` 0.5: 10 % faults →
  ×0.8, 50 % → ×0) over the same window, once it holds ``min_samples`` requests;
- ``raw = f_latency × f_error``; no samples yet → ``raw = 1`` (the prior);
- ``factor`` = a time-based exponential smoothing of ``raw`` over the recomputations, asymmetric: towards a
  lower ``raw`` with time constant ``smoothing_down_tau_s`` (1 s: a recomputation moves it ``1 - exp(-1)``
  ≈ 63 % of the way, so a lasting degradation is followed within 2–3 s), towards a higher one with
  ``smoothing_tau_s`` (3 s: ≈ 28 % per second, a slow start). Distrust fast, trust slowly: a provider
  that flaps is re-admitted slowly, so weights do not oscillate with it. Blips are filtered before
  that: the P90 is over the 60 s window, so a burst of slow calls only counts once it is more than
  10 % of the last minute's calls (and ``min_samples`` of them exist).

Effective weight of a route with configured weight ``w > 0``, among the routes eligible for this request:

- breaker open → 0 and the route is left out (all traffic moves off it);
- breaker half-open (with a free trial slot) → the floor only: trial traffic, no stampede — or nothing when
  the gateway's active probes are on (``half_open_traffic=False``): the probes are the trials, so a
  provider that is still down costs clients no failed attempt;
- a route far over its SLO (smoothed factor < 0.5) while another route meets it (≥ 0.9) → ``w × factor``
  ramped linearly down to 0 at factor 0.25 (so the floor): splitting by factor alone would still send it a
  share large enough to set the alias's P99 (at 2× the SLO, 6 % of its weight);
- a closed breaker whose last attempt failed → ``w × factor`` without the floor: a provider that is down
  but not yet counted out (its breaker needs 5 failures in a row, which a trickle takes long to gather)
  gets no trickle; the probes (or a success) bring the floor back;
- otherwise ``max(w × factor, floor × T)`` where ``T`` = Σ ``w × factor`` over the closed-breaker routes:
  ``floor`` 1 % is about a share of the *traffic*, not of the configured weights — a degraded provider
  keeps a trickle of ~1 % (plus the active probes), so its recovery is seen in the windows while the
  alias's P99 is barely touched. After a recovery the EWMA brings its weight back over a few
  ``smoothing_tau_s`` (a slow start) as the bad samples leave the window.

Routes of weight 0 stay pure fallbacks (last). The order is drawn like ``WeightedPolicy``'s: class
preference first, then a weighted random order by effective weight (first pick ∝ effective weight, then
the fallbacks by effective weight).

The ``interactive`` class (``x-tailgate-class: interactive``), when no route lists it, prefers the
fastest healthy route instead: routes whose effective weight comes from their factor (not the floor, not a
half-open trial) and whose factor says they about meet the SLO (≥ 0.9; if none does, all factor-weighted
routes) go first by ascending ``peak-EWMA TTFT × (in-flight + 1)`` — the least-latency policy's
queue-aware score, so the fastest route does not get the whole herd and slow down under it — the rest
follow in the weighted order. Latency-tolerant ``batch`` work keeps the weights.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailgate.routing.breaker import BreakerRegistry
from tailgate.routing.health import HealthRegistry
from tailgate.routing.policies._common import SLO, eligible, split_by_class, weighted_order
from tailgate.routing.weighted import Route

__all__ = ["AdaptivePolicy", "health_factor"]


def health_factor(
    ttft_p90: float | None,
    e2e_p90: float | None,
    error_rate: float | None,
    slo: SLO,
    *,
    exponent: float = 4.0,
    error_rate_zero: float = 0.5,
) -> tuple[float, str]:
    """The raw factor in [0, 1] and a human-readable reason; ``None`` inputs mean "not enough samples"."""
    f = 1.0
    parts: list[str] = []
    for name, p90, target in (("ttft", ttft_p90, slo.ttft_p90), ("e2e", e2e_p90, slo.e2e_p90)):
        if p90 is not None and p90 > target > 0:
            fm = (target / p90) ** exponent
            parts.append(f"{name} p90 {p90:.2f}s > slo {target:.2f}s (x{fm:.2f})")
            f = min(f, fm)
    if error_rate is not None and error_rate > 0:
        fe = max(0.0, 1.0 - error_rate / error_rate_zero)
        parts.append(f"error rate {error_rate:.0%} (x{fe:.2f})")
        f *= fe
    if not parts:
        known = ttft_p90 is not None or e2e_p90 is not None or error_rate is not None
        parts.append("within slo" if known else "no samples yet (prior 1.0)")
    return f, "; ".join(parts)


def _fresher(window_p90: float | None, recent_p90: float | None) -> float | None:
    """The window's P90, unless the newest ``min_samples`` say the provider is faster now (a recovery is
    believed on fresh evidence; a degradation is seen by the window and by waiting attempts)."""
    if window_p90 is None or recent_p90 is None:
        return window_p90
    return min(window_p90, recent_p90)


@dataclass(slots=True)
class _Factor:
    value: float = 1.0
    """The smoothed factor."""
    computed_at: float = float("-inf")
    raw: float = 1.0
    reason: str = "no samples yet (prior 1.0)"


class AdaptivePolicy:
    """See the module docstring. ``health`` feeds the windows; ``breakers`` (optional) gates providers."""

    name = "adaptive"

    def __init__(
        self,
        health: HealthRegistry,
        *,
        breakers: BreakerRegistry | None = None,
        slo: SLO | None = None,
        slos: Mapping[str, SLO] | None = None,
        exponent: float = 4.0,
        error_rate_zero: float = 0.5,
        min_samples: int = 10,
        floor: float = 0.01,
        recompute_s: float = 1.0,
        smoothing_tau_s: float = 3.0,
        smoothing_down_tau_s: float = 1.0,
        half_open_traffic: bool = True,
        clock: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.health = health
        self.breakers = breakers
        self.slo = slo or SLO()
        self.slos = dict(slos or {})
        self.exponent = exponent
        self.error_rate_zero = error_rate_zero
        self.min_samples = min_samples
        self.floor = floor
        self.recompute_s = recompute_s
        self.smoothing_tau_s = smoothing_tau_s
        self.smoothing_down_tau_s = smoothing_down_tau_s
        self.half_open_traffic = half_open_traffic
        self._clock = clock or health.clock
        self._rng = rng or random.Random()
        self._factors: dict[tuple[str, str, str], _Factor] = {}
        self._seen: dict[tuple[str, str, str], Route] = {}

    def slo_for(self, alias: str) -> SLO:
        return self.slos.get(alias, self.slo)

    def factor(self, route: Route) -> float:
        """The smoothed health factor of ``route`` (recomputed when older than ``recompute_s``)."""
        return self._state(route, self._clock()).value

    def _state(self, route: Route, now: float) -> _Factor:
        key = (route.alias, route.provider, route.model)
        st = self._factors.get(key)
        if st is None:
            st = self._factors[key] = _Factor()
            self._seen[key] = route
        if now - st.computed_at >= self.recompute_s:
            h = self.health.get(route.provider, route.model)
            n = h.requests
            ttft = _fresher(h.p90_s("ttft", min_samples=self.min_samples), h.recent_p90_s("ttft", self.min_samples))
            e2e = _fresher(h.p90_s("e2e", min_samples=self.min_samples), h.recent_p90_s("e2e", self.min_samples))
            # Attempts still waiting count before they finish: a stall is seen within about one SLO.
            stalled = []
            if (wait := h.stalled_s(True, now)) is not None and (ttft is None or wait > ttft):
                ttft = wait
                stalled.append(f"2 streams waiting {wait:.2f}s for a first token")
            if (wait := h.stalled_s(False, now)) is not None and (e2e is None or wait > e2e):
                e2e = wait
                stalled.append(f"2 requests waiting {wait:.2f}s for an answer")
            st.raw, st.reason = health_factor(
                ttft,
                e2e,
                h.error_rate if n >= self.min_samples else None,
                self.slo_for(route.alias),
                exponent=self.exponent,
                error_rate_zero=self.error_rate_zero,
            )
            if stalled and st.raw < 1.0:
                st.reason = f"{st.reason} ({'; '.join(stalled)})"
            if st.computed_at == float("-inf"):
                st.value = st.raw
            else:
                tau = self.smoothing_down_tau_s if st.raw < st.value else self.smoothing_tau_s
                keep = math.exp(-(now - st.computed_at) / tau)
                st.value = st.value * keep + st.raw * (1.0 - keep)
            st.computed_at = now
        return st

    def _effective(self, routes: Sequence[Route], now: float) -> list[tuple[float, _Factor | None, str]]:
        """Per route (aligned with ``routes``, all eligible): (effective weight, factor state, why), where
        why is ``fallback``, ``open``, ``half_open``, ``floor`` or ``factor``. The hot path: no strings built."""
        breakers = self.breakers
        states: list[tuple[_Factor | None, str]] = []
        total = 0.0  # effective weight of the closed-breaker routes before the floor
        for r in routes:
            if r.weight <= 0:
                states.append((None, "fallback"))
                continue
            factor = self._state(r, now)
            if breakers is None:
                state = "closed"
            else:
                breaker = breakers.get(r.provider)
                state = breaker.state
                if state == "closed" and breaker.consecutive_failures > 0:
                    state = "failing"  # no floor while its last attempt failed: the probes watch it
            states.append((factor, state))
            if state in ("closed", "failing"):
                total += r.weight * factor.value
        if total <= 0.0:  # every closed route at factor 0: the floor splits by configured weight
            total = sum(r.weight for r in routes if r.weight > 0)
        floor_w = self.floor * total
        # A route that misses its SLO badly (factor < 0.5) next to one that meets it (factor ≥ 0.9) is
        # ramped down to the floor (factor 0.25): splitting by factor would still send it a share large
        # enough to set the alias's P99.
        healthy_peer = any(st is not None and b == "closed" and st.value >= 0.9 for st, b in states)
        out: list[tuple[float, _Factor | None, str]] = []
        for r, (st, b) in zip(routes, states, strict=True):
            if st is None:
                out.append((0.0, None, "fallback"))
            elif b == "open":
                out.append((0.0, st, "open"))
            elif b == "half_open":
                out.append((floor_w if self.half_open_traffic else 0.0, st, "half_open"))
            else:
                w = r.weight * st.value
                if healthy_peer and st.value < 0.5:
                    w *= max(0.0, (st.value - 0.25) / 0.25)  # 0 at factor 0.25, 1 at 0.5: no cliff
                if b == "failing" and w < floor_w:
                    out.append((w, st, "failing"))
                elif w < floor_w:
                    out.append((floor_w, st, "floor"))
                else:
                    out.append((w, st, "factor"))
        return out

    def _weights(self, routes: Sequence[Route]) -> dict[Route, tuple[float, float, str]]:
        """route → (effective weight, smoothed factor, reason) among ``routes`` (all eligible)."""
        out: dict[Route, tuple[float, float, str]] = {}
        for r, (w, st, why) in zip(routes, self._effective(routes, self._clock()), strict=True):
            f = st.value if st is not None else 1.0
            reason = st.reason if st is not None else ""
            if why == "fallback":
                reason = "weight 0: fallback only"
            elif why == "open":
                reason = "breaker open"
            elif why == "half_open":
                reason = (
                    "breaker half-open: trial traffic at the floor"
                    if self.half_open_traffic
                    else "breaker half-open: the probes are its trials"
                )
            elif why == "floor":
                reason = f"{reason}; floor {self.floor:.0%}"
            elif why == "failing":
                reason = f"{reason}; no floor while its last attempt failed (probes watch for recovery)"
            out[r] = (w, f, reason)
        return out

    def order(
        self, routes: Sequence[Route], traffic_class: str | None = None, exclude: Collection[str] = ()
    ) -> list[Route]:
        """Routes to try, best first (see the module docstring); open breakers and ``exclude`` left out."""
        usable = eligible(routes, exclude, self.breakers)
        eff = self._effective(usable, self._clock())
        by_id = {id(r): e[0] for r, e in zip(usable, eff, strict=True)}
        preferred, rest = split_by_class(usable, traffic_class)

        def weight(r: Route) -> float:
            return by_id[id(r)]

        first = weighted_order(preferred, weight, self._rng)
        if traffic_class == "interactive" and not rest:  # every route may serve it: fastest first
            # Healthy: weight from its factor (not the floor, not a trial) and about within the SLO (≥ 0.9);
            # if none is, every route weighted by its factor.
            healthy = {
                id(r) for r, e in zip(usable, eff, strict=True) if e[2] == "factor" and e[1] and e[1].value >= 0.9
            }
            if not healthy:
                healthy = {id(r) for r, e in zip(usable, eff, strict=True) if e[2] == "factor"}
            inf = float("inf")

            def score(r: Route) -> float:
                if id(r) not in healthy:
                    return inf
                h = self.health.get(r.provider, r.model)
                return h.latency_estimate_ms("ttft") * (h.in_flight + 1)

            first.sort(key=score)  # stable: ties keep the weighted order
            return first
        return first + weighted_order(rest, weight, self._rng)

    def explain(self, routes: Sequence[Route] | None = None) -> dict[str, dict[str, Any]]:
        """provider → configured weight, effective weight, smoothed factor, raw factor, reason, breaker."""
        routes = list(routes) if routes is not None else list(self._seen.values())
        weights = self._weights(routes)
        out: dict[str, dict[str, Any]] = {}
        for r in routes:
            eff, f, reason = weights[r]
            st = self._factors.get((r.alias, r.provider, r.model))
            out[r.provider] = {
                "alias": r.alias,
                "model": r.model,
                "configured_weight": r.weight,
                "effective_weight": eff,
                "factor": f,
                "raw_factor": st.raw if st else 1.0,
                "reason": reason,
                "breaker": self.breakers.get(r.provider).state if self.breakers is not None else None,
            }
        return out
