"""``WindowCounter`` keeps its window's sum as it goes: it must decide exactly as recounting every bucket.

The reference below is the plain algorithm (drop buckets that rolled off, sum what is left, on every call);
hypothesis drives both with the same takes, refunds and corrections on a clock that only moves forward.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailgate.state.window import SUB_BUCKETS, WindowCounter

WINDOW = 60.0


class Recount:
    """Every call recounts the live buckets."""

    def __init__(self) -> None:
        self.buckets: dict[int, float] = {}

    def _live(self, now: float) -> int:
        epoch = math.floor(now / (WINDOW / SUB_BUCKETS))
        for k in [k for k in self.buckets if k <= epoch - SUB_BUCKETS]:
            del self.buckets[k]
        return epoch

    def usage(self, now: float) -> float:
        self._live(now)
        return max(0.0, sum(self.buckets.values()))

    def take(self, now: float, amount: float, limit: float) -> tuple[bool, float, int | None]:
        epoch = self._live(now)
        used = max(0.0, sum(self.buckets.values()))
        if amount > limit or used + amount > limit:
            return False, max(0.0, limit - used), None
        if amount:
            self.buckets[epoch] = self.buckets.get(epoch, 0.0) + amount
        return True, max(0.0, limit - used - amount), epoch if amount else None

    def adjust(self, now: float, delta: float, bucket: int | None) -> float:
        epoch = self._live(now)
        if delta < 0 and bucket is not None:
            if bucket in self.buckets:
                self.buckets[bucket] = max(0.0, self.buckets[bucket] + delta)
        else:
            self.buckets[epoch] = self.buckets.get(epoch, 0.0) + delta
        return max(0.0, sum(self.buckets.values()))


ops = st.lists(
    st.tuples(
        st.sampled_from(["take", "refund", "correct", "usage"]),
        st.floats(0, 25),  # seconds the clock moves first
        st.integers(0, 400),  # amount
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_running_sum_decides_as_a_recount(steps: list[tuple[str, float, int]]) -> None:
    counter, reference = WindowCounter(), Recount()
    now, limit = 1_000.0, 1_000.0
    buckets: list[int] = []
    for op, dt, amount in steps:
        now += dt
        if op == "take":
            adm = counter.take(now, float(amount), limit, WINDOW)
            ok, remaining, bucket = reference.take(now, float(amount), limit)
            assert (adm.ok, adm.bucket if adm.ok else None) == (ok, bucket)
            assert adm.remaining == pytest.approx(remaining, abs=1e-6)
            if bucket is not None:
                buckets.append(bucket)
        elif op == "refund" and buckets:
            bucket = buckets.pop(amount % len(buckets))
            got = counter.adjust(now, -float(amount), WINDOW, bucket)
            assert got == pytest.approx(reference.adjust(now, -float(amount), bucket), abs=1e-6)
        elif op == "correct":
            delta = float(amount - 200)
            got = counter.adjust(now, delta, WINDOW, None)
            assert got == pytest.approx(reference.adjust(now, delta, None), abs=1e-6)
        assert counter.usage(now, WINDOW) == pytest.approx(reference.usage(now), abs=1e-6)


def test_reset_is_when_the_newest_take_rolls_off() -> None:
    counter = WindowCounter()
    first = counter.take(10.2, 5, 100, WINDOW)
    assert first.reset_s == pytest.approx(60 - 0.2)  # bucket [10, 11) leaves the window at 70
    later = counter.take(30.5, 5, 100, WINDOW)
    assert later.reset_s == pytest.approx(60 - 0.5)
    assert counter.usage(69.9, WINDOW) == 10
    assert counter.usage(70.0, WINDOW) == 5
    assert counter.usage(90.9, WINDOW) == 0
