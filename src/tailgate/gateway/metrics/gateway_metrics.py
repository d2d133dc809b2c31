"""Prometheus metrics of one gateway process (``GET /metrics``). Every metric is in docs/metrics.md.

The one owner of the gateway's Prometheus objects: every counter, histogram and gauge is made here, in one
registry, and handed to the module that counts it (the proxy's shed / paced / revoked counters, the hedgers',
the probes', the fleet's state series, the gauges ``/metrics`` sets at scrape). The collectors that read a
store or the pools at scrape time are registered by ``store_metrics``. The key gate's own counters are still
made in ``admission.py``.

Label values are aliases, provider names, outcomes and directions — never keys, never prompt text.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.utils import floatToGoString

from tailgate.quality.metrics import QualityMetrics

# Label children are cached (``.labels()`` validates, locks and hashes on every call: eight look-ups
# per served request cost more than the increments). Aliases in labels come from clients (an unknown
# model is counted under its name), so the caches stop growing here and fall back to ``.labels()``.
MAX_CACHED = 4096

# Latency buckets in seconds: fine around the sub-second TTFTs our users care about, up to minutes.
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300)
_OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class Incrementable(Protocol):
    def inc(self, amount: float = 1.0) -> None: ...


class Observable(Protocol):
    def observe(self, amount: float) -> None: ...


class CounterFamily(Protocol):
    def labels(self, *values: str) -> Incrementable: ...


class HistogramFamily(Protocol):
    def labels(self, *values: str) -> Observable: ...


class GatewayMetrics:
    """The gateway's metrics in their own registry (tests and several apps in one process don't clash).

    Counters and histograms are :class:`LocalSeries` (no lock, a bisect per observation) in one process, and
    prometheus_client's own under ``--workers N`` (its multiprocess mode: values in shared files, summed at
    scrape). Gauges are set at scrape and stay prometheus_client's.
    """

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self._local: LocalSeries | None = None if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else LocalSeries(r)
        self.requests = self._counter(
            "tailgate_requests",
            "Client requests by alias, serving provider, outcome and the client's API (openai, anthropic).",
            ("alias", "provider", "outcome", "api"),
        )
        self.attempts = self._counter(
            "tailgate_upstream_attempts",
            "Upstream attempts by provider and outcome (ok or error class).",
            ("provider", "outcome"),
        )
        self.ttft = self._histogram(
            "tailgate_ttft_seconds",
            "Time to first token of served requests, measured by the gateway.",
            ("alias", "provider"),
            _LATENCY,
        )
        self.ttft_answer = self._histogram(
            "tailgate_ttft_answer_seconds",
            "Time to the first answer token (content or tool call, not reasoning) of served requests.",
            ("alias", "provider"),
            _LATENCY,
        )
        self.e2e = self._histogram(
            "tailgate_e2e_seconds", "End-to-end time of served requests.", ("alias", "provider"), _LATENCY
        )
        self.overhead = self._histogram(
            "tailgate_overhead_seconds",
            "Time spent in the gateway itself (total minus waiting on providers).",
            ("alias",),
            _OVERHEAD,
        )
        self.tokens = self._counter(
            "tailgate_tokens",
            "Tokens by provider and direction (input, output; reasoning: the part of output spent thinking; "
            "cached: the part of input the provider served from its prompt cache).",
            ("provider", "direction"),
        )
        self.cost = self._counter("tailgate_cost", "Cost by provider in its price currency.", ("provider", "currency"))
        self.in_flight = Gauge(
            "tailgate_in_flight", "Upstream requests in flight by provider.", ["provider"], registry=r
        )
        self.breaker_transitions = self._counter(
            "tailgate_breaker_transitions",
            "Circuit breaker state changes by provider and new state.",
            ("provider", "state"),
        )
        self.provider_state = Gauge(
            "tailgate_provider_active",
            "1 if the provider takes new requests (not drained or paused).",
            ["provider"],
            registry=r,
        )

        self.paced = Counter(
            "tailgate_paced",
            "Attempts skipped because the provider's pacer (limits.rpm/tpm, or a 429's pause) could not admit them.",
            ["provider"],
            registry=r,
        )
        self.shed = Counter(
            "tailgate_shed",
            "Requests refused by load shedding (routing.shed), by alias and traffic class.",
            ["alias", "traffic_class"],
            registry=r,
        )
        self.provider_keys_revoked = Counter(
            "tailgate_provider_keys_revoked",
            "Provider API keys taken out of rotation after the provider refused them (401/403).",
            ["provider"],
            registry=r,
        )
        self.count_tokens = Counter(
            "tailgate_count_tokens",
            "POST /v1/messages/count_tokens requests by alias, the provider that counted ('' when none) and status.",
            ["alias", "provider", "status"],
            registry=r,
        )
        self.hedges = hedge_counter(r)
        # answer quality (tailgate.quality.metrics): checked / hit per provider x upstream model x signal
        self.quality = QualityMetrics(counter=self._counter)
        self.quality_retries = self._counter(
            "tailgate_quality_retries",
            "Answers that were not answers (reason: content_filtered, empty_answer) held before the first byte and "
            "retried on another route, by alias and the provider that gave them.",
            ("alias", "provider", "reason"),
        )
        self.probes = Counter(
            "tailgate_probes",
            "Active probes by provider and outcome (ok, an error class, or paced = skipped by the pacer).",
            ["provider", "outcome"],
            registry=r,
        )
        self.effective_weight = Gauge(
            "tailgate_effective_weight",
            "A route's effective weight under its alias's policy (configured weight x health factor), at scrape.",
            ["alias", "provider"],
            registry=r,
        )
        self.breaker_state = Gauge(
            "tailgate_breaker_state",
            "Circuit breaker state per provider at scrape: 0 closed, 1 half-open, 2 open.",
            ["provider"],
            registry=r,
        )
        self.state = StateSeries(r)

        self._requests: dict[tuple[str, str, str, str], Incrementable] = {}
        self._attempts: dict[tuple[str, str], Incrementable] = {}
        self._served: dict[tuple[str, str, str], Served] = {}

    def show_providers(self, providers: Mapping[str, HasDrained]) -> None:
        """``tailgate_provider_active``: 1 for a provider that takes new requests, 0 for a drained one."""
        for name, p in providers.items():
            self.provider_state.labels(name).set(0 if p.drained else 1)

    def _counter(self, name: str, doc: str, labels: tuple[str, ...]) -> CounterFamily:
        if self._local is not None:
            return self._local.counter(name, doc, labels)
        return Counter(name, doc, labels, registry=self.registry)

    def _histogram(self, name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> HistogramFamily:
        if self._local is not None:
            return self._local.histogram(name, doc, labels, buckets)
        return Histogram(name, doc, labels, buckets=buckets, registry=self.registry)

    def request(self, alias: str, provider: str, outcome: str, api: str = "openai") -> Incrementable:
        """``requests.labels(alias, provider, outcome, api)``, cached."""
        key = (alias, provider, outcome, api)
        child = self._requests.get(key)
        if child is None:
            child = self.requests.labels(alias, provider, outcome, api)
            if len(self._requests) < MAX_CACHED:
                self._requests[key] = child
        return child

    def attempt(self, provider: str, outcome: str) -> Incrementable:
        """``attempts.labels(provider, outcome)``, cached."""
        key = (provider, outcome)
        child = self._attempts.get(key)
        if child is None:
            child = self.attempts.labels(provider, outcome)
            if len(self._attempts) < MAX_CACHED:
                self._attempts[key] = child
        return child

    def served(self, alias: str, provider: str, currency: str) -> Served:
        """The children a served request of this alias and provider updates, cached."""
        key = (alias, provider, currency)
        children = self._served.get(key)
        if children is None:
            children = Served(self, alias, provider, currency)
            if len(self._served) < MAX_CACHED:
                self._served[key] = children
        return children

    def render(self, replica: str | None = None) -> bytes:
        """The exposition. Under ``tailgate serve --workers N`` (``PROMETHEUS_MULTIPROC_DIR`` set by serve.py)
        every worker's samples merged: counters and histograms summed, gauges per worker (``pid``), so any
        worker answers for the host. With ``replica``, every series carries ``replica="..."`` (a fleet)."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            merged = CollectorRegistry()
            MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
            text = generate_latest(merged)
        else:
            text = generate_latest(self.registry)
        return with_label(text, "replica", replica) if replica else text


