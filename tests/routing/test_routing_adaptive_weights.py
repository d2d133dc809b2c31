"""Adaptive weights over time with a fake clock: healthy = configured, recovery is a slow start, pacer view."""

from __future__ import annotations

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
    assert exp["a"]["reason"] == "within slo: configured 80%"
    firsts = Counter(policy.order([A, B])[0].provider for _ in range(10_000))
    assert firsts["a"] == 8000  # exactly: a smooth weighted round-robin, not a random draw


def test_breaker_open_moves_all_traffic() -> None:
    """An open breaker gets nothing; a far-degraded (closed) provider gets nothing either (no trickle)."""
    clock = Clock()
    health = HealthRegistry(clock=clock)
    breakers = BreakerRegistry(BreakerConfig(jitter=0.0), clock=clock, rng=random.Random(0))
    policy = AdaptivePolicy(health, breakers=breakers, clock=clock, rng=random.Random(9))
    tick(policy, health, clock, 30.0, 30)
    assert all(policy.order([A, B])[0].provider == "b" for _ in range(1000))
    for _ in range(5):
        breakers.get("a").record(False, "http_5xx")
    assert all(policy.order([A, B])[0].provider == "b" for _ in range(1000))
    clock.t += 1.0
    assert policy.explain([A, B])["a"]["evidence"] == "breaker open"


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


def test_waiting_attempts_count_before_they_finish() -> None:
    """A provider that stops answering is seen while its attempts still wait: three streams without a first
    token past the SLO, and nothing answered since, make it far over at once (probes only); one waiting
    stream alone, or two among many that answered in time, are not a stall; a first token ends the wait."""
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = AdaptivePolicy(health, slo=SLO(1.0, 3.0), clock=clock, rng=random.Random(4))
    tick(policy, health, clock, 0.3, 10)  # healthy: factor 1
    h = health.get("a", "ma")
    first = h.begin(stream=True)
    clock.t += 3.0
    assert h.stalled_s(True) is None  # one waiting stream is not evidence
    policy.order([A, B])
    assert policy.explain([A, B])["a"]["promise"] == "configured-split"
    second = h.begin(stream=True)
    third = h.begin(stream=True)
    h.begin(stream=False)  # a non-streamed request waits apart
    clock.t += 1.5
    assert h.stalled_s(True) == pytest.approx(1.5)
    policy.order([A, B])
    exp = policy.explain([A, B])["a"]
    assert exp["promise"] == "probes-only"
    assert "3 of 3 attempts in the last 1.5s past the slo" in exp["evidence"]
    assert exp["effective_weight"] == 0.0  # out at once, before any of them finished
    h.first_token(first)
    h.first_token(third)
    h.observe(ok(6.0), handle=second)
    assert h.stalled_s(True) is None
    assert h.in_flight == 3  # the non-streamed one and the two streams whose first token came
