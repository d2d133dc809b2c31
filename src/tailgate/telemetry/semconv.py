"""The names this package exports under: OpenTelemetry's GenAI semantic conventions, and tailgate's own.

Attribute and metric names follow the GenAI conventions as published (docs/gen-ai in the semantic-conventions
repositories, status Development): the client inference span's attributes (``gen_ai.operation.name``,
``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.response.*``, ``gen_ai.usage.*``), the client
metrics (``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage``) and the model-server metrics
(``gen_ai.server.time_to_first_token``, ``gen_ai.server.time_per_output_token``) with their units and the
bucket boundaries the conventions recommend. ``gen_ai.system`` (the name before ``gen_ai.provider.name``, v1.36
and earlier) is set beside it on the request's span, for the tools that still read it. What the conventions do not name
(the route, why it was chosen, the attempt's role) is under ``tailgate.*``.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "OPERATIONS",
    "provider_name",
]

# -- span attributes: the GenAI conventions ------------------------------------------------------------------------
OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
SYSTEM: Final = "gen_ai.system"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_STREAM: Final = "gen_ai.request.stream"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
CONVERSATION_ID: Final = "gen_ai.conversation.id"
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
TOKEN_TYPE: Final = "gen_ai.token.type"  # noqa: S105  # an attribute name, not a secret
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
HTTP_STATUS: Final = "http.response.status_code"

# -- tailgate's own ------------------------------------------------------------------------------------------------
REQUEST_ID: Final = "tailgate.request_id"
PROVIDER_CONFIG: Final = "tailgate.provider"
"""The provider's name in the gateway's config (``gen_ai.provider.name`` is its kind: ``deepseek``, ``openai`` …)."""
ROUTE: Final = "tailgate.route"
"""``provider/model``: the route an attempt went to."""
ROUTE_RANK: Final = "tailgate.route.rank"
"""The route's place in the request's routing order (0: first)."""
ROUTE_REASON: Final = "tailgate.route.reason"
"""Why the route was tried: ``affinity`` (the conversation's route), ``policy`` (the alias's policy put it first),
``hedge``, ``retry`` (the same route again), ``fallback`` (the next route after a failure)."""
POLICY: Final = "tailgate.routing.policy"
AFFINITY_SOURCE: Final = "tailgate.affinity.source"
"""Where the conversation's affinity key came from: ``header``, ``prompt_cache_key``, ``user``, ``prefix``."""
ATTEMPT: Final = "tailgate.attempt"
"""The attempt's number within its request (1: the first)."""
ATTEMPT_ROLE: Final = "tailgate.attempt.role"
"""``primary``, ``hedge``, ``retry`` or ``fallback``."""
ATTEMPT_OUTCOME: Final = "tailgate.attempt.outcome"
"""``served`` (its whole answer reached the client), ``ok`` (complete, but another attempt served: a lost race),
``cancelled``, or the measurement core's error class (``http_5xx``, ``timeout_first_token``; ``cut`` or
``stream_error`` for a stream that failed after its first token reached the client)."""
ATTEMPTS: Final = "tailgate.attempts"
OUTCOME: Final = "tailgate.outcome"
KEY_ID: Final = "tailgate.key_id"
TRAFFIC_CLASS: Final = "tailgate.traffic_class"
HEDGED: Final = "tailgate.hedged"
COST: Final = "tailgate.cost"
OVERHEAD_MS: Final = "tailgate.overhead_ms"
TOKENS_ESTIMATED: Final = "tailgate.tokens_estimated"

# -- metrics ---------------------------------------------------------------------------------------------------------
OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
TOKEN_USAGE: Final = "gen_ai.client.token.usage"  # noqa: S105  # a metric name
SERVER_TTFT: Final = "gen_ai.server.time_to_first_token"
SERVER_TPOT: Final = "gen_ai.server.time_per_output_token"

DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS: Final = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
TTFT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)

OPERATIONS: Final[dict[str, str]] = {
    "chat": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
    "responses": "chat",
    "messages": "chat",
}
"""The gateway's API names (the ledger's ``endpoint``) → ``gen_ai.operation.name`` (well-known values)."""

_WELL_KNOWN: Final[dict[str, str]] = {
    "openai": "openai",
    "deepseek": "deepseek",
    "moonshot": "moonshot_ai",
    "anthropic": "anthropic",
}
"""Presets whose vendor has a well-known ``gen_ai.provider.name``; other presets are named as themselves."""


def operation(endpoint: str) -> str:
    """``gen_ai.operation.name`` of one of the gateway's APIs (an unknown one is named as itself)."""
    return OPERATIONS.get(endpoint, endpoint)


def provider_name(preset: str | None, name: str) -> str:
    """``gen_ai.provider.name`` of a provider: the conventions' well-known value for its preset's vendor, else the
    preset's name (``siliconflow``, ``vllm`` …), else the provider's name in the config."""
    if preset is None:
        return name
    return _WELL_KNOWN.get(preset, preset)
