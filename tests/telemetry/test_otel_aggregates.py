"""The GenAI histograms aggregated in place (telemetry/aggregates.py) against the SDK's explicit-bucket
aggregation: the same values give the same points."""

from __future__ import annotations

import random
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from tailgate.telemetry.aggregates import Aggregates
from tailgate.telemetry.spans import AttrValue


def test_histograms_bucket_as_the_sdk_does() -> None:
    """The same values into our aggregate and into the SDK's histogram with the same explicit buckets: the same
    bucket counts, count, sum, min and max per attribute set (a value on a bound falls in that bound's bucket)."""
    bounds = (0.01, 0.02, 0.04, 1.0, 5.0)
    reader = InMemoryMetricReader()
    view = View(instrument_name="h", aggregation=ExplicitBucketHistogramAggregation(list(bounds)))
    sdk = MeterProvider(metric_readers=[reader], views=[view]).get_meter("t").create_histogram("h", unit="s")
    resource, scope = Resource.create({}), InstrumentationScope("t")
    agg = Aggregates(resource, scope)
    ours = agg.histogram("h", "s", "d", bounds)
    rng = random.Random(7)
    for _ in range(2000):
        value = rng.choice([*bounds, 0.0, 0.015, 3.0, 6.0, 1e9, rng.random() * 7])
        attrs: dict[str, AttrValue] = {"op": rng.choice(["chat", "embeddings"]), "error.type": "x"}
        if rng.random() < 0.5:
            del attrs["error.type"]
        sdk.record(value, attrs)
        ours.record(value, dict(reversed(attrs.items())))  # the order of the attributes is no new series
    data = reader.get_metrics_data()
    assert data is not None
    points: Any = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    want = {frozenset(p.attributes.items()): (list(p.bucket_counts), p.count, p.min, p.max, p.sum) for p in points}
    mine = agg.metrics_data()
    got = {
        frozenset(p.attributes.items()): (list(p.bucket_counts), p.count, p.min, p.max, p.sum)
        for p in mine.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    }
    assert set(got) == set(want)
    assert len(got) == 4
    for key, (counts, count, low, high, total) in want.items():
        assert got[key][:4] == (counts, count, low, high)
        assert got[key][4] == pytest.approx(total)
