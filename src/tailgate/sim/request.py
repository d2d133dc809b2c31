"""What the simulated provider's endpoints share: one request's bookkeeping (:class:`Ctx`), the way to drop a
connection (:class:`Abort`), and the two faces they are handed — the provider (:class:`Model`) and the
handlers' shared checks (:class:`Handlers`).

A leaf: ``server`` (chat, completions), ``responses``, ``embeddings`` and ``control`` all take these, so none of
them imports another to reach back up, and ``provider`` (which starts the HTTP face) sits on top.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

if TYPE_CHECKING:
    from tailgate.sim.engine import Engine, Sequence
    from tailgate.sim.faults import Faults, RateLimiter
    from tailgate.sim.prefix_cache import PrefixCache
    from tailgate.sim.spec import ProviderSpec
    from tailgate.sim.truth import TruthLog
    from tailgate.wire.types import ChatCompletionRequest, CompletionRequest

__all__ = ["Abort", "BatchState", "Ctx", "Handlers", "Model", "api_key"]


def api_key(request: web.Request) -> str:
    """The API key a request carries: ``Authorization: Bearer X``, or Anthropic's ``x-api-key: X``."""
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key", "").strip()  # Anthropic's SDKs send the key here


class Abort(Exception):
    """Drop the connection without a response (disconnect / reset faults)."""


class Ctx:
    """Per-request bookkeeping shared by every endpoint."""

    __slots__ = ("api", "fault", "headers", "recorded", "rid", "t0", "wall")

    def __init__(self, request: web.Request, rid: str) -> None:
        self.t0 = time.perf_counter()
        self.wall = time.time()
        self.rid = rid
        """Given at arrival, so every ground-truth row (a 429 too) carries the request's real id."""
        self.fault: str | None = None
        self.recorded = False
        self.api = "anthropic" if rid.startswith("msg_") else "openai"
        """The protocol the client spoke: every truth row of the request says it."""
        self.headers: dict[str, str] = {}
        if (client_rid := request.headers.get("x-request-id")) is not None:
            self.headers["x-request-id"] = client_rid[:200]


class BatchState(Protocol):
    """The provider's batch side as ``/sim/state`` sees it (``sim.batches.SimBatches``)."""

    def snapshot(self) -> dict[str, object]: ...


class Model(Protocol):
    """The simulated provider as its endpoints see it (``sim.provider.SimProvider``)."""

    spec: ProviderSpec
    name: str
    rng: random.Random
    faults: Faults
    limiter: RateLimiter
    truth: TruthLog
    engine: Engine
    started_at_wall: float
    prefix_cache: PrefixCache | None
    held: int
    batches: BatchState | None

    @property
    def url(self) -> str: ...

    def set_faults(self, update: Faults) -> Faults: ...

    def clear_faults(self) -> Faults: ...

    async def wait_while_held(self) -> None: ...

    def multiplier(self, now: float) -> float: ...

    def pre_queue_delay(self, now: float) -> float: ...

    def new_id(self) -> str: ...

    def text_seed(self, request_seed: int | None) -> int: ...


class Handlers(Protocol):
    """The checks every endpoint runs, in the order a real provider applies them (``sim.server.SimHandlers``)."""

    p: Model

    async def gate(self, request: web.Request, ctx: Ctx) -> web.Response | None: ...

    def injected_error(self, ctx: Ctx) -> web.Response | None: ...

    def record(self, ctx: Ctx, status: int, stream: bool, seq: Sequence | None = None, **fields: Any) -> None: ...

    def ms(self, ctx: Ctx, t: float) -> float: ...

    def sequence(
        self,
        rid: str,
        prompt_text: str,
        max_tokens: int | None,
        seed: int,
        stop: list[str] | None,
        req: ChatCompletionRequest | CompletionRequest,
    ) -> Sequence: ...

    def faulty_token_index(self, seq: Sequence) -> int | None: ...

    def prompt_blocks(self, request: web.Request, prompt_text: str) -> list[bytes]: ...

    async def submit(self, seq: Sequence, ctx: Ctx, stream: bool, blocks: list[bytes]) -> web.Response | None: ...
