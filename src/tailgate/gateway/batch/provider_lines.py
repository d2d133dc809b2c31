"""A line of a provider's batch job, both ways: the body the gateway uploads for it, and the ledger row of its answer
(docs/batch.md, "Paths")."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from tailgate.ledger.row import LedgerRow

if TYPE_CHECKING:
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.routing import Route
    from tailgate.wire.batch import BatchResponse

__all__ = ["ENDPOINTS", "json_call", "provider_body", "provider_row", "usage"]

ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "responses",
}
"""A line's url → the API's name, as the ledger says it."""

_STREAM_FIELDS = ("stream", "stream_options")
"""A batch job's line is answered whole: OpenAI's Batch API (and those who copy it) refuse a streaming line."""


def provider_body(body: dict[str, Any], route: Route, provider: ProviderState) -> dict[str, Any]:
    """What goes to ``provider``'s batch job for a client's line ``body``: the route's model, no stream fields, and the
    fields the provider is known to refuse left out as for a live request (``drop_fields``; ``service_tier: "flex"``
    unless ``providers.NAME.flex``)."""
    cfg = provider.config
    out = {k: v for k, v in body.items() if k not in _STREAM_FIELDS and k not in cfg.drop_fields}
    if out.get("service_tier") == "flex" and not cfg.flex:
        del out["service_tier"]
    out["model"] = route.model
    return out


def provider_row(
    batch_id: str,
    key_id: str | None,
    route: Route,
    provider: ProviderState,
    line: int,
    url: str,
    resp: BatchResponse,
    elapsed_ms: float,
) -> LedgerRow:
    """The ledger row of one line a provider's job answered: lane ``provider-batch``, priced at ``price.batch``."""
    body = resp.body if isinstance(resp.body, dict) else {}
    prompt, output, cached = usage(body.get("usage"))
    ok = 200 <= resp.status_code < 300
    price = provider.config.price
    quote = price.quote(prompt, output, cached, lane="provider-batch") if ok else None
    priced = quote is not None and bool(price.input or price.output)
    return LedgerRow(
        ts=time.time(),
        request_id=resp.request_id or f"{batch_id}-{line}",
        key_id=key_id,
        alias=route.alias,
        provider=provider.name,
        upstream_model=route.model,
        endpoint=ENDPOINTS.get(url, url),
        stream=False,
        traffic_class="batch",
        status=resp.status_code,
        outcome="ok" if ok else "upstream_error",
        attempts=1,
        prompt_tokens=prompt,
        output_tokens=output,
        tokens_estimated=False,
        ttft_ms=None,
        e2e_ms=elapsed_ms,
        overhead_ms=None,
        cost=quote.cost if priced and quote is not None else None,
        cached_tokens=cached,
        lane="provider-batch",
        price_tier=quote.tier if priced and quote is not None else None,
    )


async def json_call(request: Any) -> dict[str, Any]:
    """The JSON object an aiohttp request answers (a ``RuntimeError`` naming the status for a 4xx / 5xx)."""
    async with request as r:
        data = await r.read()
        if r.status >= 400:
            raise RuntimeError(f"HTTP {r.status}: {data[:300].decode('utf-8', 'replace')}")
        out = json.loads(data)
        assert isinstance(out, dict)
        return out


def usage(usage: Any) -> tuple[int | None, int | None, int | None]:
    """(prompt, output, cached) tokens from a chat / completions / embeddings / responses ``usage``."""
    if not isinstance(usage, dict):
        return None, None, None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    output = usage.get("completion_tokens", usage.get("output_tokens"))
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return (
        int(prompt) if isinstance(prompt, int) else None,
        int(output) if isinstance(output, int) else (0 if isinstance(prompt, int) else None),
        int(cached) if isinstance(cached, int) else None,
    )
