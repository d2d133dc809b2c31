"""Prometheus metrics of one gateway process (``GET /metrics``). Every metric is in docs/metrics.md.

Label values are aliases, provider names, outcomes and directions — never keys, never prompt text.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Latency buckets in seconds: fine around the sub-second TTFTs our users care about, up to minutes.
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300)
_OVERHEAD = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class GatewayMetrics:
    """The gateway's metrics in their own registry (tests and several apps in one process don't clash)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "tailgate_requests",
            "Client requests by alias, serving provider and outcome.",
            ["alias", "provider", "outcome"],
            registry=r,
        )
        self.attempts = Counter(
            "tailgate_upstream_attempts",
            "Upstream attempts by provider and outcome (ok or error class).",
            ["provider", "outcome"],
            registry=r,
        )
        self.ttft = Histogram(
            "tailgate_ttft_seconds",
            "Time to first token of served requests, measured by the gateway.",
            ["alias", "provider"],
            buckets=_LATENCY,
            registry=r,
        )
        self.e2e = Histogram(
            "tailgate_e2e_seconds",
            "End-to-end time of served requests.",
            ["alias", "provider"],
            buckets=_LATENCY,
            registry=r,
        )
        self.overhead = Histogram(
            "tailgate_overhead_seconds",
            "Time spent in the gateway itself (total minus waiting on providers).",
            ["alias"],
            buckets=_OVERHEAD,
            registry=r,
        )
        self.tokens = Counter(
            "tailgate_tokens",
            "Tokens by provider and direction (input, output).",
            ["provider", "direction"],
            registry=r,
        )
        self.cost = Counter(
            "tailgate_cost", "Cost by provider in its price currency.", ["provider", "currency"], registry=r
        )
        self.in_flight = Gauge(
            "tailgate_in_flight", "Upstream requests in flight by provider.", ["provider"], registry=r
        )
        self.breaker_transitions = Counter(
            "tailgate_breaker_transitions",
            "Circuit breaker state changes by provider and new state.",
            ["provider", "state"],
            registry=r,
        )
        self.provider_state = Gauge(
            "tailgate_provider_active",
            "1 if the provider takes new requests (not drained or paused).",
            ["provider"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
