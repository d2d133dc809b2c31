"""A batch line's key, checked when the line runs (docs/batch.md, "Who sees what").

A line of the batch lane is a request through the gateway's own request path, and its key's checks are that path's
(revocation, expiry, models, rpm, tpm, budgets, concurrency). A line of a provider's batch job goes to no request
path: :func:`admit_provider_line` makes the same decisions for it when its job is put together — the key revoked
(or gone), expired, the model not allowed, and its budgets (prompt bound + ``max_tokens`` at the provider's batch
price, reserved per line as a live request reserves them; no tpm window or concurrency slot: a job's line uses no
live rate). The reservation is settled to the line's ledger row when the job answers it, or given back.

A line already in a provider job recorded on it (a job resumed after its replica died or stopped) is never refused:
the provider runs it whatever the gateway decides now, so its answer is recorded and billed; it is reserved for
when the key's budgets allow it (:func:`job_lines`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tailgate.gateway.batch.provider_jobs import provider_body
from tailgate.gateway.request_path.admission import KeyRefused
from tailgate.gateway.request_path.estimate import token_estimate
from tailgate.wire import errors as wire_errors

if TYPE_CHECKING:
    from tailgate.gateway.request_path.admission import Ticket
    from tailgate.gateway.request_path.core import Core
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.ledger.batches import LeasedLine
    from tailgate.routing import Route
    from tailgate.wire.errors import WireError

__all__ = ["BUDGET_REFUSED", "JobLines", "LineRefused", "admit_provider_line", "budget_refused", "job_lines"]

log = logging.getLogger("tailgate.batches")

BUDGET_REFUSED = "budget_exceeded"
"""The ledger outcome (and error code) of a line its key's budget refused: final for a batch line, never retried
(the budget resets at the period's end, not within a ``Retry-After``)."""


class LineRefused(Exception):
    """The key refused a line: ``error`` is its answer in the error file, ``reason`` the refusal's name."""

    def __init__(self, reason: str, error: WireError) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


async def admit_provider_line(
    core: Core, key_id: str | None, body: dict[str, Any], raw: bytes, url: str, provider: ProviderState
) -> Ticket | None:
    """Check and reserve for one line of ``key_id`` bound for ``provider``'s batch job (see the module docstring):
    its ticket (None when the key has nothing to reserve), or :class:`LineRefused`."""
    if key_id is None:
        return None
    gone = core.key_directory.gone(key_id)
    if gone is not None:
        core.admission.refused(key_id, "key_revoked")
        raise LineRefused("key_revoked", wire_errors.authentication_error(gone))
    alias = str(body.get("model", ""))
    default_max = core.routes.pacing.default_max_tokens
    prompt, output = token_estimate(body, raw, default_max, generates=url != "/v1/embeddings")
    rate_in, rate_out, _, _ = provider.config.price.rates(lane="provider-batch")
    try:
        return await core.admission.admit(key_id, alias, prompt, output, (rate_in, rate_out), budgets_only=True)
    except KeyRefused as refused:
        raise LineRefused(refused.reason, refused.error) from None


@dataclass(slots=True)
class JobLines:
    """The lines of one provider job, admitted: ``by_job_id`` (the job's ``custom_id`` → line), its JSONL
    ``payload``, the ``tickets`` reserved (by job ``custom_id``) and the lines the key ``refused``."""

    by_job_id: dict[str, LeasedLine] = field(default_factory=dict)
    payload: list[bytes] = field(default_factory=list)
    tickets: dict[str, Ticket] = field(default_factory=dict)
    refused: list[tuple[LeasedLine, LineRefused]] = field(default_factory=list)


async def job_lines(
    core: Core, key_id: str | None, lines: Sequence[LeasedLine], route: Route, provider: ProviderState, out: JobLines
) -> None:
    """Admit each of ``lines`` (:func:`admit_provider_line`) and write the job's payload into ``out`` (filled as it
    goes: a caller that stops midway still gives back every ticket in it). Each line's body is cleaned for the
    provider (:func:`~tailgate.gateway.batch.provider_jobs.provider_body`)."""
    for line in lines:
        body = json.loads(line.body)
        sent = line.job_provider == provider.name and line.job_id is not None  # in a job the provider runs anyway
        try:
            ticket = await admit_provider_line(core, key_id, body, line.body.encode(), line.url, provider)
        except LineRefused as refused:
            if not sent:
                out.refused.append((line, refused))
                continue
            log.info("batch %s line %r: %s, but already in job %s", line.batch_id, line.custom_id, refused, line.job_id)
            ticket = None
        job_id = f"l{line.line}"
        out.by_job_id[job_id] = line
        if ticket is not None:
            out.tickets[job_id] = ticket
        row = {"custom_id": job_id, "method": "POST", "url": line.url, "body": provider_body(body, route, provider)}
        out.payload.append(json.dumps(row).encode() + b"\n")


def budget_refused(status: int, body: bytes, outcome: str | None) -> bool:
    """Was a lane line refused by its key's budget (``budget_exceeded``: its row's ``outcome``, else its answer's
    code)?"""
    if status != 429:
        return False
    if outcome is not None:
        return outcome == BUDGET_REFUSED
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return False
    return isinstance(error, dict) and error.get("code") == BUDGET_REFUSED
