"""The request path: one list of named steps for every API, the API's own work asked of its handler.

Every ``/v1`` POST an API handler serves (gateway/api_handler.py, one module per API in gateway/apis/) walks the same
steps (``Proxy._serve``): who asks (``_identify``), what is asked (``_decode``: the handler decodes and
validates; the alias; the key's standing), its estimate (the handler's), shedding (``_shed``), the key's rpm,
tpm, budgets and concurrency (``_limit``), the routing order (``_order``), then attempts in that order
(``_attempts``; one attempt: attempts.py). No step asks which API it serves: where APIs differ, the handler
answers (its upstream plan and dialect, its error shapes).

Retry and fallback (docs/gateway.md): before the first token reaches the client, a connect error, a
timeout, a 5xx, a 429, a malformed or cut stream moves the request to the next route, bounded by
``retry.max_attempts`` and ``retry.deadline``. Streams are held back only until the first
token-carrying chunk (the role chunk waits with them); from then on frames are relayed byte for byte
and a failure ends the stream with an SSE ``error`` event, never a silent cut and never a second
provider's output. 400/401/403/404 and ``insufficient_quota`` are returned as they are.

A route whose provider's pacer cannot admit the request now is skipped (it spills to the next route);
when pacing left no route to try, the client gets a 429 with its own Retry-After. The first attempt of a
hedged alias may race a second one (hedging.py). Both: docs/routing.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from tailgate.gateway import apis  # noqa: F401  # registers the built-in APIs (gateway/apis/__init__.py)
from tailgate.gateway.access.auth import KnownKeyRefused, SelfCall
from tailgate.gateway.api_handler import Api, Decoded, handlers
from tailgate.gateway.apis.count_tokens import CountTokens
from tailgate.gateway.apis.messages import COUNT_PATH
from tailgate.gateway.http.exchange import Exchange, Reply, Stream
from tailgate.gateway.request_path import client_headers, refusals
from tailgate.gateway.request_path.admission import KeyRefused
from tailgate.gateway.request_path.attempts import Attempts
from tailgate.gateway.request_path.request_context import Ctx
from tailgate.gateway.request_path.revocation import revoke_refused_key
from tailgate.routing import Route, Sticky, should_shed
from tailgate.state.priority import lane_of
from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError

if TYPE_CHECKING:
    from tailgate.gateway.access.key_directory import KeyLimits
    from tailgate.gateway.request_path.core import Core
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.upstream import CallResult

RETRYABLE = frozenset(
    {
        "connect",
        "timeout_headers",
        "timeout_first_token",
        "timeout_idle",
        "timeout_total",
        "rate_limited",
        "http_5xx",
        "http_other",
        "malformed",
        "cut",
        "stream_error",
    }
)


class Proxy:
    """The ``/v1`` request handlers over the gateway's owners (core.py)."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.attempts = Attempts(core)
        # Request ids: 128 random bits as 32 hex digits, like uuid4().hex, without a getrandom() system
        # call and a UUID object per request. Ids need to be unique, not secret; seeded per process.
        self._ids = random.Random(os.urandom(32))
        self.in_flight = 0
        """Requests in this process between arrival and their handler's end (load shedding's pressure)."""

    def routes(self) -> dict[str, Callable[[Exchange], Awaitable[Reply | Stream]]]:
        """The ``/v1`` POST endpoints this proxy serves, by path: one per registered API (gateway/api_handler.py), and
        ``/v1/messages/count_tokens`` beside the messages API. Partials, not wrapper coroutines: one frame
        fewer on every resumption."""
        out: dict[str, Callable[[Exchange], Awaitable[Reply | Stream]]] = {
            f"/v1{path}": functools.partial(self.handle, api=api) for path, api in handlers().items()
        }
        out[f"/v1{COUNT_PATH}"] = CountTokens(self.core, self._check_key, self._ids).handle
        return out

    # -- the request ------------------------------------------------------------------------------

    async def handle(self, request: Exchange, api: Api) -> Reply | Stream:
        refused: WireError | None = None  # a client header that fails its check (client_headers.py): a 400
        try:
            rid = client_headers.request_id(request.headers)
            traffic_class = client_headers.traffic_class(request.headers)
        except WireError as err:
            rid, traffic_class, refused = None, None, err
        ctx = Ctx(
            request_id=rid or f"{self._ids.getrandbits(128):032x}",
            endpoint=api.name,
            table=self.core.routes,  # read once: a reload swaps the table, never this request's (routes.py)
            protocol=api.protocol,
            self_call=isinstance(request, SelfCall),  # nothing from the network is one (access/auth.py)
        )
        ctx.traffic_class = traffic_class
        if (tracing := self.core.tracing) is not None:  # telemetry (tracing.py): None when off
            ctx.trace = tracing.begin(request.headers, request.body)
        self.in_flight += 1
        try:
            # two phases, not one coroutine around both: a stream's every resumption walks one level fewer
            req, routes, order, tokens = await self._admitted(request, ctx, api, refused)
            response = await self._attempts(request, ctx, api, req, routes, order, tokens)
        except WireError as err:
            ctx.status, ctx.outcome = err.status, ctx.outcome if ctx.outcome != "ok" else refusals.error_outcome(err)
            if ctx.key_id is not None and ctx.outcome != "key_revoked":
                await self._ratelimit_of_refusal(ctx, err)
            response = self._error(err, ctx, api)
        except asyncio.CancelledError:
            if request.deadline_hit:  # server.request_deadline (site.py, front.py), not the client
                ctx.status, ctx.outcome = 504 if not ctx.status else ctx.status, "deadline"
            else:
                ctx.status, ctx.outcome = 499, "client_closed"  # nginx's name for a client that went away
            self.core.books.add(ctx, time.perf_counter())
            raise
        finally:
            self.in_flight -= 1
        # The answer is out already (an answer: Exchange.send; a stream: to its end) or leaves when the
        # handler returns (an error, or aiohttp). Its end time is taken now; its bookkeeping runs a moment
        # later (bookkeeping.Books), off the path of this client's next request.
        self.core.books.add(ctx, time.perf_counter())
        return response

    async def _admitted(
        self, request: Exchange, ctx: Ctx, api: Api, refused: WireError | None
    ) -> tuple[Decoded, Sequence[Route], list[Route], float]:
        """The steps before any attempt, in the order of the checks (docs/keys.md, "The order of the checks"): who
        asks, what is asked, the key's standing, load shedding — none of them counts anything — then the key's
        rpm, then its tpm, budgets and concurrency (one reservation), then the routing order. A request refused
        at any step keeps nothing: until an attempt went upstream, its rpm and its reservation are given back when
        it ends (bookkeeping.settle). Answers the request, its alias's routes, their order and its tokens."""
        core = self.core
        self._identify(request, ctx, api, refused)
        req, routes = self._decode(request, ctx, api)
        prompt, output = api.estimate(req, request.body, ctx.table.pacing.default_max_tokens)
        ctx.prompt_estimate = prompt
        if ctx.table.shed.max_in_flight is not None:
            self._shed(ctx)
        if (key_id := ctx.key_id) is not None:  # the key's own limits (docs/keys.md)
            if (rpm := core.keys.rpm(key_id, ctx.limits)) is not None:
                try:
                    ctx.rpm_taken = await core.fleet.admit_key(key_id, rpm)
                except WireError:
                    ctx.outcome = core.admission.refused(key_id, "rpm_limited")  # counted per key (admission.py)
                    raise
            await self._reserve(ctx, routes, prompt, output)
            if rpm is not None or ctx.ticket is not None:
                ctx.ratelimit = core.admission.headers(key_id, rpm, ctx.rpm_taken, ctx.ticket, ctx.limits)
        return req, routes, self._order(request, ctx, api, req, routes), prompt + output

    # -- the steps --------------------------------------------------------------------------------

    def _identify(self, request: Exchange, ctx: Ctx, api: Api, refused: WireError | None) -> None:
        """Who asks: the caller's key (a 401 when missing or wrong), then a refused client header's 400."""
        core = self.core
        try:
            ctx.key_id = core.keys.identify(request)
        except KnownKeyRefused as revoked:  # a revoked key: its row carries its id, the alias and why
            ctx.key_id = revoked.key_id
            ctx.outcome = core.admission.refused(revoked.key_id, "key_revoked")
            with contextlib.suppress(WireError):
                ctx.alias = api.model_of(request.body)
            raise
        if refused is not None:  # after the key: a known caller's bad header is on its row
            raise refused

    def _decode(self, request: Exchange, ctx: Ctx, api: Api) -> tuple[Decoded, Sequence[Route]]:
        """What is asked: the body decoded and validated by its API (a 400 naming the field), the alias's routes
        (a 404 for an unknown model), then the key's standing for it."""
        # the body was read within the limits by the server (front.py, or _aiohttp.py)
        req = api.decode(request.body, request.headers)
        ctx.alias = model = req.model
        routes = ctx.table.aliases.get(model)
        if routes is None:
            ctx.outcome = "unknown_model"
            raise wire_errors.model_not_found(model)
        if ctx.key_id is not None:
            self._check_key(ctx)  # expired, model not allowed; the key's default class
        return req, routes

    def _shed(self, ctx: Ctx) -> None:
        """Load shedding (``shed.max_in_flight`` set): a 503 for a class the pressure of requests in flight sheds
        (docs/routing.md)."""
        shed = ctx.table.shed
        assert shed.max_in_flight is not None
        pressure = (self.in_flight - 1) / shed.max_in_flight  # the others already in flight
        if should_shed(ctx.traffic_class, pressure, thresholds=shed.thresholds):
            raise refusals.shed(self.core.metrics.shed, ctx, pressure, self.in_flight - 1)

    def _order(self, request: Exchange, ctx: Ctx, api: Api, req: Decoded, routes: Sequence[Route]) -> list[Route]:
        """The routing order: the alias's policy over the routes whose provider is neither drained nor paused
        and can carry the request, a conversation kept on its route (promise 7, docs/routing.md)."""
        core, table, model = self.core, ctx.table, req.model
        ctx.stream = req.stream
        now = time.monotonic()
        exclude = {name for name, p in core.providers.items() if p.drained or p.paused(now)}
        if uncarried := api.uncarried(req, routes, core.providers):  # a route that cannot carry it is never ordered
            exclude |= uncarried
        sticky = None  # promise 7 (docs/routing.md): a conversation keeps its route among those the policy admits
        affinity = table.affinity.get(model) if api.affinity else None
        if affinity is not None and (key := affinity.key(request.headers, req.obj, ctx.prompt_estimate)) is not None:
            sticky, ctx.affinity_key = Sticky(affinity, key, ctx.key_id), key  # the tenant's share is bounded too
        order = table.policy_for(model).order(routes, ctx.traffic_class, exclude, sticky)
        if not order:
            raise refusals.no_route(core.providers, core.breakers, routes, now, ctx)
        if ctx.trace is not None:
            ctx.trace.ordered(order, req.obj)
        return order

    async def _attempts(
        self,
        request: Exchange,
        ctx: Ctx,
        api: Api,
        req: Decoded,
        routes: Sequence[Route],
        order: list[Route],
        tokens: float,
    ) -> Reply | Stream:
        """Attempts in the routing order until one answers (attempts.py), within ``retry.max_attempts`` and
        ``retry.deadline``; the first of a hedged alias may race a second one (hedging.py)."""
        core, table, attempts = self.core, ctx.table, self.attempts
        lane = lane_of(ctx.traffic_class, req.obj)  # the batch lane waits for what interactive traffic leaves
        if lane == "batch":
            ctx.lane = "batch-live"  # its ledger row's lane (a Batch API line's row is the executor's: batch-lane)
        # a batch-lane request is never hedged: a hedge is for latency, and its second attempt would take the
        # pacer's budget as an interactive one (docs/routing.md, "Hedging")
        hedger = table.hedgers.get(req.model) if table.hedgers and lane == "interactive" else None
        if hedger is not None:
            hedger.budget.record_request()
        deadline = ctx.t0 + table.retry.deadline
        queue = deque(order)
        paced: list[ProviderState] = []
        last: CallResult | None = None
        lane_until = min(deadline, ctx.t0 + table.pacing.batch_wait)
        while queue and ctx.attempts < table.retry.max_attempts:
            if time.perf_counter() >= deadline:
                break
            route = queue.popleft()
            if not await attempts.admit_lane(route, tokens, paced, lane, lane_until):
                continue  # paced out (spills to the next route) or its breaker is open / its trials are taken
            if hedger is not None and ctx.attempts == 0 and queue:
                resp, result = await attempts.race(request, ctx, api, req, route, queue, hedger, tokens, paced)
            else:
                # a non-answer may be held for another route (answer_quality.py) while one is left
                ctx.may_retry = bool(queue) and ctx.attempts + 1 < table.retry.max_attempts
                resp, result = await attempts.attempt(request, ctx, api, req, route)
            last = ctx.result = result
            if resp is not None:
                return resp
            if ctx.held is not None and result.ok:  # a non-answer held before its first byte: the next route
                if ctx.held.result is None:
                    ctx.held.result = result
                continue
            if revoke_refused_key(core.providers[route.provider], result, core.metrics.provider_keys_revoked):
                queue.appendleft(route)  # the same route again, with its next key (revocation.py)
                continue
            if result.error_class not in RETRYABLE:
                break
        if ctx.held is not None:  # no other route answered: the non-answer as it came
            return await attempts.release(request, ctx)
        if last is None and paced:
            raise refusals.paced_out(paced, tokens, ctx)
        if last is None and time.perf_counter() < deadline:  # every breaker refused at the door: say so
            raise refusals.no_route(core.providers, core.breakers, routes, time.monotonic(), ctx)
        raise refusals.final_error(last, ctx)

    # -- the key ----------------------------------------------------------------------------------

    def _check_key(self, ctx: Ctx) -> None:
        """The key's default traffic class, then its standing for ``ctx.alias`` (expired, model not allowed): the
        key gate decides (admission.py: nothing counted), the request records it (its outcome on a refusal)."""
        core, key_id = self.core, ctx.key_id
        limits = ctx.limits = core.key_directory.limits(key_id) if key_id is not None else None
        if key_id is None or limits is None:
            return
        if ctx.traffic_class is None and limits.traffic_class is not None:
            ctx.traffic_class = limits.traffic_class
        if not limits.limited:
            return
        try:
            core.admission.check(key_id, ctx.alias, limits)
        except KeyRefused as refused:
            ctx.outcome = refused.reason
            raise refused.error from None

    async def _reserve(self, ctx: Ctx, routes: Sequence[Route], prompt: float, output: float) -> None:
        """The key's own limits (docs/keys.md): the key gate reserves ``prompt`` + ``output`` tokens and their cost
        at the dearest route's price and answers a ticket (``ctx.ticket``), or the refusal (its reason is the
        request's outcome). ``prompt`` and ``output``: the request's estimate (``Api.estimate``)."""
        core, key_id, limits = self.core, ctx.key_id, ctx.limits  # looked up by _check_key
        if key_id is None or limits is None or not limits.limited:
            return
        if (cap := _never_admitted(limits, prompt + output)) is not None:  # a 400: retrying would never help
            ctx.outcome = core.admission.refused(key_id, "tpm_limited")  # refused by the tpm, counted per key
            raise wire_errors.invalid_request(
                f"This request may use {prompt + output:.0f} tokens (prompt + max_tokens, times n where it asks for "
                f"several answers), more than this key's {cap} allows in all: no window or period could ever admit "
                "it. Lower max_tokens (or n).",
                param="max_tokens",
                code="max_tokens_too_large",
            )
        prices = [core.providers[r.provider].config.price for r in routes if r.provider in core.providers]
        price = (max((p.input for p in prices), default=0.0), max((p.output for p in prices), default=0.0))
        try:
            ctx.ticket = await core.admission.admit(key_id, ctx.alias, prompt, output, price, limits)
        except KeyRefused as refused:
            ctx.outcome = refused.reason
            raise refused.error from None

    # -- refusals ----------------------------------------------------------------------------------

    async def _ratelimit_of_refusal(self, ctx: Ctx, err: WireError) -> None:
        """A limited key's refusal carries ``x-ratelimit-*`` too: the numbers its admission saw, else its windows
        as they stand (its own rpm given back first: a request that never went upstream keeps nothing)."""
        core = self.core
        assert ctx.key_id is not None
        if ctx.rpm_taken is not None and ctx.attempts == 0:
            core.fleet.refund_key(ctx.key_id, ctx.rpm_taken)
            ctx.rpm_taken = None
            ctx.ratelimit = None
        now = ctx.ratelimit
        if now is None:
            rpm = core.keys.rpm(ctx.key_id)
            limits = core.key_directory.limits(ctx.key_id)
            if rpm is None and (limits is None or limits.tpm is None):
                return
            now = await core.admission.headers_now(ctx.key_id, rpm, err.headers or {})
        err.headers = {**now, **(err.headers or {})}  # the refusal's own (a 429's Retry-After, its window) win

    def _error(self, err: WireError, ctx: Ctx, api: Api) -> Reply:
        headers = {"x-request-id": ctx.request_id, "x-tailgate-attempts": str(ctx.attempts)}
        if ctx.provider is not None:
            headers["x-tailgate-provider"] = ctx.provider.name
        # in the API's shape, whoever refused (gateway/api_handler.py)
        return Reply(err.status, {**(err.headers or {}), **headers}, api.error_body(err, ctx.request_id))


def _never_admitted(limits: KeyLimits, tokens: float) -> str | None:
    """The key's tpm when ``tokens`` exceed it on their own (the 60 s window never holds more than the tpm), or
    None. Such a request is the client's 400, not a 429 whose Retry-After no retry could meet. A budget keeps
    its 429 ``budget_exceeded`` (docs/keys.md): it is the key's spend, billed as OpenAI's quota is."""
    if limits.tpm is not None and tokens > limits.tpm:
        return f"tpm of {limits.tpm:g}"
    return None
