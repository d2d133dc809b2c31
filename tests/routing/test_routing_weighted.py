"""The weighted policy and the token bucket: pure logic, seeded randomness, a fake clock."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tailgate.routing import Route, TokenBucket, WeightedPolicy

A = Route("m", "a", "ma", 80)
B = Route("m", "b", "mb", 20, frozenset({"batch"}))
C = Route("m", "c", "mc", 0)


def test_first_choice_follows_weights() -> None:
    """Over 20k draws, 80/20 weights give the first choice within half a point of 80%."""
    policy = WeightedPolicy(random.Random(1))
    firsts = Counter(policy.order([A, B])[0].provider for _ in range(20_000))
    assert abs(firsts["a"] / 20_000 - 0.8) < 0.005


def test_fallback_order_contains_every_usable_route_and_zero_weight_last() -> None:
    """Every usable route appears once; weight-0 routes are pure fallbacks at the end."""
    policy = WeightedPolicy(random.Random(2))
    for _ in range(100):
        order = policy.order([C, A, B])
        assert sorted(r.provider for r in order) == ["a", "b", "c"]
        assert order[-1] is C


def test_class_prefers_listed_routes_then_falls_back() -> None:
    """A batch request tries the batch route first; others still come after it."""
    policy = WeightedPolicy(random.Random(3))
    for _ in range(50):
        assert [r.provider for r in policy.order([A, B], "batch")] == ["b", "a"]
    unknown = Counter(policy.order([A, B], "nightly")[0].provider for _ in range(2000))
    assert unknown["a"] > unknown["b"]  # an unlisted class is ordered by weight over all routes


def test_excluded_providers_are_skipped() -> None:
    """Drained or paused providers never appear in the order."""
    policy = WeightedPolicy(random.Random(4))
    assert [r.provider for r in policy.order([A, B], exclude={"a"})] == ["b"]
    assert policy.order([A, B], exclude={"a", "b"}) == []


def test_token_bucket_refills_on_the_clock() -> None:
    """60 rpm: a burst of 60, then one per second as the fake clock moves."""
    now = [0.0]
    bucket = TokenBucket(60, 60, clock=lambda: now[0])
    assert all(bucket.try_take() for _ in range(60))
    assert not bucket.try_take()
    assert bucket.wait_time() == pytest.approx(1.0)
    now[0] = 1.0
    assert bucket.try_take()
    assert not bucket.try_take()
    with pytest.raises(ValueError, match="positive"):
        TokenBucket(0)


def test_weighted_policy_draws_with_the_shared_weighted_order() -> None:
    """The weighted policy's order is ``weighted_order`` by configured weight: one draw for every policy."""
    from tailgate.routing.policies import weighted_order

    for seed in range(50):
        ours = WeightedPolicy(random.Random(seed)).order([C, A, B])
        shared = weighted_order([C, A, B], lambda r: r.weight, random.Random(seed))
        assert ours == shared


def test_every_policy_explains_itself_through_the_protocol() -> None:
    """``explain`` is part of ``Policy``: the weighted policy says static weights, factor 1, for each route."""
    from tailgate.routing import Policy

    policy: Policy = WeightedPolicy(random.Random(3))
    explained = policy.explain([A, B])
    assert explained["a"]["effective_weight"] == 80
    assert explained["b"]["configured_weight"] == 20
    assert {e["factor"] for e in explained.values()} == {1.0}
    assert explained["a"]["reason"] == "static weights (policy weighted)"
    assert policy.explain() == {}
