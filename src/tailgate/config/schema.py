"""The gateway config schema (``tailgate serve --config FILE``, ``tailgate config check FILE``).

Field names users' configs already use (``providers``, ``base_url``, ``preset``, ``api_keys``, ``limits``, ``price``,
``models``, ``routes``, ``provider``, ``model``, ``weight``, ``classes``, ``routing.policy``) are a contract:
add fields freely, rename none. Unknown keys are errors. See docs/config.md for the full reference.
"""

from __future__ import annotations

import ipaddress
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from tailgate.config.loader import did_you_mean
from tailgate.config.units import Fraction, Seconds

Name = Annotated[str, Field(min_length=1, max_length=128)]
PositiveSeconds = Annotated[Seconds, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimeoutsConfig(_Strict):
    """Per-phase upstream timeouts in seconds (``null`` disables one)."""

    connect: PositiveSeconds | None = 5.0
    headers: PositiveSeconds | None = 30.0
    first_token: PositiveSeconds | None = 60.0
    idle: PositiveSeconds | None = 30.0
    total: PositiveSeconds | None = 600.0


class LimitsConfig(_Strict):
    """What is known about a provider's limits (used for pacing and connection pools).

    ``rpm`` and ``tpm`` are for the whole provider entry, all its ``api_keys`` together.
    """

    rpm: Annotated[float, Field(gt=0)] | None = None
    tpm: Annotated[float, Field(gt=0)] | None = None
    max_connections: Annotated[int, Field(ge=1, le=100_000)] = 256


Lane = Literal["interactive", "batch-lane", "provider-batch"]
"""How a request was served (``LedgerRow.lane``): a live request, a batch line run through the gateway's own
request path (the batch lane), or a line of a provider's own batch job."""

_HHMM = re.compile(r"^([01]?[0-9]|2[0-3]):([0-5][0-9])$")


def _minutes(value: str, what: str) -> int:
    m = _HHMM.match(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise ValueError(f"{what} must be a time of day as HH:MM (e.g. '00:30')")
    return int(m.group(1)) * 60 + int(m.group(2))


class PriceWindow(_Strict):
    """A time of day at which the provider bills another price: DeepSeek's off-peak discount (00:30–08:30
    Beijing time, 50 % off), a peak-hour surcharge (``ratio: 2``). ``start``/``end`` are ``HH:MM`` in
    ``timezone`` (IANA, e.g. ``Asia/Shanghai``; daylight saving is followed); a window may cross midnight
    (``start`` after ``end``). The price in it: ``ratio`` × the standard ``input`` / ``output`` /
    ``cached_input``, and any of those three given here replaces its product. ``name`` is the price tier ledger
    rows carry (default ``"HH:MM-HH:MM TZ"``)."""

    name: Name | None = None
    start: str
    end: str
    timezone: str = "UTC"
    ratio: Annotated[float, Field(gt=0)] | None = None
    input: Annotated[float, Field(ge=0)] | None = None
    output: Annotated[float, Field(ge=0)] | None = None
    cached_input: Annotated[float, Field(ge=0)] | None = None

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, value: str, info: ValidationInfo) -> str:
        _minutes(value, str(info.field_name))
        return value.strip()

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown timezone {value!r}: give an IANA name such as 'Asia/Shanghai' or 'UTC'"
            ) from None
        return value

    @model_validator(mode="after")
    def _a_window_with_a_price(self) -> PriceWindow:
        if _minutes(self.start, "start") == _minutes(self.end, "end"):
            raise ValueError(f"start and end are both {self.start}: a window needs a length (use 00:00-23:59)")
        if self.ratio is None and self.input is None and self.output is None and self.cached_input is None:
            raise ValueError("a price window needs ratio (e.g. 0.5 for half price) or input / output / cached_input")
        return self

    @property
    def tier(self) -> str:
        """The price tier ledger rows carry for a request priced in this window."""
        return self.name or f"{self.start}-{self.end} {self.timezone}"

    def contains(self, ts: float) -> bool:
        """Whether Unix time ``ts`` falls in this window (its start included, its end not), in its timezone."""
        local = datetime.fromtimestamp(ts, ZoneInfo(self.timezone))
        minute = local.hour * 60 + local.minute
        start, end = _minutes(self.start, "start"), _minutes(self.end, "end")
        return start <= minute < end if start < end else (minute >= start or minute < end)


