"""Adaptive, least-latency and cost policies, with a fake clock and seeded randomness."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tailgate.routing import (
    SLO,
    AdaptivePolicy,
    BreakerConfig,
    BreakerRegistry,
    CostPolicy,
    HealthRegistry,
    LeastLatencyPolicy,
    Price,
    Route,
    should_shed,
)
from tailgate.routing.policies import health_factor
from tailgate.upstream.events import CallResult

A = Route("m", "a", "ma", 80)
B = Route("m", "b", "mb", 20, frozenset({"batch"}))
Z = Route("m", "z", "mz", 0)


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def ok(ttft_s: float, e2e_s: float | None = None) -> CallResult:
    e2e = e2e_s if e2e_s is not None else ttft_s * 2
    return CallResult(200, None, 0.0, True, ttft_ms=ttft_s * 1000, e2e_ms=e2e * 1000, output_tokens=5)


def feed(health: HealthRegistry, route: Route, ttft_s: float, n: int = 20) -> None:
    h = health.get(route.provider, route.model)
    for _ in range(n):
        h.observe(ok(ttft_s))


def firsts(policy: AdaptivePolicy | LeastLatencyPolicy, routes: list[Route], n: int = 4000) -> Counter[str]:
    return Counter(policy.order(routes)[0].provider for _ in range(n))


# -- adaptive -----------------------------------------------------------------------------------


def test_health_factor_formula() -> None:
    slo = SLO(ttft_p90=1.0, e2e_p90=3.0)
    assert health_factor(None, None, None, slo)[0] == 1.0
    assert health_factor(0.5, 1.0, 0.0, slo)[0] == 1.0
    f, reason = health_factor(2.0, 1.0, None, slo)
    assert f == pytest.approx(0.0625)  # (1 / 2) ** 4: twice the SLO
    assert "ttft p90 2.00s" in reason
    assert health_factor(1.0, 6.0, None, slo)[0] == pytest.approx(0.0625)
    assert health_factor(2.0, 1.0, None, slo, exponent=2.0)[0] == pytest.approx(0.25)
    assert health_factor(None, None, 0.1, slo)[0] == pytest.approx(0.8)
    assert health_factor(None, None, 0.6, slo)[0] == 0.0
    # smooth: a little over the SLO is a little less weight, no cliff
    assert health_factor(1.05, None, None, slo)[0] > 0.8


def test_no_samples_means_configured_weights() -> None:
    clock = Clock()
    policy = AdaptivePolicy(HealthRegistry(clock=clock), clock=clock, rng=random.Random(1))
    c = firsts(policy, [A, B], 10_000)
    assert abs(c["a"] / 10_000 - 0.8) < 0.02
    exp = policy.explain()
    assert exp["a"]["factor"] == 1.0
    assert exp["a"]["effective_weight"] == 80
    assert "no samples" in exp["a"]["evidence"]
    assert exp["a"]["reason"] == "within slo: configured 80%"


def test_far_over_slo_provider_gets_nothing_not_a_floor() -> None:
    """10× over the TTFT SLO next to a healthy provider: no client share at all (no exploration)."""
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = AdaptivePolicy(health, slo=SLO(1.0, 3.0), clock=clock, rng=random.Random(2))
    feed(health, A, 10.0)
    feed(health, B, 0.3)
    policy.order([A, B])
    exp = policy.explain()
    assert exp["a"]["raw_factor"] == pytest.approx(1e-4, rel=0.1)
    assert exp["a"]["effective_weight"] == 0.0
    assert exp["a"]["promise"] == "probes-only"
    assert exp["b"]["effective_weight"] == pytest.approx(20.0)
    assert firsts(policy, [A, B], 2000)["a"] == 0


def test_errors_lower_the_factor() -> None:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = AdaptivePolicy(health, clock=clock, rng=random.Random(4))
    h = health.get("a", "ma")
    for i in range(40):
        h.observe(ok(0.2) if i % 4 else CallResult(500, "http_5xx", 0.0, True), probe=True)
    policy.order([A, B])
    exp = policy.explain()
    assert exp["a"]["raw_factor"] == pytest.approx(0.5)  # 25 % faults / 50 %
    assert "error rate 25%" in exp["a"]["evidence"]
    assert exp["a"]["promise"] == "over-slo"


def test_open_breaker_is_excluded_half_open_gets_no_client_trial() -> None:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    breakers = BreakerRegistry(BreakerConfig(cooldown_s=5.0, jitter=0.0), clock=clock, rng=random.Random(0))
    policy = AdaptivePolicy(health, breakers=breakers, clock=clock, rng=random.Random(5))
    breakers.get("a").record(False, "insufficient_quota")
    for _ in range(200):
        assert [r.provider for r in policy.order([A, B, Z])] == ["b", "z"]
    exp = policy.explain([A, B])
    assert exp["a"]["effective_weight"] == 0.0
    assert exp["a"]["breaker"] == "open"
    clock.t += 5.0
    assert policy.explain([A, B])["a"]["effective_weight"] == 0.0  # half-open: the probes are its trials
    assert all(policy.order([A, B])[0].provider == "b" for _ in range(500))


def test_adaptive_class_preference_and_exclude() -> None:
    clock = Clock()
    policy = AdaptivePolicy(HealthRegistry(clock=clock), clock=clock, rng=random.Random(6))
    for _ in range(50):
        assert [r.provider for r in policy.order([A, B], "batch")] == ["b", "a"]
        assert [r.provider for r in policy.order([A, B, Z])][-1] == "z"
        assert [r.provider for r in policy.order([A, B], exclude={"a"})] == ["b"]


def test_per_alias_slo() -> None:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = AdaptivePolicy(health, slos={"m": SLO(10.0, 30.0)}, clock=clock)
    feed(health, A, 5.0)
    policy.order([A, B])
    assert policy.explain()["a"]["raw_factor"] == 1.0


# -- least-latency ------------------------------------------------------------------------------


def test_p2c_prefers_faster_provider() -> None:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = LeastLatencyPolicy(health, rng=random.Random(7))
    feed(health, A, 0.8, 1)
    feed(health, B, 0.2, 1)
    assert all(policy.order([A, B])[0].provider == "b" for _ in range(100))


def test_p2c_prefers_less_loaded_provider() -> None:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = LeastLatencyPolicy(health, rng=random.Random(8))
    feed(health, A, 0.2, 1)
    feed(health, B, 0.3, 1)
    for _ in range(3):
        health.get("a", "ma").begin()  # 0.2 × 4 = 0.8 > 0.3 × 1
    assert all(policy.order([A, B])[0].provider == "b" for _ in range(100))
    exp = policy.explain()
    assert exp["b"]["factor"] == 1.0
    assert "3 in flight" in exp["a"]["reason"]


def test_p2c_never_draws_a_several_times_slower_provider_first() -> None:
    """A provider whose estimate is > 3× the best one's goes last even when the fast one is busy: the
    in-flight multiplier must not send the idle, 5× slower one a share (it would set the P99)."""
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = LeastLatencyPolicy(health, rng=random.Random(9))
    feed(health, A, 5.0, 1)
    feed(health, B, 1.0, 1)
    for _ in range(25):
        health.get("b", "mb").begin()  # 1.0 × 26 = 26 > 5.0 × 1, but 5.0 > 3 × 1.0
    assert all(policy.order([A, B]) == [B, A] for _ in range(200))
    health.get("a", "ma").forget()  # as when its breaker closes: the old estimate is dropped
    feed(health, A, 2.5, 1)  # within 3× of the best again
    assert any(policy.order([A, B])[0] == A for _ in range(200))  # now the queue-aware score decides


def test_p2c_explores_unseen_with_default_rtt() -> None:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = LeastLatencyPolicy(health, rng=random.Random(9))
    feed(health, A, 0.8, 1)
    assert policy.order([A, B])[0].provider == "b"  # unseen 250 ms beats a known 800 ms
    feed(health, A, 0.1, 1)
    clock.t += 300.0  # the 800 ms peak has decayed toward 100 ms
    assert policy.order([A, B])[0].provider == "a"  # and an unseen route is not assumed free (0 ms)
    assert "default RTT 250 ms" in policy.explain()["b"]["reason"]


def test_p2c_spreads_over_many_routes_and_skips_open_breakers() -> None:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    breakers = BreakerRegistry(clock=clock, rng=random.Random(0))
    routes = [Route("m", p, p, 1) for p in "abcd"]
    policy = LeastLatencyPolicy(health, breakers=breakers, rng=random.Random(10))
    c = Counter(policy.order(routes)[0].provider for _ in range(4000))
    assert set(c) == set("abcd")  # equal scores: random among the two draws
    breakers.get("c").record(False, "insufficient_quota")
    for _ in range(100):
        order = policy.order(routes)
        assert "c" not in [r.provider for r in order]
        assert len(order) == 3


# -- cost ---------------------------------------------------------------------------------------

PRICES = {"a": Price(5.0, 15.0), "b": Price(0.5, 1.5), "c": Price(1.0, 3.0)}
CA, CB, CC = Route("m", "a", "ma", 1), Route("m", "b", "mb", 1), Route("m", "c", "mc", 1)


def test_cost_picks_cheapest_within_slo() -> None:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = CostPolicy(health, PRICES, slo=SLO(1.0, 3.0))
    assert [r.provider for r in policy.order([CA, CB, CC])] == ["b", "c", "a"]
    feed(health, CB, 2.0)  # the cheapest misses the SLO
    feed(health, CC, 0.5)
    feed(health, CA, 0.4)
    assert [r.provider for r in policy.order([CA, CB, CC])] == ["c", "a", "b"]
    exp = policy.explain()
    assert exp["b"]["factor"] == 0.0
    assert "misses slo" in exp["b"]["reason"]


def test_cost_falls_back_to_fastest_when_none_meets() -> None:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    policy = CostPolicy(health, PRICES, slo=SLO(0.1, 0.2))
    feed(health, CA, 0.4)
    feed(health, CB, 2.0)
    feed(health, CC, 0.9)
    assert [r.provider for r in policy.order([CA, CB, CC])] == ["a", "c", "b"]


def test_cost_unknown_price_last_and_class_preference() -> None:
    clock = Clock()
    policy = CostPolicy(HealthRegistry(clock=clock), PRICES)
    d = Route("m", "d", "md", 1, frozenset({"batch"}))
    assert [r.provider for r in policy.order([d, CA, CB])] == ["b", "a", "d"]
    assert [r.provider for r in policy.order([d, CA, CB], "batch")] == ["d", "b", "a"]


# -- shedding -----------------------------------------------------------------------------------


def test_batch_is_shed_first() -> None:
    assert should_shed("batch", 0.85)
    assert not should_shed("interactive", 0.85)
    assert not should_shed(None, 0.85)
    assert should_shed(None, 1.0)
    assert not should_shed("batch", 0.5)
    assert should_shed("bulk", 0.5, thresholds={"bulk": 0.4})
