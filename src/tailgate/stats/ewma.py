"""Time-decayed moving averages for irregularly spaced samples.

Both classes decay by wall-clock-independent elapsed time, not by sample count: after ``dt``
seconds the old estimate keeps the weight ``exp(-dt / tau_s)``. Give either ``tau_s`` (the time
constant: weight 1/e after ``tau_s``) or ``half_life_s`` (weight 1/2 after it;
``tau_s = half_life_s / ln 2``), not both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["EWMA", "PeakEWMA"]


def _tau(tau_s: float | None, half_life_s: float | None) -> float:
    if tau_s is not None and half_life_s is None:
        tau = tau_s
    elif half_life_s is not None and tau_s is None:
        tau = half_life_s / math.log(2)
    else:
        raise ValueError("give exactly one of tau_s and half_life_s")
    if not (0.0 < tau < math.inf):
        raise ValueError(f"tau_s/half_life_s must be a positive finite number, got {tau_s}/{half_life_s}")
    return tau


def _check(x: float) -> None:
    if not math.isfinite(x):
        raise ValueError(f"cannot average a non-finite sample {x!r}")


class EWMA:
    """Exponentially weighted moving average with time-based decay.

    A sample ``x`` arriving ``dt`` seconds after the previous one moves the value to
    ``value * w + x * (1 - w)`` with ``w = exp(-dt / tau_s)``: a sample after a long silence all
    but replaces the old value; frequent samples each move it a little.

    Samples with the same clock reading (``dt == 0``, common with coarse clocks) would get
    weight 0 under that rule and be lost; here they form one observation whose value is their
    mean, so order within the instant does not matter and nothing is dropped. The first
    instant's mean becomes the value. A clock reading earlier than the previous sample counts as
    the same instant. ``value`` is 0.0 until the first sample (see ``is_set``).
    """

    __slots__ = ("_base", "_batch_n", "_batch_sum", "_clock", "_stamp", "_tau", "_value", "_w")

    def __init__(
        self,
        *,
        tau_s: float | None = None,
        half_life_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tau = _tau(tau_s, half_life_s)
        self._clock = clock
        self.reset()

    def reset(self) -> None:
        """Forget every sample."""
        self._value = 0.0
        self._stamp = -math.inf
        # The estimate before the current instant, and the weight it keeps; w = 0 means
        # "no history", which makes the first instant's mean the value.
        self._base = 0.0
        self._w = 0.0
        self._batch_sum = 0.0
        self._batch_n = 0

    @property
    def tau_s(self) -> float:
        return self._tau

    @property
    def value(self) -> float:
        return self._value

    @property
    def is_set(self) -> bool:
        """True once a sample has been seen."""
        return self._batch_n > 0

    def update(self, x: float) -> float:
        """Fold in the sample ``x`` at the clock's current reading; returns the new value."""
        _check(x)
        now = self._clock()
        if now > self._stamp:
            if self._batch_n:
                self._base = self._value
                self._w = math.exp(-(now - self._stamp) / self._tau)
            self._stamp = now
            self._batch_sum = x
            self._batch_n = 1
        else:
            self._batch_sum += x
            self._batch_n += 1
        w = self._w
        self._value = self._base * w + (self._batch_sum / self._batch_n) * (1.0 - w)
        return self._value


class PeakEWMA:
    """A latency estimate that believes bad news at once and good news slowly.

    As in Finagle's and linkerd's peak-EWMA load balancers: a sample above the current estimate
    replaces it immediately; a lower sample becomes the target the estimate decays toward, with
    ``estimate(t) = last + (peak - last) * exp(-(t - t_last) / tau_s)`` between samples. Reading
    ``value`` evaluates that at the clock's current reading (reads do not change state), so one
    slow response lifts the estimate and fast ones bring it down over about ``tau_s``.

    A clock reading earlier than the last sample counts as no time passed. ``value`` is 0.0
    until the first sample (see ``is_set``); the first sample becomes the estimate.
    """

    __slots__ = ("_clock", "_last", "_peak", "_set", "_stamp", "_tau")

    def __init__(
        self,
        *,
        tau_s: float | None = None,
        half_life_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tau = _tau(tau_s, half_life_s)
        self._clock = clock
        self.reset()

    def reset(self) -> None:
        """Forget every sample."""
        self._peak = 0.0  # the estimate as of _stamp
        self._last = 0.0  # the latest sample: where the estimate is heading
        self._stamp = -math.inf
        self._set = False

    @property
    def tau_s(self) -> float:
        return self._tau

    @property
    def is_set(self) -> bool:
        """True once a sample has been seen."""
        return self._set

    def _at(self, now: float) -> float:
        dt = now - self._stamp
        if dt <= 0.0:
            return self._peak
        return self._last + (self._peak - self._last) * math.exp(-dt / self._tau)

    @property
    def value(self) -> float:
        """The estimate now (0.0 before the first sample)."""
        if not self._set:
            return 0.0
        return self._at(self._clock())

    def update(self, x: float) -> float:
        """Fold in the sample ``x``; returns the estimate right after it."""
        _check(x)
        now = self._clock()
        if self._set:
            current = self._at(now)
            self._peak = x if x > current else current
            # Never move the reference time back, or a backwards clock would re-decay an interval.
            self._stamp = max(self._stamp, now)
        else:
            self._peak = x
            self._stamp = now
            self._set = True
        self._last = x
        return self._peak
