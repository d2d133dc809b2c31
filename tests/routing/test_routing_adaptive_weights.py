"""Adaptive weights over time with a fake clock: healthy = configured, recovery is a slow start, pacer view."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from tailgate.routing import SLO, AdaptivePolicy, BreakerConfig, BreakerRegistry, HealthRegistry, Pacer, Route
from tailgate.upstream.events import CallResult

A = Route("m", "a", "ma", 80)
B = Route("m", "b", "mb", 20)


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def ok(ttft_s: float) -> CallResult:
    return CallResult(200, None, 0.0, True, ttft_ms=ttft_s * 1000, e2e_ms=ttft_s * 2000, output_tokens=5)


def tick(policy: AdaptivePolicy, health: HealthRegistry, clock: Clock, ttft_a: float, seconds: int) -> None:
    """``seconds`` of traffic: each second both providers answer 10 calls, then the policy recomputes."""
    for _ in range(seconds):
        for _ in range(10):
            health.get("a", "ma").observe(ok(ttft_a))
            health.get("b", "mb").observe(ok(0.2))
        policy.order([A, B])
        clock.t += 1.0


def test_healthy_providers_get_their_configured_weights() -> None:
    """With every P90 inside the SLO and no faults, adaptive reproduces 80/20 exactly (factor 1)."""
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = AdaptivePolicy(health, slo=SLO(1.0, 3.0), clock=clock, rng=random.Random(7))
    tick(policy, health, clock, 0.3, 20)
    exp = policy.explain([A, B])
    assert exp["a"]["effective_weight"] == pytest.approx(80.0)
    assert exp["b"]["effective_weight"] == pytest.approx(20.0)
    assert exp["a"]["reason"] == "within slo"
    firsts = Counter(policy.order([A, B])[0].provider for _ in range(10_000))
    assert abs(firsts["a"] / 10_000 - 0.8) < 0.02


def test_degradation_is_followed_in_seconds_and_recovery_is_a_slow_start() -> None:
    """A 5x-over-SLO provider falls to the floor within ~10 s; after it recovers, fresh fast samples bring
    its weight back gradually (no jump back to 80 on the first good second)."""
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = AdaptivePolicy(health, slo=SLO(1.0, 3.0), clock=clock, rng=random.Random(8))
    tick(policy, health, clock, 0.3, 10)
    assert policy.explain([A, B])["a"]["effective_weight"] == pytest.approx(80.0)
    weights = []
    for _ in range(10):
        tick(policy, health, clock, 5.0, 1)
        weights.append(policy.explain([A, B])["a"]["effective_weight"])
    assert weights[0] > 40  # one bad second does not swing it all the way (anti-flapping)
    assert weights[-1] < 2  # lasting: near the floor (1 % of the effective total) within ten seconds
    assert all(x >= y for x, y in itertools.pairwise(weights))  # monotone: no flapping
    tick(policy, health, clock, 0.3, 1)
    # recovered: ten fresh fast samples are believed over the window's slow ones, but slowly (slow start)
    assert 0.2 < policy.explain([A, B])["a"]["effective_weight"] < 30
    tick(policy, health, clock, 0.3, 4)
    assert 50 < policy.explain([A, B])["a"]["effective_weight"] < 80
    tick(policy, health, clock, 0.3, 70)  # the slow samples have left the window
    assert policy.explain([A, B])["a"]["effective_weight"] == pytest.approx(80.0, rel=0.02)


def test_breaker_open_moves_all_traffic_and_floor_keeps_a_trickle() -> None:
    """An open breaker gets nothing; a degraded (closed) provider keeps ~1 % of the traffic."""
    clock = Clock()
    health = HealthRegistry(clock=clock)
    breakers = BreakerRegistry(BreakerConfig(jitter=0.0), clock=clock, rng=random.Random(0))
    policy = AdaptivePolicy(health, breakers=breakers, clock=clock, rng=random.Random(9))
    tick(policy, health, clock, 30.0, 30)
    firsts = Counter(policy.order([A, B])[0].provider for _ in range(10_000))
    assert 0.005 < firsts["a"] / 10_000 < 0.02  # the floor: 1 % of the effective total
    for _ in range(5):
        breakers.get("a").record(False, "http_5xx")
    assert all(policy.order([A, B])[0].provider == "b" for _ in range(1000))
    assert policy.explain([A, B])["a"]["reason"] == "breaker open"


def test_pacer_snapshot_and_limited() -> None:
    """The pacer reports its limits, the paced rate (90 %), what is left, and a pause."""
    clock = Clock()
    pacer = Pacer(rpm=600, tpm=60_000, clock=clock)
    assert pacer.limited
    assert not Pacer(clock=clock).limited
    assert pacer.try_acquire(100)
    snap = pacer.snapshot()
    assert snap["rpm"]["limit"] == 600
    assert snap["rpm"]["paced_at"] == pytest.approx(540)
    assert snap["rpm"]["available"] == pytest.approx(8.0)  # burst 9 (1 s of 540/min) minus one
    assert snap["tpm"]["available"] == pytest.approx(900 - 100)
    pacer.pause_for(2.5)
    assert pacer.snapshot()["paused_for_s"] == pytest.approx(2.5)
    assert not pacer.try_acquire()
    assert pacer.available_in() == pytest.approx(2.5)
    clock.t += 2.5
    assert pacer.try_acquire()


def test_smoothing_is_fast_down_slow_up() -> None:
    """Distrust fast, trust slowly: after a step down of the raw factor the smoothed one goes 60 % of the
    way at least twice as fast as after a step back up (a flapping provider is re-admitted slowly), and
    both moves are monotone (no oscillation)."""
    clock = Clock()
    health = HealthRegistry(window_s=2.0, buckets=2, clock=clock)
    policy = AdaptivePolicy(health, slo=SLO(1.0, 3.0), min_samples=5, clock=clock, rng=random.Random(10))

    def second(ttft_s: float) -> float:
        for _ in range(10):
            health.get("a", "ma").observe(ok(ttft_s))
        clock.t += 1.0
        policy.order([A, B])
        return float(policy.explain([A, B])["a"]["factor"])

    assert [round(second(0.3), 3) for _ in range(4)][-1] == 1.0
    down = [second(5.0) for _ in range(6)]
    up = [second(0.3) for _ in range(20)]
    assert down == sorted(down, reverse=True)
    assert up == sorted(up)
    assert down[-1] < 0.1
    assert up[-1] == pytest.approx(1.0, abs=0.01)
    # seconds from the step until the factor has gone 60 % of the way
    t_down = next(i for i, f in enumerate(down) if f < 1.0 - 0.6 * (1.0 - down[-1]))
    t_up = next(i for i, f in enumerate(up) if f > down[-1] + 0.6 * (1.0 - down[-1]))
    assert t_up >= 2 * max(1, t_down), (down, up)


def test_waiting_attempts_count_before_they_finish() -> None:
    """A provider that stops answering is seen while its attempts still wait: two streams without a first
    token for 3 s push its TTFT to 3 s (3× the SLO) at once; one waiting stream alone is not a stall; a first
    token ends the wait."""
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = AdaptivePolicy(health, slo=SLO(1.0, 3.0), clock=clock, rng=random.Random(4))
    tick(policy, health, clock, 0.3, 10)  # healthy: factor 1
    h = health.get("a", "ma")
    first = h.begin(stream=True)
    clock.t += 3.0
    assert h.stalled_s(True) is None  # one waiting stream is not evidence
    policy.order([A, B])
    assert policy.explain([A, B])["a"]["raw_factor"] == pytest.approx(1.0)
    second = h.begin(stream=True)
    h.begin(stream=False)  # a non-streamed request waits apart
    clock.t += 3.0
    assert h.stalled_s(True) == pytest.approx(3.0)
    assert h.stalled_s(False) is None
    policy.order([A, B])
    exp = policy.explain([A, B])["a"]
    assert exp["raw_factor"] == pytest.approx((1.0 / 3.0) ** 4)
    assert "2 streams waiting 3.00s for a first token" in exp["reason"]
    assert exp["effective_weight"] < 80 * 0.5  # it moved within one recomputation
    h.first_token(first)
    h.observe(ok(6.0), handle=second)
    assert h.stalled_s(True) is None
    assert h.in_flight == 2  # the non-streamed one and the stream whose first token came
