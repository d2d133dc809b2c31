"""The adaptive router's promises 1–6 and 8, one small function each (docs/routing.md states them).

1. :func:`configured_split` — a route that meets its SLO keeps its configured share: the split among the
   routes a request may use (class preference as ``weighted``), and :class:`SmoothSplit`, which serves a
   split *exactly* (smooth weighted round-robin, as nginx does), not just on average.
2. :func:`probes_only` — a route far over its SLO, or with an open or half-open breaker, gets no client
   request while another route meets its SLO; it stays a last fallback (paced-out healthy routes).
   :func:`readmit_evidence` — its recovery is learnt from probes; :func:`slow_start` — re-admission ramp.
3. :func:`first_token_view` / :func:`far_at_first_token` — attempts still waiting for a first token count
   as soon as they pass the SLO, so a slowdown is seen at first-token speed, not at last-token speed.
4. :func:`even_split` — when every route is over its SLO: weight × relative health ÷ relative queue depth.
5. :func:`prior_ratio` — a route with no evidence of its own starts from the monitor's recent P90.
6. :func:`explanation` — one line per route saying which promise is in force.
8. :func:`quality_worse` / :func:`quality_back` — a route whose quality on a signal is significantly worse
   than the alias's best route's (its Wilson upper bound more than a margin below the best's lower bound,
   both over enough samples) gets no client request while another route takes them, until its lower bound
   is back within the margin (``routing/quality.py`` keeps the counts, the hold and its hysteresis).

Pure functions over numbers: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from tailgate.routing.policies._common import SLO
from tailgate.routing.route import Route
from tailgate.stats.shown import wilson

__all__ = [
    "PROMISES",
    "FirstTokenView",
    "Promise",
    "SmoothSplit",
    "configured_split",
    "even_split",
    "explanation",
    "far_at_first_token",
    "first_token_view",
    "prior_ratio",
    "probes_only",
    "quality_back",
    "quality_worse",
    "readmit_evidence",
    "slow_start",
]

Promise = Literal[
    "configured-split", "over-slo", "probes-only", "slow-start", "even-degradation", "fallback", "quality"
]
PROMISES: tuple[Promise, ...] = (
    "configured-split",
    "over-slo",
    "probes-only",
    "slow-start",
    "even-degradation",
    "fallback",
    "quality",
)
"""The ``promise`` an explanation names: within SLO at the configured share (1); over the SLO, weight moved
off in proportion (1); no client traffic, probes only (2); re-admitted on probe evidence, slow start (2);
every route over its SLO, split evenly (4); weight 0 in the configuration, fallback only; quality
significantly worse than the best route's, no client traffic (8)."""


# -- promise 1: the configured split ---------------------------------------------------------------


def configured_split(routes: Sequence[Route], traffic_class: str | None = None) -> dict[Route, float]:
    """The share of requests of ``traffic_class`` each route gets while every route meets its SLO.

    Routes listing the class share it by their weights; a class no route lists (untagged, ``interactive``
    when no route reserves it) is split among all routes by weight. Weight-0 routes get 0 (fallbacks).
    """
    listed = [r for r in routes if traffic_class and traffic_class in r.classes]
    pool = listed or list(routes)
    total = sum(r.weight for r in pool if r.weight > 0)
    return {r: (r.weight / total if r in pool and r.weight > 0 and total > 0 else 0.0) for r in routes}


class SmoothSplit:
    """Smooth weighted round-robin: over any n picks each key is chosen within one pick of n × its share.

    Random draws only approach a split on average (±1.3 points over 1,000 requests at 80/20); users size
    capacity and second-provider contracts on the split, so the first choice follows it exactly. Each
    pick adds every candidate's weight to its credit, takes the largest credit and charges it the total.
    """

    MAX_GROUPS = 256
    """Groups kept at most: the class comes from a client header, so a new group past this many shares the
    ``overflow`` group passed to ``pick`` (memory stays bounded whatever clients send)."""

    def __init__(self) -> None:
        self._credit: dict[Hashable, dict[Hashable, float]] = {}

    def pick(self, group: Hashable, weights: Sequence[tuple[Hashable, float]], overflow: Hashable = None) -> int | None:
        """Index into ``weights`` (key, weight) of the next pick for ``group``; None when no weight > 0."""
        if group not in self._credit and len(self._credit) >= self.MAX_GROUPS:
            group = overflow
        credit = self._credit.setdefault(group, {})
        total = 0.0
        best, best_credit = None, -math.inf
        for i, (key, w) in enumerate(weights):
            if w <= 0:
                continue
            total += w
            c = credit[key] = credit.get(key, 0.0) + w
            if c > best_credit:
                best, best_credit = i, c
        if best is None:
            return None
        credit[weights[best][0]] -= total
        return best


