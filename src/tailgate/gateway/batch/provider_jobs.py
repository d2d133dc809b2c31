"""A provider's batch job for a group of lines, recorded in the store so that it outlives the replica that sent it
(docs/batch.md, "Provider jobs survive a replica").

The executor (``batch_exec.py``) sends a group of leased lines as one job: the JSONL is uploaded, the job created,
then polled. The provider's file id is written to the lines (``batch_lines.job_provider`` / ``job_file``) right
after the upload and its batch id (``job_id``) right after the create, **before the first poll**. A replica that
dies while its job runs leaves its lines leased; once the leases expire another replica leases them and finds the
job on them: it polls that job instead of sending the lines again (the provider would bill them twice). A line
recorded with a file but no job (a death between the upload and the create) is looked up among the provider's
batches by its input file; when none was made from it, the lines are uploaded afresh (the old file may hold lines
another replica now holds: two jobs from one file would run those twice).

A line goes to the job as :func:`provider_body` makes it, and its answer becomes the ledger row of
:func:`provider_line_row`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp

from tailgate.ledger import batch_lines as line_store
from tailgate.ledger.batches import LeasedLine
from tailgate.ledger.row import LedgerRow
from tailgate.ledger.store import StoreConn
from tailgate.wire.batch import BatchResponse

if TYPE_CHECKING:
    from tailgate.config.prices import PriceConfig
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.routing import Route

__all__ = [
    "JobLost",
    "job_groups",
    "job_key",
    "json_call",
    "open_job",
    "provider_body",
    "provider_line_row",
    "usage_of",
]

log = logging.getLogger("tailgate.batches")

_T = TypeVar("_T")
_ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
    "/v1/responses": "responses",
}
Store = Callable[[Callable[[StoreConn], _T]], Awaitable[_T]]
_STREAM_FIELDS = ("stream", "stream_options")
"""A batch job's line is answered whole: OpenAI's Batch API (and those who copy it) refuse a streaming line."""


class JobLost(RuntimeError):
    """The provider does not know a recorded job (or its file): the lines were forgotten, to be sent again."""


def job_key(line: LeasedLine) -> tuple[str | None, str | None, str | None]:
    """The recorded job a leased line belongs to — lines with the same key are resumed together."""
    return line.job_provider, line.job_file, line.job_id


def job_groups(lines: Sequence[LeasedLine]) -> dict[tuple[str | None, str | None, str | None], list[LeasedLine]]:
    """Leased lines by their recorded job (:func:`job_key`): each group is resumed, or sent, as one job."""
    groups: dict[tuple[str | None, str | None, str | None], list[LeasedLine]] = {}
    for line in lines:
        groups.setdefault(job_key(line), []).append(line)
    return groups


async def json_call(request: Any) -> dict[str, Any]:
    """An HTTP call's JSON object; ``HTTPStatusError`` for a 4xx / 5xx."""
    async with request as r:
        data = await r.read()
        if r.status >= 400:
            raise HTTPStatusError(r.status, data[:300].decode("utf-8", "replace"))
        out = json.loads(data)
        assert isinstance(out, dict)
        return out


class HTTPStatusError(RuntimeError):
    """A provider answered a Files / Batch API call with a 4xx or 5xx (``status``)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text}")
        self.status = status


async def open_job(
    http: aiohttp.ClientSession,
    base: str,
    auth: dict[str, str],
    *,
    store: Store[Any],
    owner: str,
    batch_id: str,
    provider: str,
    lines: Sequence[LeasedLine],
    payload: bytes,
    endpoint: str,
) -> tuple[dict[str, Any], bool]:
    """The provider job for ``lines`` (all of one :func:`job_key`): the recorded one resumed, or a new one sent and
    recorded. Returns the job object and whether it was resumed. ``JobLost`` when the provider does not know the
    recorded job (the lines' record is cleared first: they are sent again on a later lease)."""
    ids = [line.custom_id for line in lines]
    jp, file_id, job_id = job_key(lines[0])
    if jp != provider:  # another provider's job (its route gone) or none: a new job here
        file_id = job_id = None
    if job_id is not None:
        try:
            return await json_call(http.get(f"{base}/batches/{job_id}", headers=auth)), True
        except HTTPStatusError as exc:
            if exc.status != 404:
                raise
            await store(lambda c: line_store.forget_job(c, batch_id, ids))
            raise JobLost(f"{provider} does not know its job {job_id}: the lines are sent again") from exc
    if file_id is not None:  # uploaded, then the sender died: was the job created?
        found = await _job_on_file(http, base, auth, file_id)
        if found is not None:
            on_file, found_id = file_id, str(found["id"])
            await store(
                lambda c: line_store.record_job(
                    c, batch_id, ids, owner=owner, provider=provider, file_id=on_file, job_id=found_id
                )
            )
            return found, True
        # No job was made from it: upload these lines afresh (the old file may hold lines another replica now
        # holds; two jobs from one file would run those twice).
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", payload, filename=f"{batch_id}.jsonl", content_type="application/jsonl")
    uploaded = await json_call(http.post(f"{base}/files", data=form, headers=auth))
    file_id = str(uploaded["id"])
    await store(lambda c: line_store.record_job(c, batch_id, ids, owner=owner, provider=provider, file_id=file_id))
    created = await json_call(
        http.post(
            f"{base}/batches",
            json={"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h"},
            headers=auth,
        )
    )
    job, sent_file = str(created["id"]), file_id
    marked = await store(
        lambda c: line_store.record_job(c, batch_id, ids, owner=owner, provider=provider, file_id=sent_file, job_id=job)
    )
    if marked < len(ids):
        log.warning(
            "batch %s: %d of %d lines of job %s were no longer leased here", batch_id, len(ids) - marked, len(ids), job
        )
    return created, False


async def _job_on_file(
    http: aiohttp.ClientSession, base: str, auth: dict[str, str], file_id: str
) -> dict[str, Any] | None:
    """The provider's batch created from ``file_id`` among its newest 100, if any."""
    page = await json_call(http.get(f"{base}/batches", params={"limit": "100"}, headers=auth))
    for job in page.get("data") or ():
        if isinstance(job, dict) and job.get("input_file_id") == file_id:
            return job
    return None


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


def usage_of(usage: Any) -> tuple[int | None, int | None, int | None]:
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


def provider_line_row(
    batch_id: str,
    key_id: str | None,
    route: Route,
    provider: str,
    price: PriceConfig,
    line: LeasedLine,
    resp: BatchResponse,
    elapsed_ms: float,
) -> LedgerRow:
    """The ledger row of a line a provider's job answered: lane ``provider-batch``, priced at ``price.batch``."""
    body = resp.body if isinstance(resp.body, dict) else {}
    prompt, output, cached = usage_of(body.get("usage"))
    ok = 200 <= resp.status_code < 300
    quote = price.quote(prompt, output, cached, lane="provider-batch") if ok else None
    priced = quote is not None and bool(price.input or price.output)
    return LedgerRow(
        ts=time.time(),
        request_id=resp.request_id or f"{batch_id}-{line.line}",
        key_id=key_id,
        alias=route.alias,
        provider=provider,
        upstream_model=route.model,
        endpoint=_ENDPOINTS.get(line.url, line.url),
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
