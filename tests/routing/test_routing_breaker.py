"""Circuit breaker transitions with a fake clock and a seeded rng."""

from __future__ import annotations

import random

import pytest

from tailgate.routing import BreakerConfig, BreakerRegistry, CircuitBreaker, Transition


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def st(b: CircuitBreaker) -> str:
    """The state as a plain str (so mypy does not narrow a property across calls)."""
    return b.state


CFG = BreakerConfig(
    error_rate_threshold=0.5, min_samples=10, consecutive_failures=5, cooldown_s=5.0, max_cooldown_s=40.0, jitter=0.2
)


def _breaker(clock: Clock, cfg: BreakerConfig = CFG, seed: int = 1) -> CircuitBreaker:
    return CircuitBreaker("p", cfg, clock=clock, rng=random.Random(seed))


def test_opens_on_consecutive_failures() -> None:
    clock = Clock()
    b = _breaker(clock)
    for _ in range(4):
        b.record(False, "http_5xx")
    assert st(b) == "closed"
    b.record(False, "connect")
    assert st(b) == "open"
    assert not b.allow()
    assert b.transitions[-1].reason.startswith("5 consecutive failures")


def test_success_resets_consecutive_count() -> None:
    b = _breaker(Clock())
    for _ in range(20):
        b.record(False, "timeout_first_token")
        b.record(True)
        b.record(True)
    assert st(b) == "closed"  # 33 % faults, never 5 in a row


def test_opens_on_error_rate_over_min_samples() -> None:
    clock = Clock()
    b = _breaker(clock)
    # alternate fail, fail, ok: never 5 in a row; rate 2/3 ≥ 0.5 once 10 samples are in
    outcomes = [False, False, True] * 4
    states = []
    for ok in outcomes:
        b.record(ok, None if ok else "http_5xx")
        clock.t += 0.1
        states.append(st(b))
    assert states[:8] == ["closed"] * 8  # fewer than min_samples: no verdict yet
    assert "open" in states
    assert "error rate" in b.transitions[0].reason


def test_error_rate_needs_min_samples() -> None:
    b = _breaker(Clock(), BreakerConfig(min_samples=10, consecutive_failures=100))
    for _ in range(4):
        b.record(False, "http_5xx")
        b.record(True)
    assert st(b) == "closed"  # 50 % but only 8 samples


def test_insufficient_quota_opens_at_once() -> None:
    b = _breaker(Clock())
    b.record(True)
    b.record(False, "insufficient_quota")
    assert st(b) == "open"
    assert b.transitions[-1].reason.startswith("insufficient_quota")


def test_neutral_errors_do_not_count() -> None:
    b = _breaker(Clock())
    for cls in ["http_4xx", "rate_limited", "cancelled"] * 10:
        b.record(False, cls)  # type: ignore[arg-type]
    assert st(b) == "closed"


def test_half_open_after_cooldown_then_closes_after_trials() -> None:
    clock = Clock()
    b = _breaker(clock)
    b.record(False, "insufficient_quota")
    cd = b.last_cooldown_s
    assert 4.0 <= cd <= 6.0
    clock.t += cd - 0.01
    assert st(b) == "open"
    assert b.retry_in() == pytest.approx(0.01)
    clock.t += 0.02
    assert st(b) == "half_open"
    # three trials admitted, the fourth refused while they are out
    assert [b.allow() for _ in range(4)] == [True, True, True, False]
    b.record(True)
    b.record(True)
    assert st(b) == "half_open"
    b.record(True)
    assert st(b) == "closed"
    assert [(t.from_state, t.to_state) for t in b.transitions] == [
        ("closed", "open"),
        ("open", "half_open"),
        ("half_open", "closed"),
    ]


def test_half_open_failure_reopens_with_doubled_cooldown() -> None:
    clock = Clock()
    b = _breaker(clock)
    b.record(False, "insufficient_quota")
    clock.t += b.last_cooldown_s
    assert b.allow()
    b.record(True)
    assert b.allow()
    b.record(False, "http_5xx")
    assert st(b) == "open"
    assert 8.0 <= b.last_cooldown_s <= 12.0
    assert b.transitions[-1].reason.startswith("trial failed")


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    clock = Clock()
    b = _breaker(clock, seed=7)
    cooldowns = []
    b.record(False, "insufficient_quota")
    for _ in range(7):
        cooldowns.append(b.last_cooldown_s)
        clock.t += b.last_cooldown_s
        assert b.allow()
        b.record(False, "http_5xx")
    bases = [5.0, 10.0, 20.0, 40.0, 40.0, 40.0, 40.0]
    for cd, base in zip(cooldowns, bases, strict=True):
        assert base * 0.8 <= cd <= base * 1.2
    assert len(set(cooldowns)) == len(cooldowns)  # jitter spreads them
    # after a successful close the back-off starts over
    clock.t += b.last_cooldown_s
    for _ in range(3):
        assert b.allow()
        b.record(True)
    assert st(b) == "closed"
    b.record(False, "insufficient_quota")
    assert 4.0 <= b.last_cooldown_s <= 6.0


def test_jitter_bounds_over_many_seeds() -> None:
    for seed in range(200):
        clock = Clock()
        b = _breaker(clock, seed=seed)
        b.record(False, "insufficient_quota")
        assert 4.0 <= b.last_cooldown_s <= 6.0


def test_trial_slot_freed_by_neutral_outcome_and_timeout() -> None:
    clock = Clock()
    b = _breaker(clock, BreakerConfig(trial_requests=1, trial_timeout_s=10.0, cooldown_s=1.0, jitter=0.0))
    b.record(False, "insufficient_quota")
    clock.t += 1.0
    assert b.allow()
    assert not b.allow()
    b.record(False, "cancelled")
    assert st(b) == "half_open"
    assert b.allow()
    clock.t += 10.5  # that trial never reported back
    assert b.can_admit()


def test_probe_outcomes_count_as_trials_and_open_ignores_late_results() -> None:
    clock = Clock()
    b = _breaker(clock, BreakerConfig(trial_requests=2, cooldown_s=1.0, jitter=0.0))
    b.record(False, "insufficient_quota")
    b.record(True)  # a late answer while open: ignored
    assert st(b) == "open"
    clock.t += 1.0
    b.record(True)  # probes, no allow()
    b.record(True)
    assert st(b) == "closed"


def test_transition_log_is_bounded_and_reported() -> None:
    clock = Clock()
    seen: list[tuple[str, Transition]] = []
    reg = BreakerRegistry(
        BreakerConfig(log_size=4, cooldown_s=1.0, jitter=0.0),
        clock=clock,
        rng=random.Random(0),
        on_transition=lambda name, tr: seen.append((name, tr)),
    )
    b = reg.get("x")
    assert reg.get("x") is b
    for _ in range(5):
        b.record(False, "insufficient_quota")
        clock.t += 100.0
        b.allow()
    assert len(b.transitions) == 4
    assert len(seen) == 10
    assert seen[0][0] == "x"
    assert seen[0][1].as_dict()["to"] == "open"
    assert b.snapshot()["state"] == "half_open"


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="jitter"):
        BreakerConfig(jitter=1.5)
    with pytest.raises(ValueError, match="cooldown"):
        BreakerConfig(cooldown_s=10, max_cooldown_s=5)
