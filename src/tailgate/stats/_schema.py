"""Shapes other layers depend on: the serialized histogram and the report summary.

Serialized histogram, version 1 (``LatencyHistogram.to_dict``; ``to_bytes`` is the same
mapping in msgpack)::

    {"version": 1, "unit": 0.001, "count": 3, "total": 12.5, "min": 0.5, "max": 9.0,
     "buckets": [d0, c0, d1, c1, ...]}

- ``unit``: the quantum, in the recorded unit (0.001 = 1 µs when recording milliseconds).
- ``count``: values recorded; must equal the sum of the bucket counts.
- ``total``: float sum of the recorded values; ``min``/``max``: exact extremes, ``null`` when
  ``count`` is 0.
- ``buckets``: a flat list of pairs in ascending bucket-index order. ``d`` is the index minus the
  previous pair's index (the first pair's ``d`` is the index itself), so it is >= 1 after the
  first pair; ``c`` is the count, >= 1. Index ``i`` covers the quantized integers ``v`` with
  ``i == v`` for ``v < 4096``, else ``i == (s << 11) + (v >> s)`` with ``s = v.bit_length() - 12``.

A reader rejects a ``version`` it does not know; a change to the layout bumps it.
"""

from __future__ import annotations

from typing import TypedDict

import msgspec

__all__ = ["VERSION", "HistogramDict", "HistogramWire", "Summary"]

VERSION = 1


class Summary(TypedDict):
    """The percentile set every report shows; the key names are a contract."""

    p50: float
    p90: float
    p95: float
    p99: float
    max: float
    mean: float
    count: int


class HistogramDict(TypedDict):
    """The JSON-able form of a histogram (see the module docstring)."""

    version: int
    unit: float
    count: int
    total: float
    min: float | None
    max: float | None
    buckets: list[int]


class HistogramWire(msgspec.Struct):
    """``HistogramDict`` as a msgspec struct: decoding through it gives path-precise type errors
    for free; the semantic checks (counts add up, min <= max, ...) are the histogram's."""

    version: int
    unit: float
    count: int
    total: float
    min: float | None
    max: float | None
    buckets: list[int]
