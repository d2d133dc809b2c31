"""The ``adaptive`` policy: the configured split while routes meet their SLO, weight off those that miss it.

Its promises (docs/routing.md states them; ``routing/promises.py`` holds one function each):

1. A route that meets its SLO keeps its configured share — exactly: the first choice is a smooth weighted
   round-robin over the effective weights (untagged and ``interactive`` by the route weights, a class some
   routes list by theirs). Weight moves only off a route that misses its SLO or fails: factor
   ``(slo / p90) ** exponent`` × ``max(0, 1 - error_rate / error_rate_zero)`` (exponent 4: 1.25× → 0.41).
2. No client request explores: a route *far* over its SLO (P90 ≥ ``far_ratio`` × the SLO, ≥ 25 % faults,
   or the first-token evidence of promise 3), or with an open or half-open breaker, is *demoted*: weight
   0 while another route meets its SLO; it stays a last fallback (for when the healthy routes are paced
   out). It comes back on probe evidence — the last ``readmit_after`` results since the demotion all
   within the SLO — with a slow start: its factor restarts at 0.1 and climbs linearly, 0 → 1 in
   ``slow_start_s``. The gateway probes a route every ``probes.degraded_interval`` while ``factor()`` < 0.5.
   A route demoted again within a minute of its re-admission (flapping) needs 4× the evidence next time.
3. React at first-token speed: attempts decided in the last ``fast_window_s`` (first token, answer or
   fault) plus those still waiting past the SLO; when at least ``fast_min_misses`` and three quarters of
   them missed it, the route is far over. Downward moves of the factor are smoothed over
   ``smoothing_down_tau_s`` (1 s); upward ones are the linear slow start.
4. When no route meets its SLO, the split is ``promises.even_split``: weight × relative health (SLO ÷ P90,
   linear) ÷ relative queue depth, each route keeping at least ``floor`` of the traffic.
5. A route with no evidence of its own (no sample in the window, nothing observed for ``prior_idle_s``)
   is judged by the monitor's recent TTFT P90 and error rate (``seed_priors``, from ``recent_priors()``).
6. ``explain()`` says per route which promise is in force and why.
8. With ``quality`` (a ``routing.quality.QualityBoard``), a route whose quality on a signal is significantly
   worse than the alias's best route's gets weight 0 (promise ``quality``, a last fallback like a demoted
   route) while another route keeps weight; a released route comes back on a slow start. If every route
   with weight would be held, nothing moves on quality.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailgate.routing.affinity import Sticky
from tailgate.routing.breaker import BreakerRegistry
from tailgate.routing.health import HealthRegistry
from tailgate.routing.policies._common import SLO, eligible, split_by_class, weighted_order
from tailgate.routing.promises import (
    Promise,
    SmoothSplit,
    configured_split,
    even_split,
    explanation,
    far_at_first_token,
    first_token_view,
    prior_ratio,
    probes_only,
    readmit_evidence,
    slow_start,
)
from tailgate.routing.quality import QualityBoard, QualityVerdict
from tailgate.routing.route import Route

__all__ = ["AdaptivePolicy", "health_factor"]

READMIT_START = 0.1
"""The factor a demoted route restarts from when probes show it healthy (then the slow start)."""
FLAP_WINDOW_S = 60.0
"""A route demoted again within this long of its re-admission is flapping: each such strike quadruples the
probe evidence it needs next time (3, 12, then ``MAX_READMIT``), like a breaker's cool-down but steeper: a
provider that flaps every 10 s is then kept out until it has been good for 12 s, not re-admitted each spell."""
MAX_READMIT = 30
MAX_PLANS = 1024
"""Kept ``order`` plans (alias × traffic class × excluded providers); the classes come from clients."""
MEETS_ERROR_FACTOR = 0.9
"""A route with an error factor below this (over 5 % faults at the defaults) does not meet its SLO."""


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
class _Judged:
    """What the policy last concluded about one route (alias × provider × model)."""

    value: float = 1.0
    """The smoothed factor: down with ``smoothing_down_tau_s``, up by the slow start."""
    raw: float = 1.0
    computed_at: float = -math.inf
    ratio: float = 0.0
    """The worst P90 ÷ SLO (waiting attempts included); 0 without samples."""
    f_error: float = 1.0
    evidence: str = "no samples yet (prior 1.0)"
    source: str = "none"
    """Where the evidence came from: ``window``, ``first-token``, ``prior`` or ``none``."""
    demoted_since: float | None = None
    readmitted_at: float = -math.inf
    strikes: int = 0
    """Demotions in a row that came within ``FLAP_WINDOW_S`` of a re-admission (a flapping route)."""
    breaker: str = "closed"

    @property
    def demoted(self) -> bool:
        return self.demoted_since is not None

    @property
    def meets(self) -> bool:
        """Meets its SLO now: not demoted, breaker closed, P90s within it, errors under ~5 %."""
        return (
            not self.demoted and self.breaker == "closed" and self.ratio <= 1.0 and self.f_error >= MEETS_ERROR_FACTOR
        )


@dataclass(slots=True)
class _Plan:
    """``order``'s view of an alias's judgements: the same until ``until`` while no breaker moves."""

    routes: Sequence[Route]
    until: float
    breaker_changes: int
    live_pref: list[Route]
    keys: list[tuple[tuple[str, str], float]]
    group: tuple[str, str | None]
    weight: dict[int, float]
    live_rest: list[Route]
    dead: list[Route]

    def fresh(self, routes: Sequence[Route], now: float, breakers: BreakerRegistry | None) -> bool:
        changes = breakers.changes if breakers is not None else 0
        return self.routes is routes and now < self.until and changes == self.breaker_changes


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
        recompute_s: float = 0.25,
        smoothing_down_tau_s: float = 1.0,
        far_ratio: float = 2.0,
        fast_window_s: float = 1.5,
        fast_min_misses: int = 3,
        readmit_after: int = 3,
        slow_start_s: float = 15.0,
        prior_idle_s: float = 60.0,
        quality: QualityBoard | None = None,
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
        self.smoothing_down_tau_s = smoothing_down_tau_s
        self.far_ratio = far_ratio
        self.fast_window_s = fast_window_s
        self.fast_min_misses = fast_min_misses
        self.readmit_after = readmit_after
        self.slow_start_s = slow_start_s
        self.prior_idle_s = prior_idle_s
        self.quality = quality
        self._clock = clock or health.clock
        self._rng = rng or random.Random()
        self._split = SmoothSplit()
        self._judged: dict[tuple[str, str, str], _Judged] = {}
        self._seen: dict[tuple[str, str, str], Route] = {}
        self._priors: dict[tuple[str, str], tuple[float | None, float | None, int]] = {}
        self._plans: dict[tuple[int, str | None, frozenset[str] | None], _Plan] = {}

    def slo_for(self, alias: str) -> SLO:
        return self.slos.get(alias, self.slo)

    # -- promise 5: priors -----------------------------------------------------------------------

    def seed_priors(self, priors: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
        """(provider, upstream model) → the monitor's ``recent_priors()`` entry (``ttft_p90_ms``,
        ``error_rate``, ``n``). Used for a route until it has evidence of its own."""
        for key, p in priors.items():
            ttft_ms = p.get("ttft_p90_ms")
            self._priors[key] = (
                ttft_ms / 1000.0 if ttft_ms is not None else None,
                p.get("error_rate"),
                int(p.get("n") or 0),
            )
        for st in self._judged.values():
            st.computed_at = -math.inf  # judge again with the priors
        self._plans.clear()

    # -- judging one route -----------------------------------------------------------------------

    def factor(self, route: Route) -> float:
        """The route's factor now: 0 while demoted or its breaker is not closed (the gateway probes a
        route often while this is below 0.5)."""
        st = self._judge(route, self._clock())
        return 0.0 if st.demoted or st.breaker != "closed" else st.value

    def demoted(self, route: Route) -> bool:
        """Is the route out of the client split (far over its SLO, waiting for probe evidence)?"""
        return self._judge(route, self._clock()).demoted

    def _judge(self, route: Route, now: float) -> _Judged:
        key = (route.alias, route.provider, route.model)
        st = self._judged.get(key)
        if st is None:
            st = self._judged[key] = _Judged()
            self._seen[key] = route
        breaker = self.breakers.get(route.provider).state if self.breakers is not None else "closed"
        if now - st.computed_at < self.recompute_s and breaker == st.breaker:
            return st  # a breaker transition is acted on at once, the rest at most every recompute_s
        h = self.health.get(route.provider, route.model)
        slo = self.slo_for(route.alias)
        st.breaker = breaker
        view = first_token_view(h.decisions, h.waiting(), slo, now, self.fast_window_s)
        ttft = _fresher(h.p90_s("ttft", min_samples=self.min_samples), h.recent_p90_s("ttft", self.min_samples))
        e2e = _fresher(h.p90_s("e2e", min_samples=self.min_samples), h.recent_p90_s("e2e", self.min_samples))
        err = h.error_rate if h.requests >= self.min_samples else None
        source = "window" if (ttft, e2e, err) != (None, None, None) else "none"
        prior = self._priors.get((route.provider, route.model))
        idle = h.last_observed is None or now - h.last_observed > self.prior_idle_s
        if source == "none" and prior is not None and idle:
            ratio, err = prior_ratio(prior[0], prior[1], slo)
            ttft = ratio * slo.ttft_p90 if ratio is not None else None
            source = "prior"
        # Attempts still waiting count before they finish (promise 3) through the first-token view below, as
        # a share of the recent attempts: two independent slow requests in flight at once are not a stall.
        raw, evidence = health_factor(ttft, e2e, err, slo, exponent=self.exponent, error_rate_zero=self.error_rate_zero)
        if source == "prior":
            evidence = f"monitor's recent {evidence} (n={prior[2] if prior else 0})"
        st.ratio = max(
            ttft / slo.ttft_p90 if ttft is not None and slo.ttft_p90 > 0 else 0.0,
            e2e / slo.e2e_p90 if e2e is not None and slo.e2e_p90 > 0 else 0.0,
        )
        st.f_error = max(0.0, 1.0 - err / self.error_rate_zero) if err else 1.0
        fast_far = far_at_first_token(view, self.fast_min_misses)
        if fast_far:
            st.ratio = max(st.ratio, self.far_ratio)
            if view.sent_recent:
                st.f_error = min(st.f_error, 1.0 - view.faults_recent / view.sent_recent)
            raw = min(raw, (1.0 / self.far_ratio) ** self.exponent * st.f_error)
            evidence = (
                f"{view.missed} of {view.decided} attempts in the last {self.fast_window_s:g}s "
                f"past the slo or failed ({view.faults_recent} of {view.sent_recent} sent failed)"
            )
            source = "first-token"
        far = fast_far or st.ratio >= self.far_ratio or st.f_error < 0.5
        if st.breaker != "closed":
            if st.demoted_since is None:
                st.demoted_since = now
                st.strikes = st.strikes + 1 if now - st.readmitted_at < FLAP_WINDOW_S else 0
            evidence = f"breaker {st.breaker.replace('_', '-')}"
        elif st.demoted_since is not None:
            needed = min(MAX_READMIT, self.readmit_after * 4**st.strikes)
            if readmit_evidence(h.decisions, st.demoted_since, slo, needed, view.waiting_late):
                # Probes (or fallback requests) show it healthy: back in, from a slow start. Its window still
                # holds the degradation's samples; they no longer describe it.
                st.demoted_since, st.readmitted_at = None, now
                h.forget()
                st.value, raw, st.ratio, st.f_error = READMIT_START, 1.0, 0.0, 1.0
                evidence = f"last {needed} probes within the slo"
                source = "probes"
            else:
                evidence = f"{evidence}; waiting for {needed} probes in a row within the slo"
        elif far:
            st.demoted_since = now
            st.strikes = st.strikes + 1 if now - st.readmitted_at < FLAP_WINDOW_S else 0
        if st.computed_at == -math.inf:
            st.value = raw
        elif raw < st.value:
            keep = math.exp(-(now - st.computed_at) / self.smoothing_down_tau_s)
            st.value = st.value * keep + raw * (1.0 - keep)
        else:
            st.value = slow_start(st.value, raw, now - st.computed_at, self.slow_start_s)
        st.raw, st.evidence, st.source, st.computed_at = raw, evidence, source, now
        return st

    # -- the split -------------------------------------------------------------------------------

    def _effective(
        self, routes: Sequence[Route], now: float, alias_routes: Sequence[Route] | None = None
    ) -> list[tuple[float, _Judged | None, Promise, str | None]]:
        """Per route (aligned with ``routes``): (effective weight, judgement, promise in force, evidence when
        promise 8 speaks instead of the judgement). Quality is judged among ``alias_routes`` (all the alias's
        routes, not only those a request may use: a retry that excludes the best route does not release a
        held one)."""
        latency = self._latency_effective(routes, now)
        if self.quality is None:
            return [(w, st, p, None) for w, st, p in latency]
        verdicts = self.quality.judge(alias_routes if alias_routes is not None else routes, now)
        return _apply_quality(routes, latency, verdicts)

    def _latency_effective(self, routes: Sequence[Route], now: float) -> list[tuple[float, _Judged | None, Promise]]:
        """Promises 1–4: per route (aligned with ``routes``): (effective weight, judgement, promise in force)."""
        judged = [self._judge(r, now) if r.weight > 0 else None for r in routes]
        healthy_peer = any(st is not None and st.meets for st in judged)
        out: list[tuple[float, _Judged | None, Promise]] = []
        if healthy_peer:  # promises 1 and 2
            for r, st in zip(routes, judged, strict=True):
                if st is None:
                    out.append((0.0, None, "fallback"))
                elif probes_only(st.demoted, st.breaker, True):
                    out.append((0.0, st, "probes-only"))
                elif st.meets:
                    out.append((r.weight * st.value, st, "configured-split" if st.value >= 1.0 else "slow-start"))
                else:
                    out.append((r.weight * st.value, st, "over-slo"))
            return out
        # Promise 4: no route meets its SLO. Half-open and open breakers stay out (probes are their trials).
        live = [(i, st) for i, st in enumerate(judged) if st is not None and st.breaker == "closed"]
        health = [st.f_error / max(1.0, st.ratio) for _, st in live]
        in_flight = [self.health.get(routes[i].provider, routes[i].model).in_flight for i, _ in live]
        weights = even_split([routes[i].weight for i, _ in live], health, in_flight, self.floor)
        by_index = {i: w for (i, _), w in zip(live, weights, strict=True)}
        for i, st in enumerate(judged):
            if st is None:
                out.append((0.0, None, "fallback"))
            elif i in by_index:
                out.append((by_index[i], st, "even-degradation"))
            else:
                out.append((0.0, st, "probes-only"))
        return out

    def order(
        self,
        routes: Sequence[Route],
        traffic_class: str | None = None,
        exclude: Collection[str] = (),
        sticky: Sticky | None = None,
    ) -> list[Route]:
        """Routes to try, best first: the first by the exact split, the other routes with weight as
        fallbacks (class preference first), then the zero-weight ones (demoted, weight 0). With ``sticky``
        (a conversation's affinity key), the live routes go in its weighted rendezvous order instead."""
        now = self._clock()
        key = (id(routes), traffic_class, frozenset(exclude) if exclude else None)
        plan = self._plans.get(key)
        if plan is None or not plan.fresh(routes, now, self.breakers):
            plan = self._plan(routes, traffic_class, exclude, now)
            if plan.until > now:
                if len(self._plans) >= MAX_PLANS:
                    self._plans.clear()
                self._plans[key] = plan
        weight = plan.weight
        if sticky is not None and plan.live_pref:
            # Promise 7: the conversation's route by weighted rendezvous over the same admitted routes and
            # effective weights the split would use; the fallbacks in the same key's order.
            def w(r: Route) -> float:
                return weight[id(r)]

            return sticky.first(plan.live_pref, w) + sticky.rest(plan.live_rest, w) + plan.dead
        out: list[Route] = []
        live_pref = list(plan.live_pref)
        if live_pref:
            pick = self._split.pick(plan.group, plan.keys, overflow=(plan.group[0], None))
            if pick is not None:
                out.append(live_pref.pop(pick))
        out += weighted_order(live_pref, lambda r: weight[id(r)], self._rng)
        out += weighted_order(plan.live_rest, lambda r: weight[id(r)], self._rng)
        return out + plan.dead

    def _plan(self, routes: Sequence[Route], traffic_class: str | None, exclude: Collection[str], now: float) -> _Plan:
        """What ``order`` needs of the judgements, kept until the first of them is due again (``recompute_s``)
        while every breaker of the alias stays closed and the split is by configured weights (promises 1–2;
        promise 4 weighs queue depth, which moves with every request: never kept)."""
        usable = eligible(routes, exclude, self.breakers)
        eff = self._effective(usable, now, routes)
        weight = {id(r): e[0] for r, e in zip(usable, eff, strict=True)}
        preferred, rest = split_by_class(usable, traffic_class)
        live_pref = [r for r in preferred if weight[id(r)] > 0]
        live_rest = [r for r in rest if weight[id(r)] > 0]
        dead = [r for r in preferred if weight[id(r)] <= 0] + [r for r in rest if weight[id(r)] <= 0]
        if not live_pref:
            live_pref, live_rest = live_rest, []
        group = (usable[0].alias if usable else "", traffic_class)  # each class its own exact split
        keys = [((r.provider, r.model), weight[id(r)]) for r in live_pref]
        until = -math.inf
        judged = [st for _, st, _, _ in eff if st is not None]
        configured = all(promise != "even-degradation" for _, _, promise, _ in eff)
        if configured and judged and (self.breakers is None or self.breakers.all_closed(r.provider for r in routes)):
            until = min(st.computed_at for st in judged) + self.recompute_s
        changes = self.breakers.changes if self.breakers is not None else 0
        return _Plan(routes, until, changes, live_pref, keys, group, weight, live_rest, dead)

    def explain(self, routes: Sequence[Route] | None = None) -> dict[str, dict[str, Any]]:
        """provider → configured and effective weight and share, factor, promise in force, reason, breaker."""
        routes = list(routes) if routes is not None else list(self._seen.values())
        eff = self._effective(routes, self._clock())
        configured = configured_split(routes)
        total = sum(e[0] for e in eff)
        out: dict[str, dict[str, Any]] = {}
        for r, (w, st, promise, quality) in zip(routes, eff, strict=True):
            share = w / total if total > 0 else 0.0
            evidence = quality if quality is not None else st.evidence if st is not None else ""
            out[r.provider] = {
                "alias": r.alias,
                "model": r.model,
                "configured_weight": r.weight,
                "effective_weight": w,
                "configured_share": configured[r],
                "effective_share": share,
                "factor": st.value if st is not None else 1.0,
                "raw_factor": st.raw if st is not None else 1.0,
                "promise": promise,
                "reason": explanation(promise, evidence, configured[r], share),
                "evidence": evidence,
                "source": st.source if st is not None else "none",
                "breaker": self.breakers.get(r.provider).state if self.breakers is not None else None,
            }
        return out


def _apply_quality(
    routes: Sequence[Route],
    latency: Sequence[tuple[float, _Judged | None, Promise]],
    verdicts: Mapping[Route, QualityVerdict],
) -> list[tuple[float, _Judged | None, Promise, str | None]]:
    """Promise 8 over promises 1–4's split: a held route's weight → 0 while a route not held keeps weight (never
    every route); a released one's weight × its slow-start factor."""
    held = [verdicts[r].held for r in routes]
    others_live = any(w > 0 and not h for (w, _, _), h in zip(latency, held, strict=True))
    out: list[tuple[float, _Judged | None, Promise, str | None]] = []
    for r, (w, st, promise), h in zip(routes, latency, held, strict=True):
        v = verdicts[r]
        if h and others_live and w > 0:
            out.append((0.0, st, "quality", v.evidence))
        elif h and w > 0:
            note = f"{v.evidence} — kept: no other route can take its traffic"
            out.append((w, st, promise, f"{st.evidence}; {note}" if st is not None else note))
        elif v.factor < 1.0 and w > 0:
            out.append((w * v.factor, st, "slow-start", f"quality re-admitted ({v.evidence})"))
        else:
            out.append((w, st, promise, None))
    return out
