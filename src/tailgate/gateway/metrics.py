"""Prometheus metrics of one gateway process (``GET /metrics``). Every metric is in docs/metrics.md.

Label values are aliases, provider names, outcomes and directions — never keys, never prompt text.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

# Label children are cached (``.labels()`` validates, locks and hashes on every call: eight look-ups
# per served request cost more than the increments). Aliases in labels come from clients (an unknown
# model is counted under its name), so the caches stop growing here and fall back to ``.labels()``.
MAX_CACHED = 4096

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
        self.ttft_answer = Histogram(
            "tailgate_ttft_answer_seconds",
            "Time to the first answer token (content or tool call, not reasoning) of served requests.",
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
            "Tokens by provider and direction (input, output; reasoning: the part of output spent thinking).",
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

        self._requests: dict[tuple[str, str, str], Counter] = {}
        self._attempts: dict[tuple[str, str], Counter] = {}
        self._served: dict[tuple[str, str, str], Served] = {}

    def request(self, alias: str, provider: str, outcome: str) -> Counter:
        """``requests.labels(alias, provider, outcome)``, cached."""
        key = (alias, provider, outcome)
        child = self._requests.get(key)
        if child is None:
            child = self.requests.labels(alias, provider, outcome)
            if len(self._requests) < MAX_CACHED:
                self._requests[key] = child
        return child

    def attempt(self, provider: str, outcome: str) -> Counter:
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
        self._m, self._cost_labels = m, (provider, currency)
        self._cost: Counter | None = None

    @property
    def cost(self) -> Counter:
        """Made on first use: a provider without a price shows no cost series at all."""
        if self._cost is None:
            self._cost = self._m.cost.labels(*self._cost_labels)
        return self._cost
