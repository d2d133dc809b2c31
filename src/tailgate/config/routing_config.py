"""The routing settings of the gateway config (``routing:`` and a model's overrides): policy, SLOs, hedging,
probes, pacing, shedding, breakers, the adaptive policy, conversation affinity and answer quality
(docs/config.md, docs/routing.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tailgate.config.base import Name, PositiveSeconds
from tailgate.config.base import StrictModel as _Strict
from tailgate.config.units import Fraction, Seconds

__all__ = [
    "AdaptiveSettings",
    "AffinityConfig",
    "AffinityOverride",
    "AffinitySource",
    "BreakerSettings",
    "HedgeConfig",
    "Margin",
    "PacingConfig",
    "PolicyName",
    "ProbesConfig",
    "QualityConfig",
    "QualityOverride",
    "RoutingConfig",
    "SLOConfig",
    "ShedConfig",
]


PolicyName = Literal["weighted", "adaptive", "least-latency", "cost"]


class SLOConfig(_Strict):
    """A latency objective: P90 time to first token and P90 end-to-end (defaults 1 s and 3 s)."""

    ttft_p90: PositiveSeconds | None = None
    e2e_p90: PositiveSeconds | None = None


class HedgeConfig(_Strict):
    """Send a second attempt to the next route when the first has no first token after ``after``."""

    after: Literal["p90", "p95", "p99"] | PositiveSeconds = "p90"
    """A percentile of the first route's measured TTFT (60 s window), or a fixed duration."""
    budget: Fraction = 0.05
    """At most this fraction of the alias's requests (sliding 60 s) are hedged."""


class ProbesConfig(_Strict):
    """Active probes: a tiny standardized streamed chat request per provider × upstream model."""

    enabled: bool = True
    interval: PositiveSeconds = 10.0
    jitter: Fraction = 0.2
    """Each wait is ``interval × (1 ± jitter × u)``, u uniform in [-1, 1], so probes do not align."""
    timeout: PositiveSeconds = 10.0
    max_tokens: Annotated[int, Field(ge=1, le=256)] = 8
    half_open_gap: Seconds = 0.1
    """Pause between probes while a provider's breaker is half-open (its trials)."""
    degraded_interval: PositiveSeconds = 1.0
    """Probe interval while the adaptive policy holds a route below half its weight: fresh evidence, so a
    recovery is seen in seconds rather than when the bad samples leave the window."""


class PacingConfig(_Strict):
    """Pacing below ``providers.NAME.limits.rpm`` / ``tpm`` (token buckets) and pausing on a 429."""

    enabled: bool = True
    headroom: Annotated[float, Field(gt=0, le=1)] = 0.9
    """Buckets fill at this fraction of the limit (0.9: pace at 90 %, leaving room for clock skew)."""
    burst: PositiveSeconds = 1.0
    """Bucket size, in seconds of the paced rate."""
    default_max_tokens: Annotated[int, Field(ge=1)] = 256
    """Output tokens assumed for a request without ``max_tokens`` (TPM estimate)."""
    max_pause: PositiveSeconds = 300.0
    """Longest pause a 429's Retry-After / x-ratelimit-reset-* can impose."""
    batch_wait: Annotated[Seconds, Field(ge=0)] = 30.0
    """How long a live batch-lane request (``x-tailgate-class: batch`` or ``service_tier: "flex"``) may wait at a
    provider's pacer for the budget interactive traffic leaves, instead of moving on or being refused; 0: never
    waits. Also bounded by ``routing.retry.deadline``. Interactive requests never wait (docs/routing.md)."""


class ShedConfig(_Strict):
    """Load shedding by traffic class: under pressure ``batch`` is refused first (a 429 with Retry-After).

    Pressure = requests in flight in this gateway process ÷ ``max_in_flight``; unset: never shed.
    """

    max_in_flight: Annotated[int, Field(ge=1)] | None = None
    thresholds: dict[Name, Annotated[float, Field(gt=0)]] = Field(default_factory=lambda: {"batch": 0.8})
    """Pressure at which a class is shed (batch at 80 %); other classes only at 100 %."""
    retry_after: PositiveSeconds = 1.0


