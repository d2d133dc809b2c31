"""The OpenAI endpoints of the gateway: choose routes, call through the measurement core, relay.

Retry and fallback (docs/gateway.md): before the first token reaches the client, a connect error, a
timeout, a 5xx, a 429, a malformed or cut stream moves the request to the next route, bounded by
``retry.max_attempts`` and ``retry.deadline``. Streams are held back only until the first
token-carrying chunk (the role chunk waits with them); from then on frames are relayed byte for byte
and a failure ends the stream with an SSE ``error`` event, never a silent cut and never a second
provider's output. 400/401/403/404 and ``insufficient_quota`` are returned as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import msgspec
from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.ledger import LedgerRow
from tailgate.routing import Route
from tailgate.upstream import Body, CallResult, Chunk, Done, Sent, call
from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError
from tailgate.wire.sse import DONE_FRAME
from tailgate.wire.types import decode_request

if TYPE_CHECKING:
    from tailgate.gateway.app import Gateway
    from tailgate.gateway.state import ProviderState

Endpoint = Literal["chat", "completions", "embeddings"]
PATHS: dict[str, str] = {"chat": "/chat/completions", "completions": "/completions", "embeddings": "/embeddings"}
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
MAX_PAUSE_S = 300.0
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(slots=True)
class _Ctx:
    """One client request as it moves through the gateway."""

    request_id: str
    endpoint: Endpoint
    t0: float = field(default_factory=time.perf_counter)
    wall: float = field(default_factory=time.time)
    key_id: str | None = None
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

    def overhead_ms(self, now: float) -> float:
        return max(0.0, (now - self.t0 - self.upstream_s) * 1000.0)


class Proxy:
    """Request handlers bound to one :class:`Gateway`."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self.handle(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self.handle(request, "completions")

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self.handle(request, "embeddings")

    # -- the request ------------------------------------------------------------------------------

    async def handle(self, request: web.Request, endpoint: Endpoint) -> web.StreamResponse:
        ctx = _Ctx(request_id=request.headers.get("x-request-id", "")[:128] or uuid.uuid4().hex, endpoint=endpoint)
        ctx.traffic_class = request.headers.get("x-tailgate-class") or None
        try:
            response = await self._serve(request, ctx)
        except WireError as err:
            ctx.status, ctx.outcome = err.status, ctx.outcome if ctx.outcome != "ok" else _error_outcome(err)
            response = self._error(err, ctx)
        except asyncio.CancelledError:
            ctx.status, ctx.outcome = 499, "client_closed"  # nginx's name for a client that went away
            self._record(ctx)
            raise
        self._record(ctx)
        return response

    async def _serve(self, request: web.Request, ctx: _Ctx) -> web.StreamResponse:
        gw = self.gw
        ctx.key_id = gw.keys.identify(request)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise WireError(
                413,
                f"Request body too large: the limit is {gw.config.max_body_bytes} bytes.",
                type="invalid_request_error",
            ) from None
        req = decode_request(ctx.endpoint, body, strict=False)
        ctx.alias = req.model
        routes = gw.aliases.get(req.model)
        if routes is None:
            ctx.outcome = "unknown_model"
            raise wire_errors.model_not_found(req.model)
        ctx.stream = bool(getattr(req, "stream", False))
        options = getattr(req, "stream_options", None)
        wants_usage = bool(options is not None and options.include_usage)
        obj: dict[str, Any] = msgspec.json.decode(body)
        now = time.monotonic()
        exclude = {name for name, p in gw.providers.items() if p.drained or p.paused(now)}
        order = gw.policy_for(req.model).order(routes, ctx.traffic_class, exclude)
        if not order:
            raise self._no_route(routes, now, ctx)
        deadline = ctx.t0 + gw.config.retry.deadline
        last: CallResult | None = None
        for route in order[: gw.config.retry.max_attempts]:
            if time.perf_counter() >= deadline:
                break
            provider = gw.providers[route.provider]
            if not gw.breakers.get(route.provider).allow():
                continue  # its circuit breaker is open (or its half-open trials are taken)
            health = gw.health.get(route.provider, route.model)
            health.begin()
            ctx.attempts += 1
            ctx.provider, ctx.route = provider, route
            payload = {**obj, "model": route.model}
            if ctx.stream:
                resp, result = await self._attempt_stream(request, ctx, provider, payload, wants_usage)
            else:
                resp, result = await self._attempt_unary(ctx, provider, payload)
            last = ctx.result = result
            health.observe(result)
            gw.breakers.get(route.provider).record_result(result)
            self._observe(provider, result)
            if resp is not None:
                return resp
            if result.error_class not in RETRYABLE:
                break
        raise self._final_error(last, ctx)

    # -- attempts ---------------------------------------------------------------------------------

    async def _attempt_unary(
        self, ctx: _Ctx, provider: ProviderState, payload: Mapping[str, Any]
    ) -> tuple[web.StreamResponse | None, CallResult]:
        body = b""
        sent = time.perf_counter()
        provider.in_flight += 1
        try:
            async with call(
                provider.client, PATHS[ctx.endpoint], payload, stream=False, request_id=ctx.request_id
            ) as c:
                async for event in c:
                    if isinstance(event, Sent):
                        sent = event.t
                    elif isinstance(event, Body):
                        body = event.raw
        finally:
            provider.in_flight -= 1
            ctx.upstream_s += time.perf_counter() - sent
        result = c.result
        assert result is not None
        if not result.ok:
            return None, result
        ctx.status = 200
        ctx.first_token_at = time.perf_counter()
        headers = self._headers(ctx, time.perf_counter())
        return web.Response(body=body, content_type="application/json", headers=headers), result

    async def _attempt_stream(
        self, request: web.Request, ctx: _Ctx, provider: ProviderState, payload: Mapping[str, Any], wants_usage: bool
    ) -> tuple[web.StreamResponse | None, CallResult]:
        held: list[bytes] = []
        resp: web.StreamResponse | None = None
        sent = time.perf_counter()
        provider.in_flight += 1
        try:
            async with call(
                provider.client,
                PATHS[ctx.endpoint],
                payload,
                stream=True,
                client_wants_usage=wants_usage,
                request_id=ctx.request_id,
            ) as c:
                async for event in c:
                    if isinstance(event, Chunk):
                        if resp is not None:
                            # Frames of one upstream read leave in one write (one syscall, not one each).
                            held.append(event.raw)
                            if event.last:
                                await resp.write(b"".join(held))
                                held.clear()
                        elif event.has_token:
                            resp = await self._commit(request, ctx, held, event.raw, sent)
                            held.clear()
                        else:
                            held.append(event.raw)
                    elif isinstance(event, Sent):
                        sent = event.t
                    elif isinstance(event, Done):
                        if resp is None:
                            resp = await self._commit(request, ctx, held, b"", sent)
                            held.clear()
                        held.append(event.raw or DONE_FRAME)
                        await resp.write(b"".join(held))
                        held.clear()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            raise asyncio.CancelledError from None  # the client went away while we wrote to it
        finally:
            provider.in_flight -= 1
            if resp is None:
                ctx.upstream_s += time.perf_counter() - sent
        result = c.result
        assert result is not None
        if resp is not None and held and not result.ok:
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientConnectionResetError):
                await resp.write(b"".join(held))  # frames the upstream sent before it failed
        if resp is not None and not result.ok:
            # Output already reached the client: no fallback (it would duplicate text). End with an
            # SSE error event in the OpenAI shape, never a silent cut (PEERS.md: Portkey #1797).
            ctx.outcome = result.error_class or "stream_error"
            err = result.error or WireError(
                502,
                f"The upstream stream failed after output began ({result.error_class}).",
                type="server_error",
                code=result.error_class,
            )
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientConnectionResetError):
                await resp.write(err.sse_frame())
        if resp is not None:
            await resp.write_eof()
        return resp, result

    async def _commit(
        self, request: web.Request, ctx: _Ctx, held: list[bytes], first: bytes, sent: float
    ) -> web.StreamResponse:
        """Send headers and everything held so far: from here on this route owns the response."""
        now = time.perf_counter()
        ctx.upstream_s += now - sent
        ctx.first_token_at = now
        ctx.status = 200
        resp = web.StreamResponse(status=200, headers={**_SSE_HEADERS, **self._headers(ctx, now)})
        await resp.prepare(request)
        await resp.write(b"".join(held) + first)
        return resp

    # -- bookkeeping ------------------------------------------------------------------------------

    def _headers(self, ctx: _Ctx, now: float) -> dict[str, str]:
        return {
            "x-request-id": ctx.request_id,
            "x-tailgate-provider": ctx.provider.name if ctx.provider else "",
            "x-tailgate-attempts": str(ctx.attempts),
            "x-tailgate-overhead-ms": f"{ctx.overhead_ms(now):.3f}",
        }

    def _observe(self, provider: ProviderState, result: CallResult) -> None:
        provider.observe(result)
        self.gw.metrics.attempts.labels(provider.name, result.error_class or "ok").inc()
        if result.error_class == "rate_limited":
            pause = min(MAX_PAUSE_S, result.retry_after_s if result.retry_after_s is not None else 1.0)
            provider.paused_until = max(provider.paused_until, time.monotonic() + pause)

    def _no_route(self, routes: list[Route], now: float, ctx: _Ctx) -> WireError:
        providers = [self.gw.providers[r.provider] for r in routes]
        paused = [p for p in providers if p.paused(now) and not p.drained]
        ctx.outcome = "no_route"
        if paused:
            wait = min(p.paused_until for p in paused) - now
            err = wire_errors.rate_limited(
                f"Every provider for '{ctx.alias}' is rate limited right now. Retry after {wait:.1f}s."
            )
            err.headers = {"Retry-After": str(max(1, math.ceil(wait)))}
            return err
        return wire_errors.overloaded(f"No provider is available for '{ctx.alias}' (all are drained).")

    def _final_error(self, last: CallResult | None, ctx: _Ctx) -> WireError:
        if last is None:
            ctx.outcome = "deadline"
            return wire_errors.timeout("The retry deadline passed before any provider could be tried.")
        ctx.outcome = last.error_class or "error"
        if last.error_class == "cancelled":
            raise asyncio.CancelledError
        if last.error is not None and last.error_class in (
            "http_4xx",
            "insufficient_quota",
            "rate_limited",
            "http_5xx",
        ):
            err = last.error
            if last.error_class == "rate_limited" and last.retry_after_s is not None:
                err.headers = {"Retry-After": str(max(1, math.ceil(last.retry_after_s)))}
            return err
        if last.error_class is not None and last.error_class.startswith("timeout"):
            return wire_errors.timeout(
                f"The upstream did not answer in time ({last.error_class}) after {ctx.attempts} attempt(s)."
            )
        return wire_errors.bad_gateway(
            f"The upstream failed ({last.error_class}: {last.detail or 'no detail'}) after {ctx.attempts} attempt(s)."
        )

    def _error(self, err: WireError, ctx: _Ctx) -> web.Response:
        headers = {"x-request-id": ctx.request_id, "x-tailgate-attempts": str(ctx.attempts)}
        if ctx.provider is not None:
            headers["x-tailgate-provider"] = ctx.provider.name
        return error_response(err, headers)

    def _record(self, ctx: _Ctx) -> None:
        """One ledger row and the request metrics, for every request, whatever its outcome."""
        gw, now = self.gw, time.perf_counter()
        result, provider = ctx.result, ctx.provider
        served = ctx.status == 200 and result is not None
        prompt = result.prompt_tokens if result is not None else None
        output = result.output_tokens if result is not None else None
        cost = provider.cost(prompt, output) if (served and provider is not None) else None
        ttft_ms = (ctx.first_token_at - ctx.t0) * 1000.0 if ctx.first_token_at is not None else None
        e2e_ms = (now - ctx.t0) * 1000.0
        overhead_ms = ctx.overhead_ms(ctx.first_token_at if ctx.first_token_at is not None else now)
        pname = provider.name if provider is not None else "-"
        gw.metrics.requests.labels(ctx.alias, pname, ctx.outcome).inc()
        if served and provider is not None:
            gw.metrics.e2e.labels(ctx.alias, pname).observe(e2e_ms / 1000.0)
            if ttft_ms is not None:
                gw.metrics.ttft.labels(ctx.alias, pname).observe(ttft_ms / 1000.0)
            gw.metrics.overhead.labels(ctx.alias).observe(overhead_ms / 1000.0)
            gw.metrics.tokens.labels(pname, "input").inc(prompt or 0)
            gw.metrics.tokens.labels(pname, "output").inc(output or 0)
            if cost is not None:
                gw.metrics.cost.labels(pname, provider.config.price.currency).inc(cost)
        if gw.trace is not None and ctx.alias in gw.aliases:
            gw.trace.record(ctx.t0, ctx.alias, ctx.traffic_class, prompt, output, ctx.stream, ctx.status)
        if gw.ledger is not None:
            gw.ledger.record(
                LedgerRow(
                    ts=ctx.wall,
                    request_id=ctx.request_id,
                    key_id=ctx.key_id,
                    alias=ctx.alias,
                    provider=provider.name if provider is not None else None,
                    upstream_model=ctx.route.model if ctx.route is not None else None,
                    endpoint=ctx.endpoint,
                    stream=ctx.stream,
                    traffic_class=ctx.traffic_class,
                    status=ctx.status,
                    outcome=ctx.outcome,
                    attempts=ctx.attempts,
                    prompt_tokens=prompt,
                    output_tokens=output,
                    tokens_estimated=result.tokens_estimated if result is not None else False,
                    ttft_ms=ttft_ms if served else None,
                    e2e_ms=e2e_ms,
                    overhead_ms=overhead_ms if served else None,
                    cost=cost,
                )
            )


def _error_outcome(err: WireError) -> str:
    if err.status == 401:
        return "unauthorized"
    if err.status == 413:
        return "too_large"
    if err.status == 429:
        return "rate_limited"
    return "bad_request" if err.status == 400 else f"http_{err.status}"