class BatchPriceConfig(_Strict):
    """The provider's own batch price per million tokens (``price.batch``): what a line of a provider batch job
    costs. ``input`` / ``output`` unset: ``ratio`` × the interactive price (the preset's ratio when it publishes
    one: Bailian bills batch at 50 %). ``cached_input`` unset: the preset's rule for cache hits in batch, else
    ``input`` — a cache hit in batch billed as any prompt token (Bailian: "batch calls get no context-cache
    discount")."""

    input: Annotated[float, Field(ge=0)] | None = None
    output: Annotated[float, Field(ge=0)] | None = None
    cached_input: Annotated[float, Field(ge=0)] | None = None
    ratio: Annotated[float, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _cached_at_most_input(self) -> BatchPriceConfig:
        if self.cached_input is not None and self.input is not None and self.cached_input > self.input:
            raise ValueError(
                f"cached_input ({self.cached_input:g}) is above input ({self.input:g}): a cache hit in batch is "
                "billed at most at the batch input price"
            )
        return self


class Quote(NamedTuple):
    """What one call costs (in the price's currency) and the price tier it was computed at."""

    cost: float
    tier: str


class PriceConfig(_Strict):
    """Price per million tokens. ``cached_input`` is what a prompt token the provider served from its prompt
    cache costs (DeepSeek's "cache hit" price, Bailian's 20 % of input); unset, such a token costs ``input``.
    ``batch``: the provider's batch price (lines of a provider batch job); ``windows``: times of day billed at
    another price (first matching window wins). ``quote`` prices a call and names its tier."""

    input: Annotated[float, Field(ge=0)] = 0.0
    output: Annotated[float, Field(ge=0)] = 0.0
    cached_input: Annotated[float, Field(ge=0)] | None = None
    currency: str = "CNY"
    batch: BatchPriceConfig | None = None
    windows: list[PriceWindow] = Field(default_factory=list)

    @model_validator(mode="after")
    def _cached_at_most_input(self) -> PriceConfig:
        if self.cached_input is not None and self.cached_input > self.input:
            raise ValueError(
                f"cached_input ({self.cached_input:g}) is above input ({self.input:g}): a cache hit is billed "
                "at a fraction of the input price; set input too"
            )
        return self

    @property
    def cached_rate(self) -> float:
        """The price of a million cached prompt tokens: ``cached_input``, else ``input``."""
        return self.input if self.cached_input is None else self.cached_input

    def input_cost(self, prompt_tokens: int | None, cached_tokens: int | None = None) -> float:
        """What the prompt costs: its cached tokens at ``cached_rate``, the rest at ``input``.

        ``cached_tokens`` None (the provider did not say) prices every prompt token at ``input``; it is
        clamped to ``0 … prompt_tokens`` so a provider's odd usage never yields a negative or inflated cost.
        """
        prompt = max(0, prompt_tokens or 0)
        cached = min(prompt, max(0, cached_tokens or 0))
        return ((prompt - cached) * self.input + cached * self.cached_rate) / 1_000_000

    def cost(self, prompt_tokens: int | None, output_tokens: int | None, cached_tokens: int | None = None) -> float:
        """What one call costs in ``currency``: :meth:`input_cost` plus the output tokens at ``output``."""
        return self.input_cost(prompt_tokens, cached_tokens) + max(0, output_tokens or 0) * self.output / 1_000_000

    def rates(self, *, lane: Lane = "interactive", at: float | None = None) -> tuple[float, float, float, str]:
        """(input, output, cached input) per million tokens and the tier name, for a call on ``lane`` at Unix
        time ``at`` (default now). ``provider-batch`` with ``batch`` set: the batch price, tier ``batch``.
        Otherwise the first window containing ``at`` (tier: its name), else the standard price (``standard``)."""
        if lane == "provider-batch" and self.batch is not None:
            b = self.batch
            ratio = 1.0 if b.ratio is None else b.ratio
            b_in = b.input if b.input is not None else self.input * ratio
            b_out = b.output if b.output is not None else self.output * ratio
            return b_in, b_out, (b.cached_input if b.cached_input is not None else b_in), "batch"
        if self.windows:
            when = time.time() if at is None else at
            for w in self.windows:
                if w.contains(when):
                    ratio = 1.0 if w.ratio is None else w.ratio
                    return (
                        w.input if w.input is not None else self.input * ratio,
                        w.output if w.output is not None else self.output * ratio,
                        w.cached_input if w.cached_input is not None else self.cached_rate * ratio,
                        w.tier,
                    )
        return self.input, self.output, self.cached_rate, "standard"

    def quote(
        self,
        prompt_tokens: int | None,
        output_tokens: int | None,
        cached_tokens: int | None = None,
        *,
        lane: Lane = "interactive",
        at: float | None = None,
    ) -> Quote:
        """What one call costs and the tier it was priced at (:meth:`rates`); cached tokens as in
        :meth:`input_cost` (clamped; None: every prompt token at the input price)."""
        rate_in, rate_out, rate_cached, tier = self.rates(lane=lane, at=at)
        prompt = max(0, prompt_tokens or 0)
        cached = min(prompt, max(0, cached_tokens or 0))
        cost = ((prompt - cached) * rate_in + cached * rate_cached + max(0, output_tokens or 0) * rate_out) / 1_000_000
        return Quote(cost, tier)


class ProviderConfig(_Strict):
    """One upstream provider. ``preset`` fills defaults (base_url, notes); the user's fields win."""

    preset: str | None = None
    base_url: str | None = None
    api_keys: list[SecretStr] = Field(default_factory=list)
    timeouts: TimeoutsConfig | None = None
    limits: LimitsConfig | None = None
    price: PriceConfig | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra request headers sent to this provider (never logged)."""
    anthropic_base_url: str | None = None
    """The provider's own Anthropic Messages API root (the Anthropic SDK's ``base_url``); the preset's for
    DeepSeek and Bailian. ``/v1/messages`` requests routed here are passed through to it."""
    thinking_switch: (
        Literal["thinking", "enable_thinking", "chat_template_kwargs", "reasoning_effort", "none"] | None
    ) = None
    """How this provider's OpenAI chat API turns reasoning on or off, for ``/v1/messages`` requests translated to
    it (their ``thinking``): ``thinking: {type, budget_tokens}`` (the default; DeepSeek, Volcengine, Zhipu),
    ``enable_thinking`` (DashScope, SiliconFlow), ``chat_template_kwargs.enable_thinking`` (vLLM / SGLang serving
    Qwen3), ``reasoning_effort`` (OpenAI), ``none`` (never sent). Unset: the preset's."""
    cache_min_tokens: Annotated[int, Field(ge=0)] | None = None
    """The shortest prompt this provider's prompt cache serves (its documented minimum); unset: the preset's,
    else 64. Conversation affinity applies from the smallest minimum among an alias's routes."""
    drop_fields: list[Annotated[str, Field(min_length=1)]] | None = None
    """Top-level request fields left out of every OpenAI-shaped request (chat, completions, embeddings, responses,
    a translated ``/v1/messages``) before it goes to this provider, because the provider refuses them; every other
    field the client sent goes as sent. Unset: the preset's (``openai``: the vendor fields api.openai.com refuses)."""
    batch_api: bool = False
    """The provider serves OpenAI's Batch API (``/v1/files`` + ``/v1/batches``, e.g. Bailian, Volcengine Ark,
    SiliconFlow, the simulator's presets): the gateway's batch executor may send batch lines routed here as one
    provider job, billed at ``price.batch`` (docs/batch.md, "Paths")."""