class BreakerSettings(_Strict):
    """Circuit breaker numbers (one breaker per provider); docs/routing.md explains each."""

    error_rate: Annotated[float, Field(gt=0, le=1)] = 0.5
    """Open when the fault rate over ``window`` reaches this, with at least ``min_samples`` outcomes."""
    min_samples: Annotated[int, Field(ge=1)] = 20
    window: PositiveSeconds = 30.0
    consecutive_failures: Annotated[int, Field(ge=1)] = 5
    cooldown: PositiveSeconds = 5.0
    """First cool-down; doubles on each re-open, jittered ±20 %, up to ``max_cooldown``."""
    max_cooldown: PositiveSeconds = 10.0
    """With probes on, the half-open trials are probes (no client request is risked), so a long back-off only
    delays re-admission: 10 s keeps a restored provider's return within ~25 s (inside the 30 s a failover drill
    allows)."""
    trial_requests: Annotated[int, Field(ge=1)] = 3

    @model_validator(mode="after")
    def _order(self) -> BreakerSettings:
        if self.max_cooldown < self.cooldown:
            raise ValueError("max_cooldown must be at least cooldown")
        return self


class AdaptiveSettings(_Strict):
    """The ``adaptive`` policy's numbers (docs/routing.md explains each and why the defaults)."""

    floor: Annotated[float, Field(ge=0, le=1)] = 0.01
    """When every route is over its SLO: the least share of the traffic a closed-breaker route keeps."""
    min_samples: Annotated[int, Field(ge=1)] = 10
    exponent: Annotated[float, Field(gt=0)] = 4.0
    error_rate_zero: Annotated[float, Field(gt=0, le=1)] = 0.5
    """The fault rate at which the error factor reaches 0."""
    recompute: PositiveSeconds = 0.25
    smoothing_down: PositiveSeconds = 1.0
    """Time constant towards a lower health factor (fast: distrust quickly)."""
    smoothing_up: PositiveSeconds = 3.0
    """Unused since the slow start became linear (``slow_start``); kept so existing configs load."""
    far_ratio: Annotated[float, Field(gt=1)] = 2.0
    """P90 at this many times the SLO is *far* over it: no client traffic while another route meets it."""
    fast_window: PositiveSeconds = 1.5
    """First-token evidence: attempts decided in the last ``fast_window`` plus those still waiting."""
    fast_min_misses: Annotated[int, Field(ge=1)] = 3
    readmit_after: Annotated[int, Field(ge=1)] = 3
    """Probe results within the SLO, in a row, that re-admit a demoted route."""
    slow_start: PositiveSeconds = 15.0
    """A re-admitted route's factor climbs linearly, 0 → 1 in this long."""


AffinitySource = Literal["header", "prompt_cache_key", "user", "prefix"]
AFFINITY_SOURCES: tuple[AffinitySource, ...] = ("header", "prompt_cache_key", "user", "prefix")


