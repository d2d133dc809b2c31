"""The gateway's own counters and histograms (``LocalSeries``) expose exactly what prometheus_client would."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tailgate.gateway.metrics.gateway_metrics import GatewayMetrics, LocalSeries

BUCKETS = (0.005, 0.01, 0.5, 1, 300)
# bounds themselves (a value equal to a bound is in that bucket), between, below the first, above the last
VALUES = (0.0, -1.0, 0.005, 0.0050001, 0.01, 0.3, 0.5, 1.0, 299.9, 300.0, 300.1, 1e9)


def _samples(text: bytes) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Every sample but the ``_created`` timestamps, in exposition order."""
    return [
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if not s.name.endswith("_created")
    ]


def test_same_exposition_as_prometheus_client() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    counter = Counter("t_requests", "Requests.", ["alias", "outcome"], registry=theirs)
    hist = Histogram("t_seconds", "Seconds.", ["alias"], buckets=BUCKETS, registry=theirs)
    local = LocalSeries(ours)
    our_counter = local.counter("t_requests", "Requests.", ("alias", "outcome"))
    our_hist = local.histogram("t_seconds", "Seconds.", ("alias",), BUCKETS)
    for i, v in enumerate(VALUES):
        alias = "a" if i % 3 else 'we"ird\\alias'
        hist.labels(alias).observe(v)
        our_hist.labels(alias).observe(v)
        counter.labels(alias, "ok").inc(abs(v) % 7)
        our_counter.labels(alias, "ok").inc(abs(v) % 7)
    counter.labels("a", "timeout").inc()
    our_counter.labels("a", "timeout").inc()
    text_theirs, text_ours = generate_latest(theirs), generate_latest(ours)
    assert _samples(text_ours) == _samples(text_theirs)
    assert len(_samples(text_ours)) == 2 * (len(BUCKETS) + 1 + 2) + 3  # two histogram children, three counters
    created = [line for line in text_ours.decode().splitlines() if line.startswith("t_seconds_created")]
    assert len(created) == 2  # a _created series per child, as prometheus_client writes


def test_counter_refuses_negative_and_wrong_label_count() -> None:
    local = LocalSeries(CollectorRegistry())
    c = local.counter("t_things", "Things.", ("a", "b"))
    with pytest.raises(ValueError, match="non-negative"):
        c.labels("x", "y").inc(-1)
    with pytest.raises(ValueError, match="t_things: 1 label values"):
        c.labels("x")
    assert c.labels("x", "y") is c.labels("x", "y")  # one child per label values


def test_gateway_uses_prometheus_client_under_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """``--workers N`` needs the values in prometheus_client's shared files; one process gets the local series."""
    assert isinstance(GatewayMetrics().requests, type(LocalSeries(CollectorRegistry()).counter("x", "x", ())))
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert isinstance(GatewayMetrics().requests, Counter)
