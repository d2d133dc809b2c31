"""Pacer (RPM/TPM buckets, pauses) and the hedging budget, with a fake clock."""

from __future__ import annotations

import pytest

from tailgate.routing import HedgeBudget, Pacer, hedge_delay, retry_after_s
from tailgate.routing.pacing import parse_duration


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_pacer_stays_under_rpm() -> None:
    """Offered 50 req/s against a 1200 RPM (20 req/s) limit: every 60 s window stays under 1200."""
    clock = Clock()
    pacer = Pacer(rpm=1200, clock=clock)
    sent: list[float] = []
    for _ in range(180 * 50):  # 3 minutes, a try every 20 ms
        clock.t += 0.02
        if pacer.try_acquire():
            sent.append(clock.t)
    for start in range(120):
        lo = 1000.0 + start
        n = sum(1 for t in sent if lo <= t < lo + 60.0)
        assert n <= 1200
        assert n >= 1000  # and uses most of it (headroom 0.9 → ~1080)


def test_pacer_tpm_is_atomic_with_rpm() -> None:
    clock = Clock()
    pacer = Pacer(rpm=600, tpm=6000, headroom=1.0, burst_s=1.0, clock=clock)
    assert pacer.try_acquire(100)  # TPM burst is 100 tokens
    assert not pacer.try_acquire(100)
    assert pacer.rpm is not None
    assert pacer.rpm.remaining == pytest.approx(9.0)  # nothing taken on refusal
    assert pacer.available_in(100) == pytest.approx(1.0)
    clock.t += 1.0
    assert pacer.try_acquire(10_000)  # clamped to the bucket, never blocked forever


def test_pause_for_is_honoured() -> None:
    clock = Clock()
    pacer = Pacer(rpm=6000, clock=clock)
    pacer.pause_for(2.5)
    assert pacer.paused
    assert not pacer.try_acquire()
    assert pacer.available_in() == pytest.approx(2.5)
    pacer.pause_for(1.0)  # a shorter pause does not cut a longer one
    clock.t += 2.0
    assert not pacer.try_acquire()
    clock.t += 0.6
    assert pacer.available_in() == 0.0
    assert pacer.try_acquire()


def test_unlimited_pacer() -> None:
    pacer = Pacer(clock=Clock())
    assert all(pacer.try_acquire(1e6) for _ in range(1000))


def test_retry_after_parsing() -> None:
    assert parse_duration("6m0s") == 360.0
    assert parse_duration("20ms") == pytest.approx(0.02)
    assert parse_duration("1h2m3.5s") == pytest.approx(3723.5)
    assert parse_duration("2") == 2.0
    assert parse_duration("soon") is None
    assert parse_duration("5s junk") is None
    assert retry_after_s({"Retry-After": "3"}) == 3.0
    assert retry_after_s({"x-ratelimit-reset-requests": "1s", "X-RateLimit-Reset-Tokens": "6m0s"}) == 360.0
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_after_s({}) is None


def test_hedge_budget_stays_under_ratio_over_window() -> None:
    clock = Clock()
    budget = HedgeBudget(ratio=0.05, window_s=60.0, clock=clock)
    hedges: list[float] = []
    requests: list[float] = []
    for _ in range(600 * 10):  # 10 min at 10 req/s, every request wanting a hedge
        clock.t += 0.1
        budget.record_request()
        requests.append(clock.t)
        if budget.may_hedge():
            hedges.append(clock.t)
    for start in range(0, 540, 7):
        lo = 1000.0 + start
        nh = sum(1 for t in hedges if lo <= t < lo + 60.0)
        nr = sum(1 for t in requests if lo <= t < lo + 60.0)
        assert nh <= 0.05 * nr + 1  # a window not aligned to buckets may see one bucket's edge
    assert len(hedges) / len(requests) == pytest.approx(0.05, abs=0.01)
    assert budget.hedges <= 0.05 * budget.requests


def test_hedge_budget_cold_start_and_delay() -> None:
    budget = HedgeBudget(clock=Clock())
    budget.record_request(19)
    assert not budget.may_hedge()  # 1 hedge would be > 5 % of 19
    budget.record_request()
    assert budget.may_hedge()
    assert not budget.may_hedge()
    assert hedge_delay(0.8) == 0.8
    assert hedge_delay(0.8, fixed=0.5) == 0.5
    assert hedge_delay(None) == 1.0
    assert hedge_delay(0.001) == 0.05
    with pytest.raises(ValueError, match="ratio"):
        HedgeBudget(ratio=2.0)