class RouteConfig(_Strict):
    """One way to serve an alias: a provider, its upstream model id, a weight, traffic classes."""

    provider: Name
    model: Name
    weight: Annotated[float, Field(ge=0)] = 1.0
    classes: list[Name] = Field(default_factory=list)
    """Traffic classes (``x-tailgate-class``) this route is reserved for / preferred by; empty: all."""


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


class ModelConfig(_Strict):
    """A model alias that clients send as ``model``."""

    routes: list[RouteConfig] = Field(min_length=1)
    policy: PolicyName | None = None
    """This alias's policy; unset: ``routing.policy``."""
    slo: SLOConfig | None = None
    """This alias's latency objective; unset fields: ``routing.slo``'s."""
    hedge: HedgeConfig | None = None
    """Hedge this alias's requests; unset: ``routing.hedge`` (off when that is unset too)."""
    affinity: AffinityOverride | None = None
    """This alias's conversation affinity: the fields given replace ``routing.affinity``'s."""
    quality: QualityOverride | None = None
    """This alias's promise 8 (quality): the fields given replace ``routing.quality``'s."""

    @model_validator(mode="after")
    def _some_weight(self) -> ModelConfig:
        if not any(r.weight > 0 for r in self.routes):
            raise ValueError("at least one route needs a weight above 0")
        return self


