"""The gateway config schema (``tailgate serve --config FILE``, ``tailgate config check FILE``).

Field names users' configs already use (``providers``, ``base_url``, ``preset``, ``api_keys``, ``limits``, ``price``,
``models``, ``routes``, ``provider``, ``model``, ``weight``, ``classes``, ``routing.policy``) are a contract:
add fields freely, rename none. Unknown keys are errors. See docs/config.md for the full reference.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from tailgate.config.base import Name, PositiveSeconds
from tailgate.config.base import StrictModel as _Strict
from tailgate.config.loader import did_you_mean
from tailgate.config.prices import BatchPriceConfig as BatchPriceConfig
from tailgate.config.prices import Lane as Lane
from tailgate.config.prices import PriceConfig as PriceConfig
from tailgate.config.prices import PriceWindow as PriceWindow
from tailgate.config.prices import Quote as Quote
from tailgate.config.routing_config import AdaptiveSettings as AdaptiveSettings
from tailgate.config.routing_config import AffinityConfig as AffinityConfig
from tailgate.config.routing_config import AffinityOverride as AffinityOverride
from tailgate.config.routing_config import AffinitySource as AffinitySource
from tailgate.config.routing_config import BreakerSettings as BreakerSettings
from tailgate.config.routing_config import HedgeConfig as HedgeConfig
from tailgate.config.routing_config import Margin as Margin
from tailgate.config.routing_config import PacingConfig as PacingConfig
from tailgate.config.routing_config import PolicyName as PolicyName
from tailgate.config.routing_config import ProbesConfig as ProbesConfig
from tailgate.config.routing_config import QualityConfig as QualityConfig
from tailgate.config.routing_config import QualityOverride as QualityOverride
from tailgate.config.routing_config import RoutingConfig as RoutingConfig
from tailgate.config.routing_config import ShedConfig as ShedConfig
from tailgate.config.routing_config import SLOConfig as SLOConfig
from tailgate.config.telemetry_config import ContentConfig as ContentConfig
from tailgate.config.telemetry_config import TelemetryConfig as TelemetryConfig


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
    flex: bool | None = None
    """The provider takes OpenAI's ``service_tier: "flex"`` (flex processing: slower, cheaper; api.openai.com does).
    A request that asks it is in the batch lane either way; to a provider without it the field is not sent (an
    unknown tier is a 400 there). Unset: the preset's (``openai``: yes), else no."""
    batch_api: bool = False
    """The provider serves OpenAI's Batch API (``/v1/files`` + ``/v1/batches``, e.g. Bailian, Volcengine Ark,
    SiliconFlow, the simulator's presets): the gateway's batch executor may send batch lines routed here as one
    provider job, billed at ``price.batch`` (docs/batch.md, "Paths")."""
    propagate_trace: bool = False
    """With ``telemetry`` on, each attempt sent here carries a W3C ``traceparent`` naming its span, so a provider
    that traces (a self-hosted vLLM / SGLang behind its own collector) joins the gateway's trace. Off by default:
    a third party learns nothing of the caller's trace (docs/observability.md)."""


class RouteConfig(_Strict):
    """One way to serve an alias: a provider, its upstream model id, a weight, traffic classes."""

    provider: Name
    model: Name
    weight: Annotated[float, Field(ge=0)] = 1.0
    classes: list[Name] = Field(default_factory=list)
    """Traffic classes (``x-tailgate-class``) this route is reserved for / preferred by; empty: all."""


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
    lane_share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.1
    """The most of a batch (a fraction of its lines) placed on the gateway's batch lane when a cheaper provider
    Batch API path exists: lines ``0 … floor(lane_share × total) - 1`` run on the lane, on the pacing budget live
    traffic leaves, the rest in provider jobs. It bounds the extra cost at ``lane_share`` × (live − batch price);
    0: the whole batch in provider jobs. Without a provider batch path the whole batch is on the lane anyway."""
    close_margin: PositiveSeconds = 900.0
    """When a batch's window has less left than its lines not done need at interactive pace (lines left ÷
    ``concurrency`` × the seconds a line takes, 2 s until measured) plus this margin, those lines move to an
    interactive route: full price and priority, no provider job (one running is cancelled), so the batch completes
    inside its window."""


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
    telemetry: TelemetryConfig | None = None
    """OpenTelemetry traces and GenAI metrics over OTLP (docs/observability.md); unset: off unless the ``OTEL_*``
    environment variables ask for an export."""

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
