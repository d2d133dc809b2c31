"""The OpenAI endpoints of the gateway: choose routes, call through the measurement core, relay.

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
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp

from tailgate.gateway import anthropic, client_headers, refusals, responses
from tailgate.gateway.access.auth import KnownKeyRefused
from tailgate.gateway.admission import KeyRefused
from tailgate.gateway.count_tokens import CountTokens
from tailgate.gateway.hedging import Race
from tailgate.gateway.http.exchange import Exchange, Reply, Stream, error_reply
from tailgate.gateway.providers import check_upstream_capacity, upstream_full
from tailgate.gateway.request import PATHS, Ctx, Endpoint
from tailgate.gateway.revocation import revoke_refused_key
from tailgate.routing import Route, Sticky, should_shed
from tailgate.upstream import Body, CallResult, Chunk, Done, Sent, Tap, UnsendableHeader, UpstreamClient, call
from tailgate.wire import errors as wire_errors
from tailgate.wire import parse_json
from tailgate.wire.errors import WireError
from tailgate.wire.sse import DONE_FRAME
from tailgate.wire.types import decode_request

if TYPE_CHECKING:
    from tailgate.gateway.access.key_directory import KeyLimits
    from tailgate.gateway.anthropic import Translated
    from tailgate.gateway.core import Core
    from tailgate.gateway.hedging import Hedger
    from tailgate.gateway.providers import ProviderState
    from tailgate.gateway.routes import RouteTable

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
        # Request ids: 128 random bits as 32 hex digits, like uuid4().hex, without a getrandom() system
        # call and a UUID object per request. Ids need to be unique, not secret; seeded per process.
        self._ids = random.Random(os.urandom(32))
        self.in_flight = 0
        """Requests in this process between arrival and their handler's end (load shedding's pressure)."""

    def routes(self) -> dict[str, Callable[[Exchange], Awaitable[Reply | Stream]]]:
        """The ``/v1`` POST endpoints this proxy serves, by path (``/v1/responses`` is routed like chat:
        gateway/responses.py). Partials, not wrapper coroutines: one frame fewer on every resumption."""
        out: dict[str, Callable[[Exchange], Awaitable[Reply | Stream]]] = {
            f"/v1{path}": functools.partial(self.handle, endpoint=endpoint) for endpoint, path in PATHS.items()
        }
        out[f"/v1{anthropic.COUNT_PATH}"] = CountTokens(self.core, self._check_key, self._ids).handle
        return out

    # -- the request ------------------------------------------------------------------------------

    async def handle(self, request: Exchange, endpoint: Endpoint) -> Reply | Stream:
        refused: WireError | None = None  # a client header that fails its check (client_headers.py): a 400
        try:
            rid = client_headers.request_id(request.headers)
            traffic_class = client_headers.traffic_class(request.headers)
        except WireError as err:
            rid, traffic_class, refused = None, None, err
        ctx = Ctx(
            request_id=rid or f"{self._ids.getrandbits(128):032x}",
            endpoint=endpoint,
            table=self.core.routes,  # read once: a reload swaps the table, never this request's (routes.py)
        )
        ctx.traffic_class = traffic_class
        self.in_flight += 1
        try:
            response = await self._serve(request, ctx, refused)
        except WireError as err:
            ctx.status, ctx.outcome = err.status, ctx.outcome if ctx.outcome != "ok" else refusals.error_outcome(err)
            if ctx.key_id is not None and ctx.outcome != "key_revoked":
                await self._ratelimit_of_refusal(ctx, err)
            response = self._error(err, ctx)
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

    async def _serve(self, request: Exchange, ctx: Ctx, refused: WireError | None = None) -> Reply | Stream:
        # The order of the checks (docs/keys.md, "The order of the checks"): who asks, what is asked, the key's
        # standing, load shedding — none of them counts anything — then the key's rpm, then its tpm, budgets
        # and concurrency (one reservation), then routing and pacing. A request refused at any step keeps
        # nothing: until an attempt went upstream, its rpm and its reservation are given back when it ends
        # (bookkeeping.settle).
        core, table = self.core, ctx.table
        try:
            ctx.key_id = core.keys.identify(request)
        except KnownKeyRefused as refused:  # a revoked key: its row carries its id, the alias and why
            ctx.key_id = refused.key_id
            ctx.outcome = core.admission.refused(refused.key_id, "key_revoked")
            with contextlib.suppress(WireError):
                ctx.alias = _model(ctx.endpoint, request.body)
            raise
        if refused is not None:  # after the key: a known caller's bad header is on its row
            raise refused
        body = request.body  # read within the limits by the server (front.py, or _aiohttp.py)
        obj: dict[str, Any]
        if ctx.endpoint == "messages":  # Anthropic's Messages API (gateway/anthropic.py)
            obj = parse_json(body)
            if not isinstance(obj, dict):
                raise wire_errors.invalid_request("The request body must be a JSON object.")
            messages = ctx.messages = anthropic.Messages(body, obj, request.headers)
            req: Any = messages.head
        else:
            req = decode_request(ctx.endpoint, body, strict=False)
        ctx.alias = req.model
        routes = table.aliases.get(req.model)
        if routes is None:
            ctx.outcome = "unknown_model"
            raise wire_errors.model_not_found(req.model)
        if ctx.key_id is not None:
            self._check_key(ctx)  # expired, model not allowed; the key's default class
        if ctx.messages is None:
            obj = parse_json(body)  # typed decoding skips unknown fields: they may hold bad UTF-8
        prompt, output = responses.token_estimate(obj, body, ctx.endpoint, table.pacing.default_max_tokens)
        ctx.prompt_estimate = prompt
        shed = table.shed
        if shed.max_in_flight is not None:
            pressure = (self.in_flight - 1) / shed.max_in_flight  # the others already in flight
            if should_shed(ctx.traffic_class, pressure, thresholds=shed.thresholds):
                raise refusals.shed(core.shed_total, ctx, pressure, self.in_flight - 1)
        if (rpm := core.keys.rpm(ctx.key_id)) is not None:
            try:
                ctx.rpm_taken = await core.fleet.admit_key(ctx.key_id, rpm)  # type: ignore[arg-type]  # has an id
            except WireError:
                ctx.outcome = core.admission.refused(ctx.key_id, "rpm_limited")  # counted per key (admission.py)
                raise
        if ctx.key_id is not None:
            await self._reserve(ctx, routes, prompt, output)  # the key's own limits (docs/keys.md)
            if rpm is not None or ctx.ticket is not None:
                ctx.ratelimit = core.admission.headers(ctx.key_id, rpm, ctx.rpm_taken, ctx.ticket)
        ctx.stream = bool(getattr(req, "stream", False))
        options = getattr(req, "stream_options", None)
        # Responses: a dict, never injected; Messages: usage is always part of the stream, never dropped
        wants_usage = ctx.messages is not None or bool(getattr(options, "include_usage", False))
        now = time.monotonic()
        exclude = {name for name, p in core.providers.items() if p.drained or p.paused(now)}
        if ctx.messages is not None:  # a route that cannot carry the request is never ordered (the 400: none can)
            exclude |= self._uncarried(ctx.messages, routes)
        sticky = None  # promise 7 (docs/routing.md): a conversation keeps its route among those the policy admits
        affinity = table.affinity.get(req.model) if ctx.endpoint != "embeddings" else None  # no prompt cache there
        if affinity is not None and (key := affinity.key(request.headers, obj, prompt)) is not None:
            sticky, ctx.affinity_key = Sticky(affinity, key, ctx.key_id), key  # the tenant's share is bounded too
        order = table.policy_for(req.model).order(routes, ctx.traffic_class, exclude, sticky)
        if not order:
            raise refusals.no_route(core.providers, core.breakers, routes, now, ctx)
        tokens = prompt + output
        hedger = table.hedgers.get(req.model) if table.hedgers else None
        if hedger is not None:
            hedger.budget.record_request()
        deadline = ctx.t0 + table.retry.deadline
        queue = deque(order)
        paced: list[ProviderState] = []
        last: CallResult | None = None
        while queue and ctx.attempts < table.retry.max_attempts:
            if time.perf_counter() >= deadline:
                break
            route = queue.popleft()
            if not self._admit(route, tokens, paced):
                continue  # paced out (spills to the next route) or its breaker is open / its trials are taken
            if hedger is not None and ctx.attempts == 0 and queue:
                resp, result = await self._race(request, ctx, route, queue, hedger, obj, wants_usage, tokens, paced)
            else:
                resp, result = await self._attempt(request, ctx, route, obj, wants_usage)
            last = ctx.result = result
            if resp is not None:
                return resp
            if revoke_refused_key(core.providers[route.provider], result, core.keys_revoked):
                queue.appendleft(route)  # the same route again, with its next key (revocation.py)
                continue
            if result.error_class not in RETRYABLE:
                break
        if last is None and paced:
            raise refusals.paced_out(paced, tokens, ctx)
        if last is None and time.perf_counter() < deadline:  # every breaker refused at the door: say so
            raise refusals.no_route(core.providers, core.breakers, routes, time.monotonic(), ctx)
        raise refusals.final_error(last, ctx)

    def _uncarried(self, messages: anthropic.Messages, routes: Sequence[Route]) -> set[str]:
        """The providers among ``routes`` that cannot carry this request (a translation cannot say a field or block
        of it), learnt before the routes are ordered: the request goes to a route that can. When no route of the
        alias can, the 400 of the first that cannot (it names the field). By provider, as ``exclude`` is: whether a
        route can carry a request depends on its provider (native endpoint, thinking switch), not its model."""
        uncarried: dict[str, WireError] = {}
        carried = False
        for route in routes:
            provider = self.core.providers.get(route.provider)
            if provider is None or route.provider in uncarried:
                continue
            err = messages.uncarried(provider.anthropic_client, provider.config.thinking_switch)
            if err is None:
                carried = True
            else:
                uncarried[route.provider] = err
        if uncarried and not carried:
            raise next(iter(uncarried.values()))
        return set(uncarried)

    def _check_key(self, ctx: Ctx) -> None:
        """The key's default traffic class, then its standing for ``ctx.alias`` (expired, model not allowed): the
        key gate decides (admission.py: nothing counted), the request records it (its outcome on a refusal)."""
        core, key_id = self.core, ctx.key_id
        limits = core.key_directory.limits(key_id) if key_id is not None else None
        if key_id is None or limits is None:
            return
        if ctx.traffic_class is None and limits.traffic_class is not None:
            ctx.traffic_class = limits.traffic_class
        if not limits.limited:
            return
        try:
            core.admission.check(key_id, ctx.alias)
        except KeyRefused as refused:
            ctx.outcome = refused.reason
            raise refused.error from None

    async def _reserve(self, ctx: Ctx, routes: Sequence[Route], prompt: float, output: float) -> None:
        """The key's own limits (docs/keys.md): the key gate reserves ``prompt`` + ``output`` tokens and their cost
        at the dearest route's price and answers a ticket (``ctx.ticket``), or the refusal (its reason is the
        request's outcome). ``prompt`` and ``output``: the request's estimate (``responses.token_estimate``)."""
        core, key_id = self.core, ctx.key_id
        limits = core.key_directory.limits(key_id) if key_id is not None else None
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
            ctx.ticket = await core.admission.admit(key_id, ctx.alias, prompt, output, price)
        except KeyRefused as refused:
            ctx.outcome = refused.reason
            raise refused.error from None

    def _admit(self, route: Route, tokens: float, paced: list[ProviderState]) -> bool:
        """May an attempt go to ``route`` now? Pacer first (it has no side effect until the breaker, which
        may take a half-open trial slot, has said yes), then breaker, then the pacer's slot is taken."""
        core = self.core
        provider = core.providers[route.provider]
        core.fleet.wanted(route.provider)  # this replica's demand, for its share of a fleet's pacing
        pacer = provider.pacer
        if not pacer.limited:  # no known limits; a 429's pause already kept it out of the order
            return core.breakers.get(route.provider).allow()
        if pacer.available_in(tokens) > 0:
            provider.paced += 1
            paced.append(provider)
            core.paced_total.labels(provider.name).inc()
            return False
        if not core.breakers.get(route.provider).allow():
            return False
        pacer.try_acquire(tokens)
        return True

    async def _attempt(
        self, request: Exchange, ctx: Ctx, route: Route, obj: Mapping[str, Any], wants_usage: bool
    ) -> tuple[Reply | Stream | None, CallResult]:
        """One attempt at ``route``, with its bookkeeping (health, breaker, metrics) whatever the outcome:
        an attempt ended by an exception (client gone, hedge race lost, a bug) is recorded as ``cancelled``
        (neutral: never a fault), then re-raised."""
        core = self.core
        # server.max_upstream_in_flight: a 503 + Retry-After, never a queue
        check_upstream_capacity(core.providers, ctx.table.max_upstream_in_flight)
        provider = core.providers[route.provider]
        payload: bytes | Mapping[str, Any]
        if ctx.messages is not None:  # passthrough or translation, by the provider (a 400 if untranslatable)
            plan = ctx.messages.attempt(
                provider.client,
                provider.anthropic_client,
                route.model,
                provider.config.thinking_switch,
                provider.config.top_k,
                provider.config.drop_fields,
            )
            upstream = _Upstream(plan.client, plan.path, plan.headers, plan.translated)
            payload = plan.payload
        else:
            upstream = _Upstream(provider.client, PATHS[ctx.endpoint], None, None)
            # Fields the gateway does not know go as sent: they are the provider's business; those the provider
            # is known to refuse (``drop_fields``) stay here (docs/gateway.md, "Fields the gateway does not know").
            drop = provider.config.drop_fields
            payload = {**obj, "model": route.model} if not drop else _without(obj, drop, route.model)
        health = core.health.get(route.provider, route.model)
        handle = health.begin(stream=ctx.stream)
        ctx.attempts += 1
        if ctx.race is None:
            ctx.provider, ctx.route = provider, route
        resp: Reply | Stream | None
        try:
            if ctx.stream:
                # Awaited in the handler's own task: once its first token is written a stream is pushed from
                # the upstream connection's callback (Call._pump) and no longer resumes this stack per read; a
                # task of its own for the relay only cost a task and a loop turn before the upstream request
                # went out (~85 µs at one connection; docs/benchmarks.md, "Run Q").
                resp, result = await self._attempt_stream(
                    request, ctx, provider, payload, wants_usage, lambda: health.first_token(handle), upstream
                )
            else:
                resp, result = await self._attempt_unary(request, ctx, provider, payload, upstream)
        except BaseException as exc:  # cancelled (client gone, race lost), or a bug: the attempt must still end
            result = CallResult(None, "cancelled", time.time(), ctx.stream, request_id=ctx.request_id)
            health.observe(result, handle=handle)  # ends its in-flight count and its wait (no false stall)
            core.breakers.get(route.provider).record_result(result)
            if isinstance(exc, UnsendableHeader):  # never sent: the client's (or our) error, not the provider's
                raise client_headers.unsendable(exc.name) from None
            raise
        health.observe(result, handle=handle)
        core.breakers.get(route.provider).record_result(result)
        self._observe(provider, result, ctx.table, route.model)
        return resp, result

    async def _race(
        self,
        request: Exchange,
        ctx: Ctx,
        route: Route,
        queue: deque[Route],
        hedger: Hedger,
        obj: Mapping[str, Any],
        wants_usage: bool,
        tokens: float,
        paced: list[ProviderState],
    ) -> tuple[Reply | Stream | None, CallResult]:
        """The first attempt of a hedged alias; after the hedge delay without a first token (a complete
        answer), the same request also goes to the next admissible route. First to claim wins (hedging.py)."""
        core = self.core
        racers: dict[asyncio.Task[Any], tuple[Route, bool]] = {}

        def on_claim(task: asyncio.Task[Any]) -> None:
            won, is_hedge = racers[task]
            ctx.provider, ctx.route, ctx.hedged = core.providers[won.provider], won, is_hedge

        race = ctx.race = Race(on_claim)

        def start(r: Route, is_hedge: bool) -> None:
            task = asyncio.create_task(self._attempt(request, ctx, r, obj, wants_usage))
            racers[task] = (r, is_hedge)
            race.tasks.append(task)

        ctx.provider, ctx.route = core.providers[route.provider], route
        start(route, False)
        fired = False
        last: CallResult | None = None
        try:
            delay = hedger.delay(core.health.get(route.provider, route.model), stream=ctx.stream)
            done, _ = await asyncio.wait(race.tasks, timeout=delay)
            if not done and race.winner is None:
                if not hedger.budget.can_hedge():
                    hedger.count("no_budget")
                elif upstream_full(
                    core.providers, ctx.table.max_upstream_in_flight
                ):  # a hedge: extra load, never a 503
                    hedger.count("no_capacity")
                else:
                    nxt = next((r for r in _drain(queue) if self._admit(r, tokens, paced)), None)
                    if nxt is None:
                        hedger.count("no_route")
                    else:
                        hedger.budget.may_hedge()
                        hedger.count("fired")
                        fired = True
                        start(nxt, True)
            pending = set(race.tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.cancelled():
                        if task is race.winner:
                            raise asyncio.CancelledError  # the winner's client went away
                        continue  # lost the race
                    resp, result = task.result()
                    if resp is not None or last is None or last.error_class == "cancelled":
                        last = result
                    if resp is not None:
                        if fired:
                            hedger.count("won" if racers[task][1] else "lost")
                        return resp, result
            if fired:
                hedger.count("failed")
        finally:
            await race.cancel_all()
            ctx.race = None
        if last is None:  # every racer was cancelled without a winner: only the client can have done that
            raise asyncio.CancelledError
        return None, last

    async def _after_answer(self, request: Exchange, ctx: Ctx) -> None:
        """The client has its whole answer. Where the key's concurrency slot can go back at once (no limit, or
        local state) and the server lets the connection go on (the front door), the connection serves its
        next request now, and this one finishes — the call's end, health, breaker, metrics, books — with the
        next batch of books (``Books.later``, ≤ 1 ms), while the gateway waits on that request's provider."""
        if self.core.admission.free_slot_now(ctx.ticket) and (handler := request.detach()) is not None:
            await self.core.books.later(handler)

    # -- attempts ---------------------------------------------------------------------------------

    async def _attempt_unary(
        self,
        request: Exchange,
        ctx: Ctx,
        provider: ProviderState,
        payload: bytes | Mapping[str, Any],
        upstream: _Upstream,
    ) -> tuple[Reply | None, CallResult]:
        """A non-streamed attempt. The answer leaves as soon as the measurement core has checked it (its
        ``Body`` event: a 200 whose JSON is an OpenAI answer); the call's end, the attempt's health,
        breaker and metrics, and the request's bookkeeping all follow after the bytes are out."""
        reply: Reply | None = None
        sent: float | None = time.perf_counter()
        provider.in_flight += 1
        try:
            async with call(
                upstream.client,
                upstream.path,
                payload,
                stream=False,
                request_id=ctx.request_id,
                headers=upstream.headers,
                key_hash=ctx.affinity_key,
            ) as c:
                async for event in c:
                    if isinstance(event, Sent):
                        sent = event.t
                    elif isinstance(event, Body):
                        now = time.perf_counter()
                        ctx.upstream_s += now - (sent or now)
                        sent = None
                        if ctx.race is not None and not ctx.race.claim():
                            raise asyncio.CancelledError  # another attempt won the race (it cancels this one)
                        ctx.status = 200
                        ctx.first_token_at = now
                        body = event.raw
                        if upstream.translated is not None:  # a chat completion → an Anthropic message
                            try:
                                body = upstream.translated.message(body)
                            except WireError as err:
                                ctx.status, ctx.outcome = err.status, "malformed"
                                body = anthropic.error_body(err, ctx.request_id)
                        reply = Reply(ctx.status, self._headers(ctx, now), body)
                        request.send(reply)
                        await self._after_answer(request, ctx)
        finally:
            provider.in_flight -= 1
            if sent is not None:
                ctx.upstream_s += time.perf_counter() - sent
        result = c.result
        assert result is not None
        if reply is None:
            return None, result
        return reply, result  # sent: whatever the call's end says, the client has its answer

    async def _attempt_stream(
        self,
        request: Exchange,
        ctx: Ctx,
        provider: ProviderState,
        payload: bytes | Mapping[str, Any],
        wants_usage: bool,
        on_first_token: Callable[[], None],
        upstream: _Upstream,
    ) -> tuple[Stream | None, CallResult]:
        translated = upstream.translated  # None: frames are relayed as they came
        held: list[bytes] = []
        resp: Stream | None = None
        tap: Tap | None = None
        first: float | None = None  # when the first token arrived
        sent = time.perf_counter()
        provider.in_flight += 1
        try:
            async with call(
                upstream.client,
                upstream.path,
                payload,
                stream=True,
                client_wants_usage=wants_usage,
                request_id=ctx.request_id,
                headers=upstream.headers,
                key_hash=ctx.affinity_key,
            ) as c:
                async for event in c:
                    if isinstance(event, Chunk):
                        # Frames of one upstream read leave in one write (one syscall, not one each).
                        held.append(event.raw if translated is None else translated.chunk(event.raw))
                        if resp is not None:
                            if event.last:
                                await resp.write(b"".join(held))
                                held.clear()
                                c.tap = tap
                            continue
                        if first is None and event.has_token:
                            first = time.perf_counter()
                            on_first_token()
                            if ctx.race is not None and not ctx.race.claim():
                                raise asyncio.CancelledError  # another attempt won the race
                        if first is not None and event.last:
                            # The headers and every frame so far (the first token's whole read) in one write.
                            resp = await self._commit(request, ctx, held, first, sent)
                            held.clear()
                            # Everything so far is written: the rest of the stream can be pushed to the
                            # client from the upstream connection's callback (Call._pump), where the front
                            # door's stream takes it (an aiohttp response cannot: it stays pulled).
                            # A translated stream stays pulled: each frame is rewritten (gateway/anthropic.py).
                            tap = resp if isinstance(resp, Tap) and translated is None else None
                            c.tap = tap
                    elif isinstance(event, Sent):
                        sent = event.t
                    elif isinstance(event, Done):
                        if resp is None:
                            if first is None and ctx.race is not None and not ctx.race.claim():
                                raise asyncio.CancelledError  # another attempt won the race
                            resp = await self._commit(request, ctx, held, first or time.perf_counter(), sent)
                            held.clear()
                        held.append((event.raw or DONE_FRAME) if translated is None else translated.done())
                        # The stream is complete: the last frames and the end of the chunked body
                        # leave in one write.
                        await resp.write_eof(b"".join(held))
                        held.clear()
                        await self._after_answer(request, ctx)
                if resp is None and first is not None:
                    # The call failed later in the read that carried the first token: the stream was the
                    # client's from that token all the same (what came before the failure, then its error).
                    resp = await self._commit(request, ctx, held, first, sent)
                    held.clear()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            raise asyncio.CancelledError from None  # the client went away while we wrote to it
        finally:
            provider.in_flight -= 1
            if resp is None:
                ctx.upstream_s += time.perf_counter() - sent
            else:
                ctx.result = c.result  # a stream the client left: its partial counts are what it is charged
        result = c.result
        assert result is not None
        if resp is not None and held and not result.ok:
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientConnectionResetError):
                await resp.write(b"".join(held))  # frames the upstream sent before it failed
        if resp is not None and not result.ok:
            # Output already reached the client: no fallback (it would duplicate text). End with an
            # SSE error event in the OpenAI shape, never a silent cut: a client cannot tell a cut stream from a
            # finished one, and would keep a truncated answer as if it were whole.
            ctx.outcome = result.error_class or "stream_error"
            err = result.error or WireError(
                502,
                f"The upstream stream failed after output began ({result.error_class}).",
                type="server_error",
                code=result.error_class,
            )
            if translated is not None:
                frame = translated.fail(err)  # nothing when the upstream's own error already ended it
            elif ctx.endpoint == "messages":
                # A passthrough: the upstream's own error event, already relayed, is the stream's last frame.
                frame = b"" if result.error_class == "stream_error" else anthropic.error_event(err)
            else:
                frame = responses.error_frame(err) if ctx.endpoint == "responses" else err.sse_frame()
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientConnectionResetError):
                await resp.write(frame)
        if resp is not None:
            await resp.write_eof()
        return resp, result

    async def _commit(self, request: Exchange, ctx: Ctx, held: list[bytes], at: float, sent: float) -> Stream:
        """Send headers and everything held so far: from here on this route owns the response. ``at``: when the
        first token arrived (the end of the upstream read that carried it is when it leaves)."""
        ctx.upstream_s += at - sent
        ctx.first_token_at = at
        ctx.status = 200
        return await request.open_stream(self._headers(ctx, at), b"".join(held))

    # -- bookkeeping ------------------------------------------------------------------------------

    def _headers(self, ctx: Ctx, now: float) -> dict[str, str]:
        headers = {
            "x-request-id": ctx.request_id,
            "x-tailgate-provider": ctx.provider.name if ctx.provider else "",
            "x-tailgate-attempts": str(ctx.attempts),
            "x-tailgate-overhead-ms": f"{ctx.overhead_ms(now):.3f}",
        }
        if ctx.hedged:
            headers["x-tailgate-hedged"] = "1"
        if ctx.messages is not None and ctx.provider is not None:  # how this provider was spoken to
            headers["x-tailgate-upstream-api"] = (
                "anthropic" if anthropic.mode(ctx.provider.anthropic_client) == "passthrough" else "openai"
            )
        if ctx.ratelimit:
            headers.update(ctx.ratelimit)  # a limited key's windows, as OpenAI sends them on every answer
        return headers

    def _observe(self, provider: ProviderState, result: CallResult, table: RouteTable, model: str) -> None:
        provider.observe(result, model)
        self.core.metrics.attempt(provider.name, result.error_class or "ok").inc()
        if result.error_class == "rate_limited":
            limit = table.pacing.max_pause
            provider.pause(min(limit, result.retry_after_s if result.retry_after_s is not None else 1.0))

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

    def _error(self, err: WireError, ctx: Ctx) -> Reply:
        headers = {"x-request-id": ctx.request_id, "x-tailgate-attempts": str(ctx.attempts)}
        if ctx.provider is not None:
            headers["x-tailgate-provider"] = ctx.provider.name
        if ctx.endpoint == "messages":  # Anthropic's shape, whoever refused (gateway/anthropic.py)
            return Reply(err.status, {**(err.headers or {}), **headers}, anthropic.error_body(err, ctx.request_id))
        return error_reply(err, headers)


