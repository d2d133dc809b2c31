"""One client request as it moves through the gateway (:class:`Ctx`).

The request context is the proxy's: it creates one per request, fills it in as the request walks down (front →
proxy → key gate → routing order → provider admission → ``upstream.call`` → reply) and hands it to the books
(bookkeeping.py) when it ends. The owners below the proxy (the key gate, the route table, the providers)
answer with decisions and never write it; ``refusals`` and ``bookkeeping`` read it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailgate.gateway.access.key_directory import KeyLimits
    from tailgate.gateway.request_path.admission import Ticket
    from tailgate.gateway.request_path.answer_quality import Observed
    from tailgate.gateway.request_path.hedging import Race
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.gateway.request_path.routes import RouteTable
    from tailgate.gateway.request_path.tracing import RequestTrace
    from tailgate.routing import Route
    from tailgate.state import Admission
    from tailgate.upstream import CallResult

__all__ = ["Ctx", "Held"]


@dataclass(slots=True, eq=False)
class Held:
    """A non-answer held back (see ``Ctx.held``): what ``Attempts.release`` sends if no other route answers."""

    obs: Observed
    provider: ProviderState
    upstream: Any
    """The attempt's plan (``api_handler.Attempt``): its headers."""
    body: bytes
    """The whole answer, or a stream's frames up to its end joined."""
    stream: bool
    done: bytes = b""
    """A stream's end frame."""
    result: CallResult | None = None


@dataclass(slots=True)
class Ctx:
    """One client request as it moves through the gateway."""

    request_id: str
    endpoint: str
    """The API's name (gateway/api_handler.py: ``chat``, ``messages`` …), as the ledger and metrics say it."""
    table: RouteTable
    """The route table read when the request arrived: its routing and settings to its end (routes.py)."""
    t0: float = field(default_factory=time.perf_counter)
    wall: float = field(default_factory=time.time)
    key_id: str | None = None
    limits: KeyLimits | None = None
    """The caller's key's limits, looked up once when its standing is checked (proxy.py ``_check_key``)."""
    alias: str = "-"
    stream: bool = False
    traffic_class: str | None = None
    attempts: int = 0
    upstream_s: float = 0.0
    """Time spent waiting on providers (all attempts), for the overhead figure."""
    provider: ProviderState | None = None
    route: Route | None = None
    result: CallResult | None = None
    status: int = 0
    outcome: str = "ok"
    first_token_at: float | None = None
    race: Race | None = None
    """Set while a hedged request's attempts race (hedging.py): the first to claim owns the response."""
    hedged: bool = False
    """The hedge (not the first attempt) served the response: ``x-tailgate-hedged: 1``."""
    ticket: Ticket | None = None
    """What the key's limits reserved (admission.py); settled by its bookkeeping (bookkeeping.py)."""
    rpm_taken: Admission | None = None
    """The key's rpm window counted this request (gateway.fleet); given back if it never went upstream."""
    ratelimit: dict[str, str] | None = None
    """A limited key's ``x-ratelimit-*`` headers, worked out at admission (admission.ratelimit_headers)."""
    affinity_key: int | None = None
    """The conversation's affinity key (routing/affinity.py), when the route was chosen by it: the provider's
    API key is picked by it too (``KeyPool.pick``)."""
    prompt_estimate: float | None = None
    """The gateway's own count of the prompt (its upper bound, ``estimate.prompt_bound``): what a cut stream is
    charged when the provider never said (bookkeeping.py)."""

    lane: str = "interactive"
    """How the request is served, as its ledger row says it (``LedgerRow.lane``): ``batch-live`` for a live request in
    the batch lane (its class ``batch``, or ``service_tier: "flex"``; set by the proxy when it orders attempts)."""

    self_call: bool = False
    """The gateway's own request (a batch line, ``access/auth.py`` ``SelfCall``): only such a request's ledger row
    may be taken by the books' divert hook (bookkeeping.py), never a client's whatever its ``x-request-id``."""

    usage: tuple[int | None, int | None, float | None, bool] | None = None
    """(prompt, output, cost, prompt estimated) once the request ended: worked out once by its books
    (bookkeeping.py) for both the key's settlement and the ledger row."""

    protocol: str = "openai"
    """The client's protocol family (the API's ``protocol``): ``openai``, or ``anthropic`` (``/v1/messages``)."""

    may_retry: bool = False
    """Another route is left for this attempt's request: a non-answer may be held (answer_quality.py)."""
    quality: Observed | None = None
    """The served chat attempt, for its quality signals (judged by the books: answer_quality.py)."""
    held: Held | None = None
    """A non-answer (content-filtered or empty) held before its first byte while another route is tried; sent
    as it is if none answers (``Attempts.release``)."""
    retried: str | None = None
    """Why an answer was held and the request retried (``x-tailgate-retried``)."""
    trace: RequestTrace | None = None
    """This request's trace notes (tracing.py), when telemetry traces it; None otherwise."""

    @property
    def api(self) -> str:
        """The client's protocol (see ``protocol``)."""
        return self.protocol

    def overhead_ms(self, now: float) -> float:
        return max(0.0, (now - self.t0 - self.upstream_s) * 1000.0)