def hedge_counter(registry: CollectorRegistry) -> Counter:
    """``tailgate_hedges``: made by :class:`GatewayMetrics`; alone for a hedger built without a gateway (tests)."""
    return Counter(
        "tailgate_hedges",
        "Hedged requests by alias and outcome (fired, won, lost, failed, no_budget, no_route).",
        ["alias", "outcome"],
        registry=registry,
    )


class HasDrained(Protocol):
    @property
    def drained(self) -> bool: ...


class StateSeries:
    """The fleet state's series (``tailgate_state_*``): set by the fleet's sync loop (fleet/fleet_sync.py)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.connected = Gauge(
            "tailgate_state_connected",
            "1 while the state backend answers (always 1 for state: local).",
            registry=registry,
        )
        self.fallback_active = Gauge(
            "tailgate_state_fallback_active",
            "1 while shared decisions are made by the local fallback (Redis down or slow).",
            registry=registry,
        )
        self.fallbacks = Counter(
            "tailgate_state_fallback",
            "Decisions made by the local fallback instead of the state backend (Redis down, slow or failing).",
            registry=registry,
        )
        self.replicas = Gauge(
            "tailgate_state_replicas", "Replicas of the fleet seen alive (this one included).", registry=registry
        )
        self.limit_takes = Counter(
            "tailgate_state_limit_takes",
            "Shared-limit takes by where they were decided: local (a leased slice) or backend (a round trip).",
            ["where"],
            registry=registry,
        )
        self.calls = Counter(
            "tailgate_state_calls",
            "Calls this replica made to the state backend (Redis round trips) for requests and their background "
            "work (allowances, settlements); the sync loop's one per tick is not counted. 0 for state: local.",
            registry=registry,
        )


def with_label(text: bytes, name: str, value: str) -> bytes:
    """Add ``name="value"`` as the first label of every sample line of a Prometheus text exposition."""
    label = f'{name}="{value.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'.encode()
    out = []
    for line in text.split(b"\n"):
        if not line or line.startswith(b"#"):
            out.append(line)
            continue
        brace, space = line.find(b"{"), line.find(b" ")
        if brace != -1 and (space == -1 or brace < space):
            out.append(
                line[: brace + 1] + label + (b"," if line[brace + 1 : brace + 2] != b"}" else b"") + line[brace + 1 :]
            )
        else:
            out.append(line[:space] + b"{" + label + b"}" + line[space:])
    return b"\n".join(out)


class Served:
    """The label children of one (alias, provider): what every served request observes."""

    __slots__ = (
        "_cost",
        "_cost_labels",
        "_m",
        "cached_tokens",
        "e2e",
        "input_tokens",
        "output_tokens",
        "overhead",
        "reasoning_tokens",
        "ttft",
        "ttft_answer",
    )

    def __init__(self, m: GatewayMetrics, alias: str, provider: str, currency: str) -> None:
        self.e2e = m.e2e.labels(alias, provider)
        self.ttft = m.ttft.labels(alias, provider)
        self.overhead = m.overhead.labels(alias)
        self.input_tokens = m.tokens.labels(provider, "input")
        self.output_tokens = m.tokens.labels(provider, "output")
        self.ttft_answer = m.ttft_answer.labels(alias, provider)
        self.reasoning_tokens = m.tokens.labels(provider, "reasoning")
        self.cached_tokens = m.tokens.labels(provider, "cached")
        self._m, self._cost_labels = m, (provider, currency)
        self._cost: Incrementable | None = None

    @property
    def cost(self) -> Incrementable:
        """Made on first use: a provider without a price shows no cost series at all."""
        if self._cost is None:
            self._cost = self._m.cost.labels(*self._cost_labels)
        return self._cost


class LocalSeries:
    """Counters and histograms of one process, rendered by a collector in ``registry``.

    prometheus_client takes a lock per increment and scans a histogram's buckets one by one: with four
    histograms and five counters per request that was ~6 µs of a request's ~220 µs at 50 connections. Here
    a counter is a float and an observation one ``bisect``. No lock: the gateway updates and renders its
    metrics on its event loop, one thread. The exposition is prometheus_client's, sample for sample.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._families: list[_CounterFamily | _HistogramFamily] = []
        registry.register(self)

    def counter(self, name: str, doc: str, labels: tuple[str, ...]) -> _CounterFamily:
        f = _CounterFamily(name, doc, labels)
        self._families.append(f)
        return f

    def histogram(self, name: str, doc: str, labels: tuple[str, ...], buckets: Sequence[float]) -> _HistogramFamily:
        f = _HistogramFamily(name, doc, labels, buckets)
        self._families.append(f)
        return f

    def collect(self) -> Iterator[Metric]:
        created = getattr(prometheus_metrics, "_use_created", True)  # PROMETHEUS_DISABLE_CREATED_SERIES
        for f in self._families:
            yield f.collect(created)


