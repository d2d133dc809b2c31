"""A batch line's key, checked when the line runs (docs/batch.md, "Who sees what").

A line of the batch lane is a request through the gateway's own request path, and its key's checks are that path's
(revocation, expiry, models, rpm, tpm, budgets, concurrency). A line of a provider's batch job goes to no request
path: :func:`admit_provider_line` makes the same decisions for it when its job is put together — the key revoked
(or gone), expired, the model not allowed, and its budgets (prompt bound + ``max_tokens`` at the provider's batch
price, reserved per line as a live request reserves them; no tpm window or concurrency slot: a job's line uses no
live rate). The reservation is settled to the line's ledger row when the job answers it, or given back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tailgate.gateway.request_path.admission import KeyRefused
from tailgate.gateway.request_path.estimate import token_estimate
from tailgate.wire import errors as wire_errors

if TYPE_CHECKING:
    from tailgate.gateway.request_path.admission import Ticket
    from tailgate.gateway.request_path.core import Core
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.wire.errors import WireError

__all__ = ["BUDGET_REFUSED", "LineRefused", "admit_provider_line"]

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