class RetryConfig(_Strict):
    """Retry and fall back before the first token: at most ``max_attempts`` routes within ``deadline``."""

    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    deadline: PositiveSeconds = 30.0


class KeyBudgetConfig(_Strict):
    """Token and money budgets of a key per UTC day and calendar month (money in the providers' price currency)."""

    tokens_per_day: Annotated[int, Field(ge=1)] | None = None
    tokens_per_month: Annotated[int, Field(ge=1)] | None = None
    cost_per_day: Annotated[float, Field(gt=0)] | None = None
    cost_per_month: Annotated[float, Field(gt=0)] | None = None


class GatewayKeyConfig(_Strict):
    """A client key. Give ``key`` (hashed at load, never kept) or its ``key_sha256`` (hex)."""

    id: Name
    key: SecretStr | None = None
    key_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    rpm: Annotated[float, Field(gt=0)] | None = None
    tpm: Annotated[float, Field(gt=0)] | None = None
    max_concurrency: Annotated[int, Field(ge=1)] | None = None
    budget: KeyBudgetConfig | None = None
    models: list[Name] | None = None
    """Model aliases this key may use; unset: all."""

    @model_validator(mode="after")
    def _one_secret(self) -> GatewayKeyConfig:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("give exactly one of 'key' or 'key_sha256'")
        return self


