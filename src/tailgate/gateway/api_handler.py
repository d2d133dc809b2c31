"""An API the gateway serves is a handler: one protocol (:class:`Api`), one module per API (gateway/apis/).

The request path (proxy.py) is the same for every API — who asks, the alias, the key's standing, shedding, the
key's limits, the routing order, pacing, breakers, retries, hedging, books — and asks the request's handler,
chosen once by path, what only the API knows:

* ``decode``: the body decoded and validated (a 400 naming the field), as a :class:`Decoded` request;
* ``estimate``: the tokens its reservation and pacing count (estimate.py);
* ``uncarried``: which routes' providers cannot carry it at all (Anthropic's Messages API translated to chat
  cannot carry every field); ``plan``: the upstream attempt for that route — where it goes, what it sends, in
  which dialect (upstream/dialect.py: how the measurement core reads the answer) and how the answer is turned
  back (:class:`Translator`, or None: relayed as it came);
* ``error_body`` (before the first byte) and ``error_frame`` (after it): a refusal or failure in the API's shape.

Adding an API is one module: a class satisfying :class:`Api`, passed to :func:`register` (the built-in ones:
gateway/apis/__init__.py). A server built afterwards serves ``POST /v1<path>`` with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.routing import Route
    from tailgate.upstream import CallResult, Dialect, UpstreamClient
    from tailgate.wire.errors import WireError

__all__ = ["Api", "Attempt", "Decoded", "Translator", "handlers", "register", "uncarried_by", "unregister"]


class Decoded(Protocol):
    """One request as its handler decoded it: what the request path reads of it."""

    @property
    def model(self) -> str: ...

    @property
    def stream(self) -> bool: ...

    @property
    def wants_usage(self) -> bool:
        """The client's stream ends with its usage (chat: ``stream_options.include_usage``)."""
        ...

    @property
    def obj(self) -> Mapping[str, Any]:
        """The body as a JSON object (routing affinity reads it: routing/affinity.py)."""
        ...


class Translator(Protocol):
    """An attempt's answer turned back into the client's API: a whole answer (``message``: a 502 ``WireError``
    when it cannot be), the stream one frame at a time (``chunk``), its end (``done``) and a failure after it
    began (``fail``)."""

    def message(self, raw: bytes) -> bytes: ...

    def chunk(self, raw: bytes) -> bytes: ...

    def done(self) -> bytes: ...

    def fail(self, err: WireError) -> bytes: ...


@dataclass(slots=True)
class Attempt:
    """What one attempt sends, where, in which dialect, and how its answer is turned back."""

    client: UpstreamClient
    path: str
    payload: bytes | Mapping[str, Any]
    dialect: Dialect
    headers: dict[str, str] | None = None
    translated: Translator | None = None
    """None: the answer is relayed as it came."""
    upstream_api: str | None = None
    """``x-tailgate-upstream-api`` on the answer: how the provider was spoken to (None: no such header)."""


class Api(Protocol):
    """One API the gateway serves (see the module docstring)."""

    name: str
    """Its name in the ledger and metrics (``endpoint``): ``chat``, ``messages`` …"""
    path: str
    """Where clients send it, under ``/v1``."""
    protocol: str
    """The client's protocol family: ``openai`` or ``anthropic`` (the ledger's ``api``)."""
    affinity: bool
    """Routing affinity applies (a prompt cache to keep warm; embeddings have none)."""
    judged: bool
    """Its answers' quality is judged (gateway/request_path/answer_quality.py: the signals read chat answers)."""

    def decode(self, body: bytes, headers: Mapping[str, str]) -> Decoded: ...

    def model_of(self, body: bytes) -> str:
        """The model a body asks for, for a refused request's row (a ``WireError`` if none can be read)."""
        ...

    def estimate(self, req: Any, body: bytes, default_max_tokens: int) -> tuple[float, float]:
        """(prompt, output) tokens the request may use (estimate.token_estimate)."""
        ...

    def uncarried(self, req: Any, routes: Sequence[Route], providers: Mapping[str, ProviderState]) -> Set[str]:
        """The providers among ``routes`` that cannot carry ``req`` (never ordered: the request goes to a route that
        can); when none can, the 400 that says why (:func:`uncarried_by`)."""
        ...

    def plan(self, req: Any, provider: ProviderState, route: Route) -> Attempt: ...

    def error_body(self, err: WireError, request_id: str) -> bytes: ...

    def error_frame(self, err: WireError, result: CallResult, translated: Translator | None) -> bytes:
        """The frame that ends a stream failing after its first byte (empty: the upstream's own ended it)."""
        ...


def uncarried_by(
    routes: Sequence[Route], providers: Mapping[str, ProviderState], why: Callable[[ProviderState], WireError | None]
) -> set[str]:
    """The providers among ``routes`` for which ``why`` answers an error: they cannot carry the request. When no
    route of the alias can, the 400 of the first that cannot (it names the field). By provider: whether a route
    can carry a request depends on its provider (native endpoint, thinking switch), not its model."""
    uncarried: dict[str, WireError] = {}
    carried = False
    for route in routes:
        provider = providers.get(route.provider)
        if provider is None or route.provider in uncarried:
            continue
        err = why(provider)
        if err is None:
            carried = True
        else:
            uncarried[route.provider] = err
    if uncarried and not carried:
        raise next(iter(uncarried.values()))
    return set(uncarried)


_HANDLERS: dict[str, Api] = {}


def register(api: Api) -> Api:
    """Serve ``api`` at ``POST /v1<api.path>`` in every gateway built from now on (a path taken twice is an
    error: one handler per path)."""
    taken = _HANDLERS.get(api.path)
    if taken is not None and taken is not api:
        raise ValueError(f"/v1{api.path} is served by {taken.name!r} already")
    _HANDLERS[api.path] = api
    return api


def unregister(api: Api) -> None:
    """Stop serving ``api`` in gateways built from now on (a test's toy API)."""
    if _HANDLERS.get(api.path) is api:
        del _HANDLERS[api.path]


def handlers() -> dict[str, Api]:
    """The registered APIs by path under ``/v1`` (the built-in ones register when gateway/apis/ is imported:
    the proxy imports it)."""
    return dict(_HANDLERS)