def _never_admitted(limits: KeyLimits, tokens: float) -> str | None:
    """The key's tpm when ``tokens`` exceed it on their own (the 60 s window never holds more than the tpm), or
    None. Such a request is the client's 400, not a 429 whose Retry-After no retry could meet. A budget keeps
    its 429 ``budget_exceeded`` (docs/keys.md): it is the key's spend, billed as OpenAI's quota is."""
    if limits.tpm is not None and tokens > limits.tpm:
        return f"tpm of {limits.tpm:g}"
    return None


class _Upstream:
    """Where an attempt goes: the client pool, the path under its base URL, extra headers, and the
    translation of its answer (None: relayed as it came)."""

    __slots__ = ("client", "headers", "path", "translated")

    def __init__(
        self, client: UpstreamClient, path: str, headers: dict[str, str] | None, translated: Translated | None
    ) -> None:
        self.client, self.path, self.headers, self.translated = client, path, headers, translated


def _without(obj: Mapping[str, Any], drop: frozenset[str], model: str) -> dict[str, Any]:
    """``obj`` with ``model`` replaced and the fields in ``drop`` left out."""
    out = {k: v for k, v in obj.items() if k not in drop}
    out["model"] = model
    return out


def _model(endpoint: Endpoint, body: bytes) -> str:
    """The model a body asks for (a refused request's ledger row)."""
    if endpoint == "messages":
        model = parse_json(body).get("model")
        return model if isinstance(model, str) else "-"
    return decode_request(endpoint, body, strict=False).model


def _drain(queue: deque[Route]) -> Iterator[Route]:
    while queue:
        yield queue.popleft()
