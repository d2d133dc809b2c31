"""The GenAI histograms aggregated in place, handed to the SDK's OTLP metric exporter once per interval.

A request's metric points cost a bisect and a few increments here (:meth:`Histogram.record`), where the SDK's
synchronous instrument (``Histogram.record``: attribute hashing, view matching, its aggregation's lock) costs
~14 µs a point on the caller's thread. What reaches the collector is the same: per attribute set, the
explicit-bucket histogram the SDK's ``ExplicitBucketHistogramAggregation`` would have built (bucket ``i`` counts
the values ``bounds[i-1] < v <= bounds[i]``; count, sum, min, max), cumulative temporality, start time the
series' first point. :class:`MetricPump` builds the SDK's own ``MetricsData`` from them every ``interval`` on a
thread of its own and hands it to the official OTLP metric exporter (HTTP/protobuf or gRPC), which encodes and
sends it.

Nothing here imports the SDK until :meth:`Aggregates.metrics_data` is called, on the export thread.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any

from tailgate.telemetry.spans import AttrValue

__all__ = ["Aggregates", "Histogram", "MetricPump"]

log = logging.getLogger("tailgate.telemetry")


class _Series:
    __slots__ = ("attributes", "count", "counts", "max", "min", "start_ns", "sum")

    def __init__(self, attributes: Mapping[str, AttrValue], buckets: int) -> None:
        self.attributes = dict(attributes)
        self.start_ns = time.time_ns()
        self.counts = [0] * buckets
        self.count = 0
        self.sum = 0.0
        self.min = float("inf")
        self.max = float("-inf")


class Histogram:
    """One explicit-bucket histogram, a series per attribute set (see the module docstring)."""

    __slots__ = ("_lock", "_series", "bounds", "description", "name", "unit")

    def __init__(self, name: str, unit: str, description: str, bounds: Sequence[float], lock: threading.Lock) -> None:
        self.name, self.unit, self.description = name, unit, description
        self.bounds = tuple(float(b) for b in bounds)
        self._series: dict[frozenset[tuple[str, AttrValue]], _Series] = {}
        self._lock = lock

    def record(self, value: float, attributes: Mapping[str, AttrValue]) -> None:
        key = frozenset(attributes.items())
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series(attributes, len(self.bounds) + 1)
            series.counts[bisect_left(self.bounds, value)] += 1
            series.count += 1
            series.sum += value
            if value < series.min:
                series.min = value
            if value > series.max:
                series.max = value

    def snapshot(self) -> list[tuple[dict[str, AttrValue], int, int, float, list[int], float, float]]:
        """Each series as ``(attributes, start_ns, count, sum, bucket counts, min, max)``, copied (hold the lock)."""
        return [(s.attributes, s.start_ns, s.count, s.sum, list(s.counts), s.min, s.max) for s in self._series.values()]


class Aggregates:
    """The exporter's histograms, one lock between the recording thread and the export thread."""

    def __init__(self, resource: Any, scope: Any) -> None:
        self._lock = threading.Lock()
        self._resource, self._scope = resource, scope
        self.histograms: list[Histogram] = []

    def histogram(self, name: str, unit: str, description: str, bounds: Sequence[float]) -> Histogram:
        h = Histogram(name, unit, description, bounds, self._lock)
        self.histograms.append(h)
        return h

    def metrics_data(self) -> Any:
        """The SDK's ``MetricsData`` of every series so far (cumulative), or None when nothing was recorded."""
        from opentelemetry.sdk.metrics.export import (
            AggregationTemporality,
            HistogramDataPoint,
            Metric,
            MetricsData,
            ResourceMetrics,
            ScopeMetrics,
        )
        from opentelemetry.sdk.metrics.export import Histogram as HistogramData

        with self._lock:
            snaps = [(h, h.snapshot()) for h in self.histograms]
        now = time.time_ns()
        metrics = [
            Metric(
                name=h.name,
                description=h.description,
                unit=h.unit,
                data=HistogramData(
                    data_points=[
                        HistogramDataPoint(
                            attributes=attrs,
                            start_time_unix_nano=start,
                            time_unix_nano=now,
                            count=count,
                            sum=total,
                            bucket_counts=counts,
                            explicit_bounds=h.bounds,
                            min=low,
                            max=high,
                        )
                        for attrs, start, count, total, counts, low, high in snap
                    ],
                    aggregation_temporality=AggregationTemporality.CUMULATIVE,
                ),
            )
            for h, snap in snaps
            if snap
        ]
        if not metrics:
            return None
        scope = ScopeMetrics(scope=self._scope, metrics=metrics, schema_url=self._scope.schema_url or "")
        return MetricsData(
            resource_metrics=[
                ResourceMetrics(resource=self._resource, scope_metrics=[scope], schema_url=self._resource.schema_url)
            ]
        )


class MetricPump:
    """Every ``interval_s``, the aggregates' ``MetricsData`` to the OTLP metric exporter, on a daemon thread; a
    last export at :meth:`shutdown`. An export that fails is logged and the next one carries the totals
    (cumulative): nothing is lost but the moment."""

    def __init__(self, aggregates: Aggregates, exporter: Any, interval_s: float, timeout_s: float) -> None:
        self._aggregates, self._exporter = aggregates, exporter
        self._interval, self._timeout_ms = interval_s, timeout_s * 1000.0
        self._stop = threading.Event()
        self._export_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tailgate-otel-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.export()

    def export(self) -> None:
        """Export the totals now (blocking)."""
        with self._export_lock:
            try:
                data = self._aggregates.metrics_data()
                if data is not None:
                    self._exporter.export(data, timeout_millis=self._timeout_ms)
            except Exception:  # the exporter's own bug: the next interval tries again
                log.exception("OTLP metric export failed")

    def shutdown(self, timeout_s: float) -> None:
        """Stop the thread, export the totals once more, close the exporter."""
        self._stop.set()
        self._thread.join(timeout_s)
        self.export()
        self._exporter.shutdown(timeout_millis=timeout_s * 1000.0)
