"""Mergeable latency statistics: log-linear histograms, sliding windows, time-decayed averages.

Pure and clock-injectable: nothing here does I/O or reads the time except through the clock
a caller passes in (``time.monotonic`` by default).
"""

from tailgate.stats.ewma import EWMA, PeakEWMA
from tailgate.stats.histogram import LatencyHistogram
from tailgate.stats.window import SlidingWindow

__all__ = ["EWMA", "LatencyHistogram", "PeakEWMA", "SlidingWindow"]