# -- promise 2: no client request explores ---------------------------------------------------------


def probes_only(demoted: bool, breaker: str, healthy_peer: bool) -> bool:
    """Does a route get no client traffic? Yes when it is demoted (far over its SLO, waiting for probe
    evidence) or its breaker is open or half-open, while another route meets its SLO. A half-open
    breaker's trials are the probes, so it gets none even without a healthy peer."""
    if breaker == "half_open":
        return True
    return healthy_peer and (demoted or breaker == "open")


def readmit_evidence(
    decisions: Iterable[tuple[float, float, bool]], since: float, slo: SLO, needed: int, waiting_late: int
) -> bool:
    """Have the last ``needed`` results sent since ``since`` (probes, and any fallback request) all met the
    SLO, with no attempt still waiting past it? Then a demoted route may come back (slow start).
    ``decisions``: (sent at, latency s — ``inf`` for a fault —, stream?), in the order decided."""
    if waiting_late:
        return False
    recent = [d for d in decisions if d[0] > since]
    if len(recent) < needed:
        return False
    return all(_met(latency, stream, slo) for _, latency, stream in recent[-needed:])


def slow_start(value: float, target: float, elapsed_s: float, ramp_s: float) -> float:
    """A factor climbing towards ``target``: linearly, the whole way (0 → 1) in ``ramp_s``; never past it."""
    if value >= target:
        return target
    return min(target, value + elapsed_s / ramp_s if ramp_s > 0 else target)


# -- promise 3: react at first-token speed ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FirstTokenView:
    """What the last seconds say about a route: attempts decided in the window (first token, answer, fault)
    plus those still waiting past the SLO, how many of them missed it (late or failed), the faults among
    them; and, by send time, the attempts sent in the window (decided or not) and how many already failed."""

    decided: int
    missed: int
    faults: int
    waiting_late: int
    oldest_wait_s: float | None
    sent_recent: int = 0
    faults_recent: int = 0

    @property
    def miss_share(self) -> float:
        return self.missed / self.decided if self.decided else 0.0


def _met(latency: float, stream: bool, slo: SLO) -> bool:
    return latency <= (slo.ttft_p90 if stream else slo.e2e_p90)


def first_token_view(
    decisions: Iterable[tuple[float, float, bool]],
    waiting: Iterable[tuple[float, bool]],
    slo: SLO,
    now: float,
    window_s: float,
) -> FirstTokenView:
    """Judge the attempts decided in the last ``window_s`` and those still waiting.

    ``decisions``: (sent at, latency s — ``inf`` for a fault —, stream?); ``waiting``: (sent at, stream?).
    A stream meets the SLO when its first token came within ``slo.ttft_p90``, a non-stream when its answer
    came within ``slo.e2e_p90``; an attempt still waiting counts as a miss as soon as its wait passes that —
    before it ends, which for a slowed-down provider is several SLOs later. Faults are also counted against
    every attempt *sent* in the last half of the window, waiting ones included: attempts sent before an
    outage that answer after it do not outvote the ones sent after it, and a fault decided fast is not
    overweighted against healthy attempts still on their way.
    """
    decided = missed = faults = late = sent_recent = faults_recent = 0
    since = now - window_s
    sent_since = now - window_s / 2  # faults: the attempts sent in the last half of the window
    for sent, latency, stream in decisions:
        fault = math.isinf(latency)
        if sent >= sent_since:
            sent_recent += 1
            faults_recent += fault
        if (sent if fault else sent + latency) < since:
            continue
        decided += 1
        if fault:
            faults += 1
            missed += 1
        elif not _met(latency, stream, slo):
            missed += 1
    oldest: float | None = None
    for sent, stream in waiting:
        age = now - sent
        sent_recent += sent >= sent_since
        oldest = age if oldest is None else max(oldest, age)
        if not _met(age, stream, slo):
            late += 1
    return FirstTokenView(decided + late, missed + late, faults, late, oldest, sent_recent, faults_recent)


def far_at_first_token(view: FirstTokenView, min_misses: int = 3) -> bool:
    """Far over the SLO by first-token evidence: at least ``min_misses`` recent misses and at least three
    quarters of the recent attempts missed — their P25 is past the P90 target, which for the usual spread
    of LLM latencies (P90 ≈ 1.3–2× P25) puts the P90 at 1.5–2× the SLO or more: far, not a little over —
    or at least ``min_misses`` of the attempts sent in the window failed, and at least half of them."""
    slow = view.missed >= min_misses and 4 * view.missed >= 3 * view.decided
    failing = view.faults_recent >= min_misses and 2 * view.faults_recent >= view.sent_recent
    return slow or failing