class _Count:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class _Hist:
    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds  # the last is +Inf
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1  # the first bucket whose bound is >= amount
        self.sum += amount


C = TypeVar("C", _Count, _Hist)


class _Family(Generic[C]):
    """One counter or histogram: its children by label values."""

    def __init__(self, name: str, doc: str, labels: tuple[str, ...], make: Callable[[], C]) -> None:
        self.name, self.doc, self.labelnames = name, doc, labels
        self._make: Callable[[], C] = make
        self.children: dict[tuple[str, ...], C] = {}

    def labels(self, *values: str) -> C:
        key = tuple(str(v) for v in values)
        child = self.children.get(key)
        if child is None:
            if len(key) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(key)} label values for labels {self.labelnames}")
            child = self.children[key] = self._make()
        return child


class _CounterFamily(_Family[_Count]):
    def __init__(self, name: str, doc: str, labels: tuple[str, ...]) -> None:
        super().__init__(name, doc, labels, _Count)

    def collect(self, created: bool) -> Metric:
        name, m = self.name, Metric(self.name, self.doc, "counter")
        for key, c in self.children.items():
            labels = dict(zip(self.labelnames, key, strict=True))
            m.add_sample(f"{name}_total", labels, c.value)
            if created:
                m.add_sample(f"{name}_created", labels, c.created)
        return m


class _HistogramFamily(_Family[_Hist]):
    def __init__(self, name: str, doc: str, labels: tuple[str, ...], buckets: Sequence[float]) -> None:
        bounds = (*sorted(float(b) for b in buckets), float("inf"))
        super().__init__(name, doc, labels, lambda: _Hist(bounds))
        self._les = [_go_float(b) for b in bounds]

    def collect(self, created: bool) -> Metric:
        name, m = self.name, Metric(self.name, self.doc, "histogram")
        for key, h in self.children.items():
            labels = dict(zip(self.labelnames, key, strict=True))
            acc = 0
            for le, n in zip(self._les, h.counts, strict=True):
                acc += n
                m.add_sample(f"{name}_bucket", {**labels, "le": le}, float(acc))
            m.add_sample(f"{name}_count", labels, float(acc))
            m.add_sample(f"{name}_sum", labels, h.sum)
            if created:
                m.add_sample(f"{name}_created", labels, h.created)
        return m


def _go_float(bound: float) -> str:
    """A bucket bound as prometheus_client writes ``le``."""
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]
