"""The adaptive policy keeps its judgements between recomputes (``_Plan``): nothing it must see at once waits.

A breaker that moves, a provider drained or paused, a reloaded route list and the queue depth of promise 4
are seen by the very next ``order()``; evidence in the health windows by the next recompute, as before."""

from __future__ import annotations

import random

from fakeload import Clock, ok

from tailgate.routing import SLO, AdaptivePolicy, BreakerConfig, BreakerRegistry, HealthRegistry, Route

A = Route("m", "a", "ma", 80)
B = Route("m", "b", "mb", 20)
ROUTES = (A, B)


def setup() -> tuple[AdaptivePolicy, HealthRegistry, BreakerRegistry, Clock]:
    clock = Clock()
    health = HealthRegistry(clock=clock)
    breakers = BreakerRegistry(BreakerConfig(jitter=0.0), clock=clock, rng=random.Random(0))
    policy = AdaptivePolicy(health, breakers=breakers, slo=SLO(1.0, 3.0), clock=clock, rng=random.Random(1))
    return policy, health, breakers, clock


def firsts(policy: AdaptivePolicy, n: int, routes: tuple[Route, ...] = ROUTES, **kw: object) -> list[str]:
    return [policy.order(routes, **kw)[0].provider for _ in range(n)]  # type: ignore[arg-type]


def test_the_exact_split_holds_across_kept_plans() -> None:
    policy, _, _, clock = setup()
    got = []
    for _ in range(10):  # ten plans, ten requests each: the smooth split runs across them
        got += firsts(policy, 10)
        clock.t += policy.recompute_s
    assert got.count("a") == 80
    assert got.count("b") == 20
    assert all(len(policy.order(ROUTES)) == 2 for _ in range(5))  # the other route stays a fallback


def test_a_breaker_that_opens_is_out_of_the_next_order_not_the_next_recompute() -> None:
    policy, _, breakers, _ = setup()
    firsts(policy, 10)  # the plan is kept now; the clock does not move below
    for _ in range(5):
        breakers.get("a").record(False, "http_5xx")
    assert breakers.get("a").state == "open"
    assert [r.provider for r in policy.order(ROUTES)] == ["b"]
    breakers.get("a").force_close("operator")
    assert set(firsts(policy, 10)) == {"a", "b"}  # closed again: back at once


def test_excluded_and_reloaded_routes_are_seen_at_once() -> None:
    policy, _, _, _ = setup()
    firsts(policy, 10)
    assert [r.provider for r in policy.order(ROUTES, exclude={"a"})] == ["b"]  # drained or paused
    assert set(firsts(policy, 10)) == {"a", "b"}
    reloaded = (Route("m", "a", "ma", 0), Route("m", "b", "mb", 100))  # a new config's route list
    assert set(firsts(policy, 10, reloaded)) == {"b"}


def test_health_evidence_is_seen_at_the_next_recompute() -> None:
    policy, health, _, clock = setup()
    firsts(policy, 10)
    for _ in range(30):  # a is ten times over its SLO
        health.get("a", "ma").observe(ok(10.0))
        health.get("b", "mb").observe(ok(0.2))
    assert "a" in firsts(policy, 10)  # the same judgement until it is due
    clock.t += policy.recompute_s
    assert set(firsts(policy, 20)) == {"b"}
    assert policy.explain(list(ROUTES))["a"]["promise"] == "probes-only"


def test_promise_4_weighs_the_queue_depth_of_every_request() -> None:
    """With every route over its SLO the split follows the queues, which move with each request: never kept."""
    policy, health, _, _ = setup()
    for _ in range(30):
        health.get("a", "ma").observe(ok(1.5))
        health.get("b", "mb").observe(ok(1.5))
    before = firsts(policy, 400)
    for _ in range(40):
        health.get("a", "ma").begin()  # forty of a's attempts waiting
    after = firsts(policy, 400)
    assert before.count("a") > 280  # 80/20 by weight
    assert after.count("a") < before.count("a") - 100  # the same clock tick, a's queue is seen
