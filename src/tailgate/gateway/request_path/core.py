"""The owners a request needs, in one plain holder (no behaviour of its own).

The composition root (``app.py``) builds the owners and this holder, hands it to the proxy, and swaps
``routes``, ``providers`` and ``keys`` in it on reload (one assignment each). A request reads ``routes`` once,
when it arrives (routes.py); everything else here lives as long as the gateway. Modules below the root get
this holder or, better, only the owners they use — never the gateway; one that reads what a reload swaps
(the admin endpoints, the reloader, the pools' collector) gets it as :class:`InForce`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tailgate.gateway.access.auth import KeyRing
    from tailgate.gateway.access.key_directory import KeyDirectory
    from tailgate.gateway.fleet.fleet_sync import Fleet
    from tailgate.gateway.metrics.gateway_metrics import GatewayMetrics
    from tailgate.gateway.request_path.admission import KeyAdmission
    from tailgate.gateway.request_path.answer_quality import AnswerQuality
    from tailgate.gateway.request_path.bookkeeping import Books
    from tailgate.gateway.request_path.providers import Providers
    from tailgate.gateway.request_path.routes import RouteTable
    from tailgate.gateway.request_path.tracing import Tracing
    from tailgate.routing import BreakerRegistry, HealthRegistry

__all__ = ["Core", "InForce"]


class InForce(Protocol):
    """The route table and providers in force now (a reload swaps them): :class:`Core` is one."""

    @property
    def routes(self) -> RouteTable: ...

    @property
    def providers(self) -> Providers: ...


@dataclass(slots=True, eq=False)
class Core:
    """See the module docstring. ``routes``, ``providers`` and ``keys`` are swapped whole by a reload."""

    routes: RouteTable
    """The route table (routes.py): read once per request."""
    providers: Providers
    """Every provider's live state, by name (providers.py)."""
    keys: KeyRing
    """The gateway keys and the admin key (access/auth.py)."""
    key_directory: KeyDirectory
    """The store's runtime keys and every key's limits (access/key_directory.py)."""
    admission: KeyAdmission
    """The key gate: reserve, free the slot, settle (admission.py)."""
    fleet: Fleet
    """What this replica shares with the fleet: rpm, pacing demand, pauses, breakers (fleet/fleet_sync.py)."""
    books: Books
    """Ended requests' bookkeeping (bookkeeping.py)."""
    metrics: GatewayMetrics
    """Every Prometheus object the request path counts in (``paced``, ``shed``, ``provider_keys_revoked``,
    ``count_tokens``, the served series; metrics/gateway_metrics.py)."""
    health: HealthRegistry
    breakers: BreakerRegistry
    quality: AnswerQuality | None = None
    """Chat answers' quality signals and the non-answer retry (answer_quality.py); None: not judged."""
    tracing: Tracing | None = None
    """Who is traced (tracing.py), when telemetry exports traces; None: no request is."""