# -- promise 4: degrade evenly ---------------------------------------------------------------------


def even_split(
    weights: Sequence[float], health: Sequence[float], in_flight: Sequence[int], floor: float = 0.0
) -> list[float]:
    """Effective weights when every route is over its SLO: ``w × h ÷ ρ``.

    ``h`` is relative health in (0, 1] (SLO ÷ P90, linear: 2× over → 0.5, not 0.06), so the less-bad
    route gets more but not everything; ``ρ = (in_flight + 1) ÷ (expected + 1)`` is its queue relative to
    the share it is given (expected = all in-flight × its share of ``w × h``), so a route whose queue
    grows faster than its share — the one about to collapse — gets less. ``floor`` (a share of the total)
    keeps every route with ``w × h > 0`` in the split. All zero → the configured weights.
    """
    base = [max(0.0, w) * max(0.0, h) for w, h in zip(weights, health, strict=True)]
    total = sum(base)
    if total <= 0:
        return [max(0.0, w) for w in weights]
    queued = sum(in_flight)
    out = []
    for b, q in zip(base, in_flight, strict=True):
        expected = queued * b / total
        out.append(b * (expected + 1.0) / (q + 1.0))
    new_total = sum(out)
    return [max(x, floor * new_total) if b > 0 else 0.0 for x, b in zip(out, base, strict=True)]


# -- promise 5: start from what the monitor knows --------------------------------------------------


def prior_ratio(ttft_p90_s: float | None, error_rate: float | None, slo: SLO) -> tuple[float | None, float | None]:
    """(TTFT P90 ÷ SLO, error rate) from the monitor's recent samples; None where it has too few."""
    ratio = ttft_p90_s / slo.ttft_p90 if ttft_p90_s is not None and slo.ttft_p90 > 0 else None
    return ratio, error_rate


# -- promise 8: route around a degraded model ------------------------------------------------------


class Proportion(Protocol):
    """Successes of trials (``routing.quality.SignalCounts``)."""

    @property
    def successes(self) -> int: ...
    @property
    def trials(self) -> int: ...


def quality_worse(mine: Proportion, best: Proportion, margin: float, min_samples: int) -> bool:
    """Is a route significantly worse than the best route on one signal? Yes when both have ``min_samples``
    trials and the route's 95 % Wilson upper bound is more than ``margin`` (a share, 0.03 = 3 points) below
    the best's lower bound: even read optimistically it is worse than the best read pessimistically, by a
    margin — so two healthy providers whose true rates differ by less than ``margin`` never move, however
    many samples (the bounds close in on the rates, which stay less than ``margin`` apart)."""
    if mine.trials < min_samples or best.trials < min_samples:
        return False
    return wilson(mine.successes, mine.trials)[1] < wilson(best.successes, best.trials)[0] - margin


def quality_back(mine: Proportion, best: Proportion, margin: float) -> bool:
    """Has a held route recovered? Yes when its lower bound (over the samples since it was held) is within
    ``margin`` of the best's lower bound: confidently not worse by more than the margin. Held on the upper
    bound, released on the lower: a route near the threshold stays as it is, it does not flap."""
    return wilson(mine.successes, mine.trials)[0] >= wilson(best.successes, best.trials)[0] - margin


# -- promise 6: explain every decision -------------------------------------------------------------


def explanation(promise: Promise, evidence: str, configured: float, effective: float) -> str:
    """The one line ``/admin/providers`` and the dashboard show for a route: evidence, then what it means.

    ``configured`` and ``effective`` are shares of the alias's untagged traffic (0–1).
    """
    if promise == "configured-split":
        return f"within slo: configured {configured:.0%}"
    if promise == "over-slo":
        return f"{evidence}: {effective:.0%} instead of the configured {configured:.0%}"
    if promise == "probes-only":
        return f"{evidence}: probes only (client requests only if the healthy routes are paced out)"
    if promise == "slow-start":
        pct = effective / configured if configured > 0 else 0.0
        return f"re-admitting: {pct:.0%} of configured, slow start ({evidence})"
    if promise == "quality":
        return f"quality: {evidence}: probes only (client requests only if the other routes cannot take them)"
    if promise == "even-degradation":
        return f"every route over its slo: {effective:.0%} by relative health and queue ({evidence})"
    return "weight 0: fallback only"