class ListenConfig(_Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080


class ServerConfig(_Strict):
    """The gateway's own resource limits toward its clients (docs/reliability.md; defaults in docs/config.md)."""

    max_header_bytes: Annotated[int, Field(ge=256, le=1024 * 1024)] = 8190
    """Longest request line or header field; longer is a 400 in the OpenAI shape."""
    max_headers: Annotated[int, Field(ge=8, le=10_000)] = 128
    body_read_timeout: PositiveSeconds = 30.0
    """The whole request body must arrive within this (408 otherwise): half a body never holds a slot."""
    keepalive_timeout: PositiveSeconds = 75.0
    """An idle connection (and one that never finishes its headers) is closed after this."""
    max_connections: Annotated[int, Field(ge=1)] | None = 4096
    """Open client connections; beyond it a new one gets a 503 with Retry-After and is closed."""
    max_upstream_in_flight: Annotated[int, Field(ge=1)] | None = 1024
    """Upstream attempts in flight across all providers (hedges count); beyond it a 503 with Retry-After."""
    request_deadline: PositiveSeconds | None = 900.0
    """A whole request, stream included; past it a 504 (or an SSE error event once streaming)."""
    admin_max_failures: Annotated[int, Field(ge=1)] = 10
    """Failed admin/dashboard/metrics key checks per client address within ``admin_failure_window``
    before that address gets a 429 for the rest of the window."""
    admin_failure_window: PositiveSeconds = 60.0
    trusted_proxies: list[str] = Field(default_factory=list)
    """CIDRs of the reverse proxies in front of the gateway (``["127.0.0.1/32"]`` for the deploy recipe's
    nginx): from a peer in one of them the client's address is the right-most ``X-Forwarded-For`` entry
    outside them (gateway/access/forwarded.py). Empty: the socket's peer is the client; the header is never read.
    An entry may hold several CIDRs, comma-separated."""
    http_front: Literal["lean", "aiohttp"] = "lean"
    """Who parses the ``/v1`` POSTs: ``lean`` (the gateway's own HTTP/1.1 front door, the hot path's speed;
    every other route still goes to aiohttp on the same port) or ``aiohttp`` (everything through aiohttp)."""

    @field_validator("trusted_proxies")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        """Each entry one CIDR, or several comma-separated (one environment variable can carry a list)."""
        cidrs = [c.strip() for entry in value for c in entry.split(",") if c.strip()]
        for cidr in cidrs:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not an IP network (CIDR, e.g. 10.0.0.0/8 or 127.0.0.1)") from None
        return cidrs


class MetricsConfig(_Strict):
    """Where ``/metrics`` is served: on the main port (default), behind a bearer, or on its own bind."""

    listen: ListenConfig | None = None
    """Serve ``/metrics`` only here (e.g. ``{host: 127.0.0.1, port: 9464}``); the main port answers 404."""
    key: SecretStr | None = None
    """Require ``Authorization: Bearer <key>`` on ``/metrics`` (the admin key is accepted too)."""


class TraceConfig(_Strict):
    """A traffic trace for ``tailgate bench --replay``: arrival times and lengths, never content."""

    path: str | None = None
    """JSONL file appended with one line per request; unset: no trace."""


class LedgerConfig(_Strict):
    """The usage ledger: one row per request, no prompt or completion text."""

    enabled: bool = True
    path: str | None = None
    """SQLite file; default: ``$TAILGATE_DB`` or ``~/.local/share/tailgate/tailgate.db``."""
    batch_size: Annotated[int, Field(ge=1, le=100_000)] = 500
    flush_interval: PositiveSeconds = 0.5
    url: str | None = None
    """``postgresql://…``: the fleet's one store (docs/ledger.md); ``path`` is then this replica's local spool."""
    ship_interval: PositiveSeconds = 1.0
    """With ``url``: how often the spool ships a batch to PostgreSQL (sooner when ``ship_batch`` rows wait)."""
    ship_batch: Annotated[int, Field(ge=1, le=100_000)] = 1000
    retention: PositiveSeconds = 30 * 86400.0
    """Raw request rows older than this are deleted once rolled up into ``usage_hourly``."""
    rollup_retention: PositiveSeconds = 400 * 86400.0
    """Hourly roll-ups older than this are deleted."""
    rollup_interval: PositiveSeconds = 60.0
    """How often the gateway's maintenance task rolls new request rows up into ``usage_hourly``."""
    retention_interval: PositiveSeconds = 3600.0
    """How often (at a roll-up tick, the first tick included) it applies ``retention`` and ``rollup_retention``."""

    @field_validator("url")
    @classmethod
    def _libpq_url(cls, url: str | None) -> str | None:
        # The message never repeats the value: it may hold a password.
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            hint = " (SQLAlchemy's 'postgresql+psycopg://' is not one: drop the '+psycopg')" if "+" in url else ""
            raise ValueError(f"must be a libpq URL starting with postgresql:// or postgres://{hint}")
        return url


class StateConfig(_Strict):
    """Fleet state (docs/fleet.md): ``local`` (this process only, the default) or ``redis`` (a fleet)."""

    backend: Literal["local", "redis"] = "local"
    url: SecretStr | None = None
    """``redis://[user:password@]host:6379/0`` (or ``rediss://``); required with ``backend: redis``. A secret
    (it may hold a password): never printed."""
    namespace: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:{}-]+$")] = "tailgate"
    """Prefix of every Redis key, so several fleets can share one Redis."""
    replica: Name | None = None
    """This replica's id in metrics labels and published data; default ``host:pid``."""
    timeout: PositiveSeconds = 0.005
    """Budget of one Redis call on the request path; past it the local fallback decides that call."""
    sync_interval: PositiveSeconds = 0.25
    """How often fleet views (pauses, breakers, drain flags, generations) are re-read."""
    publish_interval: PositiveSeconds = 1.0
    """How often this replica publishes its health windows for the others to merge."""
    fallback: Literal["local", "closed"] = "local"
    """Redis down or slow: ``local`` decides limits in this process at limit ÷ the replicas last seen
    (the safe default: serve), ``closed`` refuses requests that need a shared limit (429)."""
    replicas_hint: Annotated[int, Field(ge=1)] | None = None
    """Replica count for the fallback's limit split when none was ever seen (default 1)."""

    @model_validator(mode="after")
    def _url_for_redis(self) -> StateConfig:
        if self.backend == "redis" and not self.url:
            raise ValueError("backend redis needs 'url' (e.g. redis://127.0.0.1:6379/0)")
        if self.url is not None and not self.url.get_secret_value().startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("url must start with redis://, rediss:// or unix://")
        return self