class AffinityConfig(_Strict):
    """Conversation affinity (docs/routing.md, promise 7): a conversation's requests go to one route (weighted
    rendezvous over the routes the policy admits), so the provider's prompt cache stays warm."""

    enabled: bool = True
    sources: list[AffinitySource] = Field(default_factory=lambda: list(AFFINITY_SOURCES))
    """Where the key comes from, first that has one: ``header`` (``x-session-id``), ``prompt_cache_key``,
    ``user`` (Anthropic: ``metadata.user_id``), ``prefix`` (a hash of the system prompt + first user message)."""
    prefix_chars: Annotated[int, Field(ge=16, le=1_000_000)] = 512
    """Characters of each stable-prefix part hashed (its head and tail halves and its length beyond that)."""
    epsilon: Annotated[float, Field(gt=0, le=1)] = 0.1
    """Hot-key bound: a route carries at most its share + epsilon of the alias's affinity assignments."""
    window: Annotated[int, Field(ge=4, le=1_000_000)] = 1000
    """Recent affinity assignments (per alias, per process) the bound is measured over."""

    @field_validator("sources")
    @classmethod
    def _sources(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("give at least one source (header, prompt_cache_key, user, prefix), or enabled: false")
        if len(set(v)) != len(v):
            raise ValueError(f"each source at most once, got {v}")
        return v


class AffinityOverride(_Strict):
    """``models.<alias>.affinity``: the fields given replace ``routing.affinity``'s for this alias."""

    enabled: bool | None = None
    sources: list[AffinitySource] | None = None
    prefix_chars: Annotated[int, Field(ge=16, le=1_000_000)] | None = None
    epsilon: Annotated[float, Field(gt=0, le=1)] | None = None
    window: Annotated[int, Field(ge=4, le=1_000_000)] | None = None

    @field_validator("sources")
    @classmethod
    def _sources(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else AffinityConfig._sources(v)


Margin = Annotated[float, Field(ge=0, lt=1)]


class QualityConfig(_Strict):
    """Promise 8 (docs/routing.md): a route whose quality on a signal is significantly worse than the alias's best
    route's gets no client request while another route takes them, until it has recovered."""

    enabled: bool = True
    window: PositiveSeconds = 600.0
    """The sliding window the counts per provider × model × signal are judged over."""
    recent: PositiveSeconds = 120.0
    """Live-traffic signals are also judged over the last ``recent`` alone (at most ``window``)."""
    margin: Margin = 0.03
    """Canary signals: held when the route's upper bound is more than this below the best route's lower bound."""
    traffic_margin: Margin = 0.01
    """Live-traffic failure signals (tool calls, empty answers, content-filter refusals, …): the same, this margin."""
    min_samples: Annotated[int, Field(ge=1, le=1_000_000)] = 20
    """Trials the route and the best route each need in the window before anything moves."""
    signals: list[Name] | None = None
    """The signals judged (``canary``, ``tool_call``, ``empty``, ``content_filter``, ``json``, ``reasoning``);
    unset: all."""
    retry_empty: bool = True
    """A chat answer that ended with no output (``finish_reason`` ``stop``, no content, no tool call, no
    reasoning) is not sent: the request moves to the next route before the first byte (docs/routing.md)."""
    retry_filtered: bool = False
    """The same for a ``content_filter`` / ``sensitive`` refusal with no output. Off by default: a provider's
    refusal may be the policy the operator wants; turn it on per alias where another provider may answer."""
    refresh: PositiveSeconds = 5.0
    """How often the gateway adds its counts to the store (``quality_counts``) and reads back the fleet's
    and the monitor's canaries (``routing.quality`` only: one loop per gateway)."""

    @model_validator(mode="after")
    def _recent_within_window(self) -> QualityConfig:
        if self.recent > self.window:
            raise PydanticCustomError(
                "recent_over_window",
                "recent ({recent}s) must be at most window ({window}s)",
                {"recent": self.recent, "window": self.window},
            )
        return self

    def merged(self, own: QualityOverride | None) -> QualityConfig:
        """This config with an alias's ``models.<alias>.quality`` fields on top (the fields it gives)."""
        if own is None:
            return self
        fields = self.model_dump() | own.model_dump(exclude_none=True)
        if own.recent is None:
            fields["recent"] = min(fields["recent"], fields["window"])  # an alias's shorter window bounds it
        return QualityConfig.model_validate(fields)


class QualityOverride(_Strict):
    """``models.<alias>.quality``: the fields given replace ``routing.quality``'s for this alias."""

    enabled: bool | None = None
    window: PositiveSeconds | None = None
    recent: PositiveSeconds | None = None
    margin: Margin | None = None
    traffic_margin: Margin | None = None
    min_samples: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    signals: list[Name] | None = None
    retry_empty: bool | None = None
    retry_filtered: bool | None = None

    @model_validator(mode="after")
    def _recent_within_window(self) -> QualityOverride:
        if self.recent is not None and self.window is not None and self.recent > self.window:
            raise PydanticCustomError(
                "recent_over_window",
                "recent ({recent}s) must be at most window ({window}s)",
                {"recent": self.recent, "window": self.window},
            )
        return self


class RoutingConfig(_Strict):
    policy: PolicyName = "adaptive"
    adaptive: AdaptiveSettings = Field(default_factory=AdaptiveSettings)
    window: PositiveSeconds = 60.0
    """Health window: P50/P90/P99, error rates and tok/s are over the last ``window`` (12 buckets)."""
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    slo: SLOConfig = Field(default_factory=SLOConfig)
    hedge: HedgeConfig | None = None
    probes: ProbesConfig = Field(default_factory=ProbesConfig)
    pacing: PacingConfig = Field(default_factory=PacingConfig)
    shed: ShedConfig = Field(default_factory=ShedConfig)
    affinity: AffinityConfig = Field(default_factory=AffinityConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig)
