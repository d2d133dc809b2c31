"""SlidingWindow: expiry on a fake clock, rates, clock jumps, replica merging."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailgate.stats import LatencyHistogram, SlidingWindow


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(t: float = 0.0, width_s: float = 60.0, buckets: int = 12) -> tuple[SlidingWindow, FakeClock]:
    clock = FakeClock(t)
    return SlidingWindow(width_s, buckets, clock), clock


def test_value_expires_exactly_after_width() -> None:
    """A value recorded at a bucket start is visible until width_s later, and gone at width_s."""
    w, clock = make()
    w.record(5.0)
    w.incr("requests")
    clock.t = 59.999
    assert (w.count, w.counter("requests")) == (1, 1)
    clock.t = 60.0
    assert (w.count, w.counter("requests")) == (0, 0)
    assert w.is_empty


def test_mid_bucket_value_lives_between_width_minus_bucket_and_width() -> None:
    """A value recorded inside a bucket expires with its bucket: no later than width_s after it."""
    w, clock = make()
    clock.t = 2.5
    w.record(1.0)
    clock.t = 2.5 + 55.0 - 1e-9  # width - bucket: always still visible
    assert w.count == 1
    clock.t = 60.0  # its bucket [0, 5) leaves the window here, 57.5 s after the record
    assert w.count == 0


def test_histogram_merges_only_live_buckets() -> None:
    """histogram() holds exactly the values of live buckets and is a detached copy."""
    w, clock = make()
    for t, v in [(0.0, 100.0), (20.0, 1.0), (40.0, 2.0), (59.0, 3.0)]:
        clock.t = t
        w.record(v)
    clock.t = 62.0
    h = w.histogram()
    assert (h.count, h.min, h.max) == (3, 1.0, 3.0)
    h.record(9.0)
    assert w.count == 3


def test_recent_histogram_takes_the_newest_buckets_until_it_has_enough() -> None:
    """recent_histogram(n): whole buckets, newest first, until n values (or every live bucket)."""
    w, clock = make()
    for t, values in [(0.0, [900.0] * 20), (30.0, [800.0] * 3), (50.0, [10.0] * 4), (56.0, [11.0] * 4)]:
        clock.t = t
        for v in values:
            w.record(v)
    assert w.recent_histogram(4).count == 4  # the newest bucket alone: [55, 60)
    assert w.recent_histogram(8).max < 12  # the two newest buckets: the slow old values stay out
    h = w.recent_histogram(10)
    assert h.count == 11  # reaches back to the bucket at 30 s
    assert h.max == pytest.approx(800.0, rel=0.01)
    assert w.recent_histogram(1000).count == 31  # all live buckets, even if that is fewer


def test_counters_sum_live_buckets() -> None:
    """counters() and counter() add up the live buckets and drop expired ones."""
    w, clock = make()
    w.incr("requests", 3)
    w.incr("429")
    clock.t = 30.0
    w.incr("requests", 2)
    assert w.counters() == {"requests": 5, "429": 1}
    assert w.counter("missing") == 0
    clock.t = 61.0
    assert w.counters() == {"requests": 2}


def test_rate_in_a_young_window_divides_by_elapsed_time() -> None:
    """While younger than width_s, rate() is count over elapsed time, with a one-second floor."""
    w, clock = make(t=1000.0)
    assert w.rate("requests") == 0.0  # brand new and empty: no division by zero
    w.incr("requests", 10)
    assert w.rate("requests") == 10.0  # zero elapsed: divided by the 1 s floor
    clock.t = 1000.5
    assert w.rate("requests") == 10.0
    clock.t = 1004.0
    assert w.rate("requests") == pytest.approx(2.5)
    clock.t = 1020.0
    assert w.rate("requests") == pytest.approx(0.5)


def test_rate_at_steady_state_is_the_true_rate() -> None:
    """One event per second reads as 1/s whenever the window is full, rotation or not."""
    w, clock = make()
    for k in range(300):
        clock.t = float(k)
        w.incr("requests")
        if k >= 120:
            assert w.rate("requests") == pytest.approx(1.0, rel=0.02)
    clock.t = 300.0  # exactly on a rotation: the live buckets cover 55 s with 55 events
    assert w.span_s() == pytest.approx(55.0)
    assert w.rate("requests") == pytest.approx(1.0)


def test_rate_floor_follows_short_buckets() -> None:
    """With buckets shorter than a second the divisor floor is one bucket."""
    w, _clock = make(width_s=1.0, buckets=10)
    w.incr("x", 3)
    assert w.rate("x") == pytest.approx(30.0)


def test_clock_going_backwards_keeps_data_and_keeps_aging() -> None:
    """A backwards clock neither raises nor loses data; time resumes from the latest reading."""
    w, clock = make()
    clock.t = 10.0
    w.record(1.0)
    clock.t = 3.0  # 7 s back
    w.record(2.0)
    w.incr("requests")
    assert (w.count, w.counter("requests")) == (2, 1)
    # Both landed in bucket [10, 15), which leaves the window at window-time 70 = clock 63.
    clock.t = 62.999
    assert w.count == 2
    clock.t = 63.0
    assert w.count == 0
    assert w.counter("requests") == 0


def test_big_forward_jump_expires_everything_and_recording_continues() -> None:
    """A jump far past width_s empties the window in O(1), and new records work."""
    w, clock = make()
    w.record(1.0)
    clock.t = 1e9
    assert w.is_empty
    w.record(2.0)
    assert w.histogram().max == 2.0


def test_merge_from_aligns_buckets_by_start_time() -> None:
    """Merged replica data expires on its original bucket schedule."""
    clock = FakeClock()
    a = SlidingWindow(60.0, 12, clock)
    b = SlidingWindow(60.0, 12, clock)
    clock.t = 0.0
    a.record(1.0)
    a.incr("requests")
    clock.t = 10.0
    b.record(2.0)
    b.incr("requests")
    b.incr("429")
    clock.t = 30.0
    a.record(3.0)
    clock.t = 55.0
    b.record(4.0)
    clock.t = 58.0
    a.merge_from(b)
    assert a.count == 4
    assert a.counters() == {"requests": 2, "429": 1}
    assert b.count == 2  # the source is untouched
    clock.t = 60.0
    assert sorted(a.histogram().percentiles([0, 100]).values()) == [2.0, 4.0]
    clock.t = 70.0
    assert a.count == 2
    assert a.counters() == {}


def test_merge_from_drops_expired_and_folds_future_buckets() -> None:
    """Buckets outside our window are dropped; a replica clock ahead of ours lands in our newest bucket."""
    mine, theirs = FakeClock(100.0), FakeClock(0.0)
    a = SlidingWindow(60.0, 12, mine)
    old = SlidingWindow(60.0, 12, theirs)
    old.record(1.0)  # bucket [0, 5): long expired at our time 100
    a.merge_from(old)
    assert a.is_empty
    theirs.t = 500.0
    ahead = SlidingWindow(60.0, 12, theirs)
    ahead.record(2.0)
    a.merge_from(ahead)
    assert a.count == 1
    mine.t = 159.999  # our bucket [100, 105) holds it until 160
    assert a.count == 1
    mine.t = 160.0
    assert a.count == 0


def test_merge_from_expired_bucket_does_not_clobber_the_live_one_sharing_its_slot() -> None:
    """A replica bucket exactly one width old shares our current ring slot but must not reset it."""
    mine, theirs = FakeClock(60.0), FakeClock(0.0)
    a = SlidingWindow(60.0, 12, mine)
    a.record(1.0)  # bucket 12, ring slot 0
    old = SlidingWindow(60.0, 12, theirs)
    old.record(2.0)  # bucket 0, ring slot 0, live in the replica's own (stale) view
    a.merge_from(old)
    assert (a.count, a.histogram().max) == (1, 1.0)


def test_merge_from_rejects_other_shapes() -> None:
    """Windows with other bucket length, bucket count or unit cannot be merged."""
    clock = FakeClock()
    a = SlidingWindow(60.0, 12, clock)
    for other in (
        SlidingWindow(30.0, 12, clock),
        SlidingWindow(60.0, 6, clock),
        SlidingWindow(60.0, 12, clock, unit=0.01),
    ):
        with pytest.raises(ValueError, match="shape"):
            a.merge_from(other)


def test_merge_from_older_window_extends_the_rate_span() -> None:
    """After merging an older replica, rate() divides by the span its data covers."""
    clock = FakeClock(0.0)
    old = SlidingWindow(60.0, 12, clock)
    old.incr("requests", 20)
    clock.t = 20.0
    young = SlidingWindow(60.0, 12, clock)
    young.merge_from(old)
    assert young.rate("requests") == pytest.approx(1.0)


def test_reset_empties_and_restarts_age() -> None:
    """reset() drops all data and the young-window rate restarts from the reset time."""
    w, clock = make()
    w.incr("requests", 100)
    clock.t = 30.0
    w.reset()
    assert w.is_empty
    w.incr("requests", 4)
    clock.t = 32.0
    assert w.rate("requests") == pytest.approx(2.0)


def test_zero_counter_is_empty_and_bad_shapes_raise() -> None:
    """A counter incremented by 0 leaves the window empty; invalid construction raises."""
    w, _clock = make()
    w.incr("requests", 0)
    assert w.is_empty
    assert (w.width_s, w.buckets, w.bucket_s) == (60.0, 12, 5.0)
    with pytest.raises(ValueError, match="width_s"):
        SlidingWindow(0.0, 12, FakeClock())
    with pytest.raises(ValueError, match="buckets"):
        SlidingWindow(60.0, 0, FakeClock())


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-3.0, 25.0), st.floats(0.0, 1e4), st.booleans()),
        min_size=1,
        max_size=60,
    )
)
def test_window_matches_a_naive_model(steps: list[tuple[float, float, bool]]) -> None:
    """Against a list of (bucket, value) pairs filtered on every read, under random clock moves."""
    clock = FakeClock(0.0)
    w = SlidingWindow(20.0, 4, clock)
    seen = 0.0  # the model's time: the latest clock reading (a backwards clock stands still)
    skew = 0.0
    live: list[tuple[int, float]] = []
    for dt, value, write in steps:
        clock.t += dt
        t = clock.t + skew
        if t < seen:
            skew += seen - t
            t = seen
        seen = t
        epoch = int(t // 5.0)
        if write:
            w.record(value)
            live.append((epoch, value))
        expected = LatencyHistogram()
        expected.record_many(v for e, v in live if e > epoch - 4)
        got = w.histogram()
        assert got.count == expected.count
        assert got.to_dict()["buckets"] == expected.to_dict()["buckets"]


def test_precision_rounds_each_latency_within_its_step() -> None:
    """``precision=128``: every percentile within 1/256 of the exact one, and at most 128 distinct values
    per power of two however many different latencies were recorded."""
    clock = FakeClock(0.0)
    exact, coarse_w = SlidingWindow(60.0, 12, clock), SlidingWindow(60.0, 12, clock, precision=128)
    values = [100.0 + i * 0.01 for i in range(10_000)]  # 100–200 ms: one power of two, 10,000 values
    for v in values:
        exact.record(v)
        coarse_w.record(v)
    got, want = coarse_w.histogram(), exact.histogram()
    assert got.count == want.count == 10_000
    distinct = [len(h.to_dict()["buckets"]) // 2 for h in (want, got)]  # (index delta, count) pairs
    assert distinct[0] > 1_000
    assert distinct[1] <= 128
    for q in (50.0, 90.0, 99.0):
        assert got.percentile(q) == pytest.approx(want.percentile(q), rel=1 / 256)
    with pytest.raises(ValueError, match="precision"):
        SlidingWindow(60.0, 12, clock, precision=0)


def test_histogram_reuses_closed_buckets_until_time_or_a_merge_changes_them() -> None:
    """The cached merge of the closed buckets always agrees with the buckets themselves (``count`` sums
    them directly), across a new bucket, records, merges, expiry and reset."""
    clock = FakeClock(0.0)
    w = SlidingWindow(20.0, 4, clock)
    w.record(1.0)
    clock.t = 5.0  # a new bucket: the first one is closed now
    assert w.histogram().count == w.count == 1
    w.record(2.0)  # the current bucket is read fresh every time
    assert w.histogram().count == w.count == 2
    other = SlidingWindow(20.0, 4, clock)
    clock.t = 0.0
    other.record(3.0)  # into the closed bucket's time, through a merge
    clock.t = 5.0
    w.merge_from(other)
    assert w.histogram().count == w.count == 3
    w.merge_bytes(other.to_bytes())
    assert w.histogram().count == w.count == 4
    clock.t = 20.0  # the first bucket expires
    assert w.histogram().count == w.count < 4
    w.reset()
    assert w.histogram().count == w.count == 0