class BatchConfig(_Strict):
    """The gateway's Batch API (``/v1/files``, ``/v1/batches``) and its executor (docs/batch.md)."""

    enabled: bool = True
    """Serve the Batch API and run the executor (it needs a store: the ledger, or ``ledger.url``)."""
    max_file_bytes: Annotated[int, Field(ge=1024, le=1024**3)] = 200 * 1024 * 1024
    """The largest upload (OpenAI's 200 MB)."""
    max_lines: Annotated[int, Field(ge=1, le=1_000_000)] = 50_000
    """The most requests one input file may hold (OpenAI's 50,000)."""
    concurrency: Annotated[int, Field(ge=1, le=10_000)] = 16
    """Batch-lane lines this replica runs at once (each one upstream call at the lowest priority)."""
    lease: PositiveSeconds = 120.0
    """How long a leased line is this replica's before another may take it (renewed while it runs)."""
    poll_interval: PositiveSeconds = 1.0
    """How often the executor looks for work, finalises and expires batches."""
    provider_poll_interval: PositiveSeconds = 10.0
    """How often a provider's batch job is polled."""
    provider_job_lines: Annotated[int, Field(ge=1, le=50_000)] = 5_000
    """The most lines sent to a provider in one job."""
    provider_min_left: PositiveSeconds = 43200.0
    """A provider job is created with a ``24h`` window; only a batch with at least this much of its own window
    left (12 h) is sent to a provider's batch API, a batch with less runs on the batch lane."""


class GatewayConfig(_Strict):
    """The whole gateway config file."""

    listen: ListenConfig = Field(default_factory=ListenConfig)
    allow_open: bool = False
    """Bind a non-loopback address without gateway keys (refused unless true)."""
    keys: list[GatewayKeyConfig] = Field(default_factory=list)
    admin_key: SecretStr | None = None
    dashboard_key: SecretStr | None = None
    """A read-only key for the dashboard and its API (with ``keys`` configured they need it or the admin key)."""
    server: ServerConfig = Field(default_factory=ServerConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    max_body_bytes: Annotated[int, Field(ge=1024)] = 8 * 1024 * 1024
    providers: dict[Name, ProviderConfig] = Field(min_length=1)
    models: dict[Name, ModelConfig] = Field(min_length=1)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)
    trace: TraceConfig = Field(default_factory=TraceConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)

    @model_validator(mode="after")
    def _routes_name_known_providers(self) -> GatewayConfig:
        # Raised as a ValidationError with full locations (pydantic keeps them), so the loader can name the
        # file line of the offending route instead of reporting one "(top level)" error.
        problems: list[InitErrorDetails] = []
        known = ", ".join(sorted(self.providers))
        for alias, model in self.models.items():
            for i, route in enumerate(model.routes):
                if route.provider not in self.providers:
                    guess = did_you_mean(route.provider, self.providers)
                    problems.append(
                        {
                            "type": PydanticCustomError(
                                "unknown_provider",
                                "no provider of this name under 'providers' (known: {known})",
                                {"known": known + (f"; {guess}" if guess else "")},
                            ),
                            "loc": ("models", alias, "routes", i, "provider"),
                            "input": route.provider,
                        }
                    )
        seen: set[str] = set()
        for i, key in enumerate(self.keys):
            if key.id in seen:
                problems.append(
                    {
                        "type": PydanticCustomError("duplicate_key_id", "another key already has this id"),
                        "loc": ("keys", i, "id"),
                        "input": key.id,
                    }
                )
            seen.add(key.id)
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self


def load_gateway_config(path: str | Path) -> GatewayConfig:
    """Load, validate and resolve a gateway YAML file (errors name file, line and path; keys are masked).

    The same as ``tailgate.config.resolve.load_resolved(path)[0]``: presets are checked too, and a key that
    lands in an error message (say, pasted where its hash belongs) is masked.
    """
    from tailgate.config.resolve import load_resolved  # resolve imports this module

    return load_resolved(path)[0]
