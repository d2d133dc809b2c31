"""LedgerRow: what the gateway stores about one request (never prompt or completion text)."""

from __future__ import annotations

import msgspec


class LedgerRow(msgspec.Struct, frozen=True):
    """One gateway request, as stored in the ``requests`` table (one column per field, same names).

    Times are milliseconds measured with the monotonic clock (docs/metrics.md); ``ts`` is the one
    wall-clock value, so rows from several replicas line up. A msgspec Struct: the gateway makes one per
    request, and a frozen dataclass of this size cost ~2 % of its CPU to build (docs/benchmarks.md).
    """

    ts: float
    """Wall-clock Unix seconds when the request arrived."""
    request_id: str
    """The ``x-request-id`` the client saw (logs carry the same id)."""
    key_id: str | None
    """Gateway key id (never the key itself); None when the gateway runs without keys."""
    alias: str
    """The model alias the client asked for."""
    provider: str | None
    """Who served it; None when no route was tried."""
    upstream_model: str | None
    """The model name sent upstream."""
    endpoint: str
    """``"chat"``, ``"completions"``, ``"embeddings"``, ``"responses"`` or ``"messages"``."""
    stream: bool
    traffic_class: str | None
    status: int
    """HTTP status returned to the client."""
    outcome: str
    """``"ok"`` or an error class (``"http_5xx"``, ``"timeout_first_token"``, ``"cut"``, ``"no_route"`` …)."""
    attempts: int
    prompt_tokens: int | None
    output_tokens: int | None
    tokens_estimated: bool
    """True when the token counts were counted from chunks rather than taken from ``usage``."""
    ttft_ms: float | None
    e2e_ms: float | None
    overhead_ms: float | None
    """Time the gateway itself added."""
    cost: float | None
    """In the provider's price currency."""
    ttft_answer_ms: float | None = None
    """Time to the first answer token (not reasoning); equals ``ttft_ms`` when the model did not think."""
    reasoning_tokens: int | None = None
    """Of ``output_tokens``, those spent thinking (the upstream's ``reasoning_tokens``); None when unknown."""
    cached_tokens: int | None = None
    """Of ``prompt_tokens``, those the provider served from its prompt cache (``CallResult.cached_tokens``:
    ``prompt_tokens_details.cached_tokens`` or ``prompt_cache_hit_tokens``); None when the provider did not say."""
    api: str = "openai"
    """The client's protocol: ``"openai"`` or ``"anthropic"`` (``/v1/messages``, passthrough or translated)."""
    lane: str = "interactive"
    """How the request was served: ``"interactive"`` (a live request, or a batch line moved to an interactive route
    as its batch's window closed), ``"batch-live"`` (a live request in the batch lane: ``x-tailgate-class: batch`` or
    ``service_tier: "flex"``, at the lowest priority), ``"batch-lane"`` (a batch line run through the gateway's own
    request path at the lowest priority) or ``"provider-batch"`` (a line of a provider's own batch job)."""
    price_tier: str | None = None
    """The price ``cost`` was computed at (``PriceConfig.quote``): ``"standard"``, a time window's name
    (``price.windows``) or ``"batch"`` (``price.batch``); None when the provider has no price."""


COLUMNS: tuple[str, ...] = LedgerRow.__struct_fields__
"""The ``requests`` columns the ledger writes and reads, in LedgerRow field order."""
