"""One attempt at one route, measured and relayed: the part of the request path below the routing order.

``Attempts.attempt`` asks the request's API handler for the attempt's plan (gateway/api_handler.py: where it goes, what
it sends, in which dialect, how the answer is turned back), calls through the measurement core
(``upstream.call``) and answers the client: a whole answer as soon as the core has checked it, a stream held
back until its first token and from then on relayed frame by frame (pushed from the upstream connection's
callback when it needs no rewriting). Each attempt's health, breaker and metrics are recorded whatever its
outcome. ``Attempts.race``: the first attempt of a hedged alias racing a second one (hedging.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import aiohttp

from tailgate.gateway.http.exchange import Exchange, Reply, Stream
from tailgate.gateway.request_path import client_headers
from tailgate.gateway.request_path.hedging import Race
from tailgate.gateway.request_path.providers import check_upstream_capacity, upstream_full
from tailgate.gateway.request_path.request_context import Ctx, Held
from tailgate.routing import Route
from tailgate.state.priority import Lane
from tailgate.upstream import Body, CallResult, Chunk, Done, Sent, Tap, UnsendableHeader, call
from tailgate.wire.errors import WireError
from tailgate.wire.sse import DONE_FRAME

if TYPE_CHECKING:
    from tailgate.gateway.api_handler import Api, Attempt, Decoded
    from tailgate.gateway.request_path.answer_quality import Observed
    from tailgate.gateway.request_path.core import Core
    from tailgate.gateway.request_path.hedging import Hedger
    from tailgate.gateway.request_path.providers import ProviderState


class Attempts:
    """The attempts of the requests of one gateway, over its owners (core.py)."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def admit_lane(
        self, route: Route, tokens: float, paced: list[ProviderState], lane: Lane, wait_until: float
    ) -> bool:
        """:meth:`admit` with priority at the pacer (``state/priority.py``, ``Fleet.pace``): a batch-lane attempt
        takes only what interactive traffic leaves and may wait for it until ``wait_until`` (``perf_counter``:
        the request's start + ``routing.pacing.batch_wait``, at most its retry deadline); a provider paced on
        the fleet's shared bucket asks it. Otherwise :meth:`admit`."""
        core = self.core
        provider = core.providers[route.provider]
        fleet = core.fleet
        if not provider.pacer.limited:  # no known limits (admit's first case): no reserve to keep, no wait
            fleet.wanted(route.provider, lane, metered=False)
            return core.breakers.get(route.provider).allow()
        if lane == "interactive" and not fleet.fleet_paced(provider):
            return self.admit(route, tokens, paced, lane)
        fleet.wanted(route.provider, lane)
        breaker = core.breakers.get(route.provider)
        if not breaker.can_admit():  # as in admit: the breaker before the pacer (no wait, no token for a refusal)
            return False
        wait_s = max(0.0, wait_until - time.perf_counter()) if lane == "batch" else 0.0
        if not await fleet.pace(provider, tokens, lane, wait_s):
            provider.paced += 1
            paced.append(provider)
            core.metrics.paced.labels(provider.name).inc()
            return False
        return breaker.allow()  # the trial slot, if half-open, taken only once admitted

    def admit(self, route: Route, tokens: float, paced: list[ProviderState], lane: Lane = "interactive") -> bool:
        """May an attempt go to ``route`` now? Pacer first (it has no side effect until the breaker, which
        may take a half-open trial slot, has said yes), then breaker, then the pacer's slot is taken."""
        core = self.core
        provider = core.providers[route.provider]
        pacer = provider.pacer
        # this replica's demand, for its share of a fleet's pacing; an interactive one at a paced provider also
        # the batch lane's reserve (an unpaced one keeps none: the lane never waits there)
        core.fleet.wanted(route.provider, lane, metered=pacer.limited)
        if not pacer.limited:  # no known limits; a 429's pause already kept it out of the order
            return core.breakers.get(route.provider).allow()
        if pacer.available_in(tokens) > 0:
            provider.paced += 1
            paced.append(provider)
            core.metrics.paced.labels(provider.name).inc()
            return False
        if not core.breakers.get(route.provider).allow():
            return False
        pacer.try_acquire(tokens)
        return True

    async def attempt(
        self, request: Exchange, ctx: Ctx, api: Api, req: Decoded, route: Route
    ) -> tuple[Reply | Stream | None, CallResult]:
        """One attempt at ``route``, with its bookkeeping (health, breaker, metrics) whatever the outcome:
        an attempt ended by an exception (client gone, hedge race lost, a bug) is recorded as ``cancelled``
        (neutral: never a fault), then re-raised."""
        core = self.core
        # server.max_upstream_in_flight: a 503 + Retry-After, never a queue
        check_upstream_capacity(core.providers, ctx.table.max_upstream_in_flight)
        provider = core.providers[route.provider]
        plan = api.plan(req, provider, route)  # where, what, in which dialect (a 400 if it cannot be said)
        span = None  # telemetry's notes of this attempt (tracing.py), when the request is traced
        if ctx.trace is not None:
            plan, span = ctx.trace.start(plan, provider, route, ctx.race is not None)
        health = core.health.get(route.provider, route.model)
        handle = health.begin(stream=ctx.stream)
        # a chat answer's quality (answer_quality.py): its signals, a non-answer held for another route
        quality = core.quality
        obs = quality.begin(ctx.alias, route, req.obj, ctx.may_retry) if quality and api.judged else None
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
                on_first = functools.partial(health.first_token, handle)
                resp, result = await self._stream(request, ctx, api, provider, plan, req.wants_usage, on_first, obs)
            else:
                resp, result = await self._unary(request, ctx, api, provider, plan, obs)
        except BaseException as exc:  # cancelled (client gone, race lost), or a bug: the attempt must still end
            result = CallResult(None, "cancelled", time.time(), ctx.stream, request_id=ctx.request_id)
            if span is not None:
                span.end(result, None)
            health.observe(result, handle=handle)  # ends its in-flight count and its wait (no false stall)
            core.breakers.get(route.provider).record_result(result)
            if isinstance(exc, UnsendableHeader):  # never sent: the client's (or our) error, not the provider's
                raise client_headers.unsendable(exc.name) from None
            raise
        if span is not None:
            span.end(result, resp)
        health.observe(result, handle=handle)
        core.breakers.get(route.provider).record_result(result)
        if obs is not None and resp is not None:
            ctx.quality = obs  # judged with the request's books
        # the provider's health, the attempt's metric, a 429's pause (inline: once per attempt)
        provider.observe(result, route.model)
        core.metrics.attempt(provider.name, result.error_class or "ok").inc()
        if result.error_class == "rate_limited":
            limit = ctx.table.pacing.max_pause
            provider.pause(min(limit, result.retry_after_s if result.retry_after_s is not None else 1.0))
        return resp, result

    async def race(
        self,
        request: Exchange,
        ctx: Ctx,
        api: Api,
        req: Decoded,
        route: Route,
        queue: deque[Route],
        hedger: Hedger,
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
            task = asyncio.create_task(self.attempt(request, ctx, api, req, r))
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
                    nxt = next((r for r in _drain(queue) if self.admit(r, tokens, paced)), None)
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

    # -- one attempt, unary or streamed ------------------------------------------------------------

    async def _unary(
        self, request: Exchange, ctx: Ctx, api: Api, provider: ProviderState, upstream: Attempt, obs: Observed | None
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
                upstream.payload,
                stream=False,
                request_id=ctx.request_id,
                headers=upstream.headers,
                key_hash=ctx.affinity_key,
                dialect=upstream.dialect,
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
                        if upstream.translated is not None:  # e.g. a chat completion → an Anthropic message
                            try:
                                body = upstream.translated.message(body)
                            except WireError as err:
                                ctx.status, ctx.outcome = err.status, "malformed"
                                body = api.error_body(err, ctx.request_id)
                        if obs is not None and ctx.status == 200 and obs.unary(body):
                            # a non-answer another route may replace: not sent
                            self._hold(ctx, Held(obs, provider, upstream, body, stream=False))
                            continue
                        reply = Reply(ctx.status, self._headers(ctx, upstream, now), body)
                        request.send(reply)
                        if self.core.admission.free_slot_now(ctx.ticket) and (later := request.detach()) is not None:
                            await self.core.books.later(later)  # see _commit
        finally:
            provider.in_flight -= 1
            if sent is not None:
                ctx.upstream_s += time.perf_counter() - sent
        result = c.result
        assert result is not None
        if reply is None:
            return None, result
        return reply, result  # sent: whatever the call's end says, the client has its answer

    async def _stream(
        self,
        request: Exchange,
        ctx: Ctx,
        api: Api,
        provider: ProviderState,
        upstream: Attempt,
        wants_usage: bool,
        on_first_token: Callable[[], None],
        obs: Observed | None = None,
    ) -> tuple[Stream | None, CallResult]:
        translated = upstream.translated  # None: frames are relayed as they came
        held: list[bytes] = []
        resp: Stream | None = None
        tap: Tap | None = None
        first: float | None = None  # when the first token arrived
        frames: list[bytes] | None = None
        if obs is not None and obs.whole:  # kept for the quality signals (tools declared, JSON asked for)
            frames = obs.frames = []
        sent = time.perf_counter()
        provider.in_flight += 1
        try:
            async with call(
                upstream.client,
                upstream.path,
                upstream.payload,
                stream=True,
                client_wants_usage=wants_usage,
                request_id=ctx.request_id,
                headers=upstream.headers,
                key_hash=ctx.affinity_key,
                dialect=upstream.dialect,
            ) as c:
                async for event in c:
                    if isinstance(event, Chunk):
                        # Frames of one upstream read leave in one write (one syscall, not one each).
                        held.append(event.raw if translated is None else translated.chunk(event.raw))
                        if frames is not None:
                            frames.append(held[-1])
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
                            resp = await self._commit(request, ctx, upstream, held, first, sent)
                            held.clear()
                            # Everything so far is written: the rest of the stream can be pushed to the
                            # client from the upstream connection's callback (Call._pump), where the front
                            # door's stream takes it (an aiohttp response cannot: it stays pulled).
                            # A translated stream stays pulled: each frame is rewritten (gateway/api_handler.py).
                            tap = resp if isinstance(resp, Tap) and translated is None else None
                            if tap is not None and frames is not None:
                                tap = _Keeping(tap, frames)
                            c.tap = tap
                    elif isinstance(event, Sent):
                        sent = event.t
                    elif isinstance(event, Done):
                        if resp is None and first is None and obs is not None and obs.stream_ended(held):
                            # no token, and a non-answer another route may replace: nothing sent
                            end = (event.raw or DONE_FRAME) if translated is None else translated.done()
                            self._hold(ctx, Held(obs, provider, upstream, b"".join(held), stream=True, done=end))
                            held.clear()
                            continue
                        if resp is None:
                            if first is None and ctx.race is not None and not ctx.race.claim():
                                raise asyncio.CancelledError  # another attempt won the race
                            resp = await self._commit(request, ctx, upstream, held, first or time.perf_counter(), sent)
                            held.clear()
                        held.append((event.raw or DONE_FRAME) if translated is None else translated.done())
                        # The stream is complete: the last frames and the end of the chunked body
                        # leave in one write.
                        await resp.write_eof(b"".join(held))
                        held.clear()
                        if self.core.admission.free_slot_now(ctx.ticket) and (later := request.detach()) is not None:
                            await self.core.books.later(later)  # see _commit
                if resp is None and first is not None:
                    # The call failed later in the read that carried the first token: the stream was the
                    # client's from that token all the same (what came before the failure, then its error).
                    resp = await self._commit(request, ctx, upstream, held, first, sent)
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
            frame = api.error_frame(err, result, translated)  # the API's shape (or nothing: it ended already)
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientConnectionResetError):
                await resp.write(frame)
        if resp is not None:
            await resp.write_eof()
        return resp, result

    def _hold(self, ctx: Ctx, held: Held) -> None:
        """A non-answer held (not sent) while the request tries the next route; the first one held is the one
        :meth:`release` sends if none answers."""
        quality = self.core.quality
        assert quality is not None
        quality.held(ctx.alias, held.obs)
        ctx.retried = ctx.retried or (held.obs.fast.verdict if held.obs.fast is not None else held.obs.verdict)
        if ctx.held is None:
            ctx.held = held
        ctx.quality = None
        ctx.status, ctx.first_token_at = 0, None

    async def release(self, request: Exchange, ctx: Ctx) -> Reply | Stream:
        """No other route answered: the held non-answer goes to the client as it came (docs/routing.md)."""
        held = ctx.held
        assert held is not None
        assert held.result is not None
        ctx.held = None
        ctx.provider, ctx.route, ctx.result = held.provider, held.obs.route, held.result
        now = time.perf_counter()
        ctx.status = 200
        if held.stream:
            resp = await self._commit(request, ctx, held.upstream, [held.body], now, now)
            await resp.write_eof(held.done)
            return resp
        ctx.first_token_at = now
        reply = Reply(200, self._headers(ctx, held.upstream, now), held.body)
        request.send(reply)
        return reply

    async def _commit(
        self, request: Exchange, ctx: Ctx, upstream: Attempt, held: list[bytes], at: float, sent: float
    ) -> Stream:
        """Send headers and everything held so far: from here on this route owns the response. ``at``: when the
        first token arrived (the end of the upstream read that carried it is when it leaves).

        Once the client has its whole answer, where the key's concurrency slot can go back at once (no limit, or
        local state) and the server lets the connection go on (the front door), the connection serves its next
        request now, and this one finishes — the call's end, health, breaker, metrics, books — with the next
        batch of books (``Books.later``, ≤ 1 ms), while the gateway waits on that request's provider (inline in
        ``_unary`` and ``_stream``: one coroutine fewer per request)."""
        ctx.upstream_s += at - sent
        ctx.first_token_at = at
        ctx.status = 200
        first = b"".join(held)
        if ctx.trace is not None:
            ctx.trace.head = first  # its response id and model, read after the request (tracing.py)
        return await request.open_stream(self._headers(ctx, upstream, at), first)

    # -- bookkeeping ------------------------------------------------------------------------------

    def _headers(self, ctx: Ctx, upstream: Attempt, now: float) -> dict[str, str]:
        headers = {
            "x-request-id": ctx.request_id,
            "x-tailgate-provider": ctx.provider.name if ctx.provider else "",
            "x-tailgate-attempts": str(ctx.attempts),
            "x-tailgate-overhead-ms": f"{max(0.0, (now - ctx.t0 - ctx.upstream_s) * 1000.0):.3f}",  # Ctx.overhead_ms
        }
        if ctx.hedged:
            headers["x-tailgate-hedged"] = "1"
        if ctx.retried is not None:
            headers["x-tailgate-retried"] = ctx.retried  # a non-answer was held and the next route tried
        if upstream.upstream_api is not None:
            headers["x-tailgate-upstream-api"] = upstream.upstream_api  # how this provider was spoken to
        if ctx.ratelimit:
            headers.update(ctx.ratelimit)  # a limited key's windows, as OpenAI sends them on every answer
        return headers


class _Keeping:
    """A tap that keeps what it pushes (the quality signals of a stream with tools or JSON: answer_quality.py)."""

    __slots__ = ("_frames", "_tap")

    def __init__(self, tap: Tap, frames: list[bytes]) -> None:
        self._tap, self._frames = tap, frames

    def push(self, data: bytes) -> bool:
        self._frames.append(data)
        return self._tap.push(data)

    async def drain(self) -> None:
        await self._tap.drain()


def _drain(queue: deque[Route]) -> Iterator[Route]:
    while queue:
        yield queue.popleft()
