"""EWMA and PeakEWMA against closed-form decay on a fake clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailgate.stats import EWMA, PeakEWMA


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_ewma_first_sample_is_the_value() -> None:
    """Before any sample the value is 0.0 and unset; the first sample becomes the value."""
    e = EWMA(tau_s=1.0, clock=FakeClock())
    assert (e.value, e.is_set) == (0.0, False)
    assert e.update(42.0) == 42.0
    assert e.is_set


def test_ewma_decays_by_exp_minus_dt_over_tau() -> None:
    """After dt seconds the old value keeps weight exp(-dt/tau)."""
    clock = FakeClock()
    e = EWMA(tau_s=2.0, clock=clock)
    e.update(10.0)
    clock.t = 1.0
    v1 = e.update(0.0)
    assert v1 == pytest.approx(10.0 * math.exp(-0.5))
    clock.t = 4.0
    w = math.exp(-1.5)
    assert e.update(4.0) == pytest.approx(v1 * w + 4.0 * (1 - w))


def test_ewma_half_life_halves_the_old_weight() -> None:
    """With half_life_s, a sample one half-life later lands halfway."""
    clock = FakeClock()
    e = EWMA(half_life_s=3.0, clock=clock)
    e.update(100.0)
    clock.t = 3.0
    assert e.update(0.0) == pytest.approx(50.0)
    assert e.tau_s == pytest.approx(3.0 / math.log(2))


def test_ewma_same_instant_samples_count_as_their_mean() -> None:
    """Samples with dt == 0 are averaged into one observation, in any order, none dropped."""
    clock = FakeClock()
    first = EWMA(tau_s=1.0, clock=clock)
    first.update(2.0)
    assert first.update(4.0) == pytest.approx(3.0)
    clock.t = 1.0
    first.update(10.0)
    first.update(0.0)
    w = math.exp(-1.0)
    assert first.value == pytest.approx(3.0 * w + 5.0 * (1 - w))

    clock.t = 0.0
    second = EWMA(tau_s=1.0, clock=clock)
    second.update(4.0)
    second.update(2.0)
    clock.t = 1.0
    second.update(0.0)
    second.update(10.0)
    assert second.value == pytest.approx(first.value)


def test_ewma_backwards_clock_is_the_same_instant() -> None:
    """A clock reading before the last sample neither raises nor extrapolates."""
    clock = FakeClock(10.0)
    e = EWMA(tau_s=1.0, clock=clock)
    e.update(1.0)
    clock.t = 5.0
    assert e.update(3.0) == pytest.approx(2.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-3, 50.0), st.floats(0.0, 1e4)), min_size=1, max_size=50))
def test_ewma_matches_the_recurrence(samples: list[tuple[float, float]]) -> None:
    """For strictly increasing times the value is v = v*exp(-dt/tau) + x*(1 - exp(-dt/tau))."""
    clock = FakeClock()
    e = EWMA(tau_s=5.0, clock=clock)
    expected: float | None = None
    for dt, x in samples:
        clock.t += dt
        e.update(x)
        if expected is None:
            expected = x
        else:
            w = math.exp(-dt / 5.0)
            expected = expected * w + x * (1 - w)
        assert e.value == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("cls", [EWMA, PeakEWMA])
def test_decay_time_must_be_given_once_and_positive(cls: type[EWMA] | type[PeakEWMA]) -> None:
    """Exactly one of tau_s/half_life_s, positive and finite; non-finite samples raise."""
    with pytest.raises(ValueError, match="exactly one"):
        cls()
    with pytest.raises(ValueError, match="exactly one"):
        cls(tau_s=1.0, half_life_s=1.0)
    with pytest.raises(ValueError, match="positive"):
        cls(tau_s=0.0)
    with pytest.raises(ValueError, match="positive"):
        cls(half_life_s=math.inf)
    with pytest.raises(ValueError, match="non-finite"):
        cls(tau_s=1.0, clock=FakeClock()).update(math.nan)


@pytest.mark.parametrize("cls", [EWMA, PeakEWMA])
def test_reset_forgets(cls: type[EWMA] | type[PeakEWMA]) -> None:
    """reset() returns to the unset state; the next sample is taken as is."""
    clock = FakeClock()
    e = cls(tau_s=1.0, clock=clock)
    e.update(5.0)
    e.reset()
    assert (e.value, e.is_set) == (0.0, False)
    clock.t = 1.0
    assert e.update(7.0) == 7.0


def test_peak_ewma_jumps_up_on_a_spike() -> None:
    """A sample above the estimate replaces it at once."""
    clock = FakeClock()
    p = PeakEWMA(tau_s=10.0, clock=clock)
    p.update(10.0)
    clock.t = 1.0
    p.update(10.0)
    clock.t = 1.001
    assert p.update(500.0) == 500.0
    assert p.value == 500.0


def test_peak_ewma_decays_down_toward_the_latest_sample() -> None:
    """After a spike, lower samples pull the estimate down as latest + (peak - latest) * exp(-dt/tau)."""
    clock = FakeClock()
    p = PeakEWMA(tau_s=10.0, clock=clock)
    p.update(500.0)
    clock.t = 0.0
    assert p.update(20.0) == 500.0  # good news is believed slowly
    for dt in (1.0, 10.0, 30.0):
        clock.t = dt
        assert p.value == pytest.approx(20.0 + 480.0 * math.exp(-dt / 10.0))
    clock.t = 1000.0
    assert p.value == pytest.approx(20.0)  # toward the latest sample, not toward zero


def test_peak_ewma_lower_sample_keeps_decaying_from_current_estimate() -> None:
    """A second lower sample continues from the decayed estimate and retargets the decay."""
    clock = FakeClock()
    p = PeakEWMA(tau_s=10.0, clock=clock)
    p.update(100.0)
    p.update(50.0)
    clock.t = 10.0
    mid = 50.0 + 50.0 * math.exp(-1.0)
    assert p.update(10.0) == pytest.approx(mid)
    clock.t = 20.0
    assert p.value == pytest.approx(10.0 + (mid - 10.0) * math.exp(-1.0))


def test_peak_ewma_reads_do_not_change_state() -> None:
    """Reading value many times gives the same answer as reading it once."""
    clock = FakeClock()
    p = PeakEWMA(tau_s=2.0, clock=clock)
    p.update(100.0)
    p.update(0.0)
    clock.t = 1.0
    first = p.value
    for _ in range(5):
        assert p.value == first


def test_peak_ewma_backwards_clock_does_not_redecay() -> None:
    """A backwards clock reads as no time passed, and later decay is measured from the latest stamp."""
    clock = FakeClock(10.0)
    p = PeakEWMA(tau_s=1.0, clock=clock)
    p.update(100.0)
    p.update(0.0)
    clock.t = 5.0
    assert p.value == 100.0
    assert p.update(0.0) == 100.0
    clock.t = 11.0
    assert p.value == pytest.approx(100.0 * math.exp(-1.0))
