"""The public face of tailgate.stats."""

import tailgate.stats


def test_public_names_change_only_on_purpose() -> None:
    """tailgate.stats exports exactly these four names."""
    assert sorted(tailgate.stats.__all__) == ["EWMA", "LatencyHistogram", "PeakEWMA", "SlidingWindow"]
    for name in tailgate.stats.__all__:
        assert getattr(tailgate.stats, name).__module__.startswith("tailgate.stats.")
