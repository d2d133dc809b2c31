"""When a number may be shown, and with what uncertainty: one set of minimums for every face.

A percentile of too few samples is the maximum in disguise, and a rate of a handful of trials says little.
The same minimums apply everywhere a number is printed (monitor probes, gateway traffic, the peak-hour
load test, bench's decay ratio); below them the number is withheld and ``n<K`` is shown in its place.
A proportion (accuracy, reliability) is shown with its 95 % Wilson score interval and its count.
"""

from __future__ import annotations

import math

__all__ = ["MINIMUMS", "enough", "percentile_minimum", "too_few", "wilson"]

MINIMUMS: dict[str, int] = {
    "p50": 5,  # P50 and P90 need at least 5 samples
    "p90": 5,
    "p99": 20,  # P99 of fewer than 20 samples is just the maximum
    "rate": 5,  # reliability % and accuracy %: attempts / graded tasks
    "tok_s": 3,  # an average tok/s
    "buckets": 3,  # min / max / peak-trough: time buckets with a sample
}
"""Smallest sample counts for a number to be shown (else ``None`` and a note ``n<K``)."""

Z95 = 1.959963984540054
"""The standard normal quantile of 97.5 %: a two-sided 95 % interval."""


def percentile_minimum(q: float) -> int:
    """Samples needed to show the ``q``-th percentile: P99 (and above) 20, lower percentiles 5."""
    return MINIMUMS["p99"] if q > 95 else MINIMUMS["p90"]


def enough(n: int, kind: str) -> bool:
    """Whether ``n`` samples are enough for a number of this kind (a ``MINIMUMS`` key)."""
    return n >= MINIMUMS[kind]


def too_few(kind: str) -> str:
    """The note shown in place of a withheld number: ``n<20``."""
    return f"n<{MINIMUMS[kind]}"


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (0–1) from ``successes`` of ``n`` trials.

    Unlike the normal approximation it stays inside [0, 1] and is honest for small ``n`` and for
    proportions near 0 or 1 (Wilson 1927; Brown, Cai & DasGupta 2001 recommend it for n < 40).
    """
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))
