"""The simulated provider's HTTP face: OpenAI endpoints plus ``/sim/*`` control and truth.

Request path, in the order a real provider applies it: outage → hold → stall before headers → auth → rate
limit → quota → body validation → injected errors → pre-queue latency → engine queue (overflow answers
``overflow_status``) → prefill → decode steps → response. Every request, success or not, leaves a
:class:`~tailgate.sim.truth.TruthRecord`.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import msgspec
from aiohttp import web

from tailgate._aiohttp import BODY_LIMITS_KEY, error_response, openai_shaped_errors
from tailgate.accuracy import solve, wrong_answer
from tailgate.sim import anthropic as sim_anthropic
from tailgate.sim import degrade, shape
from tailgate.sim import responses as sim_responses
from tailgate.sim.bodies import chat_prompt, finish_reason, unary_object
from tailgate.sim.engine import QueueFull, Sequence
from tailgate.sim.request import Abort, Ctx, Model, api_key
from tailgate.sim.stream import SSEWriter
from tailgate.sim.text import estimate_tokens
from tailgate.sim.truth import TruthRecord
from tailgate.sim.usage import usage as sim_usage
from tailgate.wire import errors as wire_errors
from tailgate.wire.batch import BatchLimits
from tailgate.wire.errors import WireError
from tailgate.wire.http_refusals import BodyLimits
from tailgate.wire.sse import DONE_FRAME
from tailgate.wire.types import (
    ChatCompletionRequest,
    CompletionRequest,
    chat_chunk_bytes,
    completion_chunk_bytes,
    decode_request,
)

PROVIDER_KEY: web.AppKey[Model] = web.AppKey("provider", Model)
_json = msgspec.json.Encoder()
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class SimHandlers:
    """The OpenAI-compatible endpoints of one :class:`SimProvider`."""

    def __init__(self, provider: Model) -> None:
        self.p = provider

    # -- shared pre-checks ------------------------------------------------------------------------

    async def gate(self, request: web.Request, ctx: Ctx) -> web.Response | None:
        """Faults and auth that act before the body is read. Returns a response to send, or None."""
        p, f = self.p, self.p.faults
        if f.active:
            if f.outage:
                ctx.fault = "outage"
                if f.outage_mode != "503":
                    raise Abort
                return error_response(wire_errors.overloaded("Service unavailable (simulated outage)."))
            if f.hold:
                ctx.fault = "hold"
                await p.wait_while_held()
                f = p.faults  # released: what follows sees the faults of now, not of the arrival
            if f.stall_headers_s:
                ctx.fault = "stall_headers"
                await asyncio.sleep(f.stall_headers_s)
        key = api_key(request)
        if p.spec.api_keys and key not in p.spec.api_keys:
            return error_response(wire_errors.authentication_error())
        if f.active:
            if f.rate_limit_rps is not None or f.rate_limit_rpm is not None:
                decision = p.limiter.check(key, f.rate_limit_rps, f.rate_limit_rpm)
                ctx.headers.update(
                    decision.headers
                    if f.rate_limit_headers
                    else {k: v for k, v in decision.headers.items() if not k.startswith("x-ratelimit-")}
                )
                if not decision.allowed:
                    ctx.fault = "rate_limit"
                    err = wire_errors.rate_limited(
                        f"Rate limit reached for requests on this API key. Retry after {decision.retry_after_s:.2f}s."
                    )
                    return error_response(err, ctx.headers)
            if f.quota_exhausted:
                ctx.fault = "quota_exhausted"
                return error_response(wire_errors.insufficient_quota(), ctx.headers)
        return None

    def injected_error(self, ctx: Ctx) -> web.Response | None:
        f = self.p.faults
        if f.error_rate and self.p.rng.random() < f.error_rate:
            ctx.fault = "error_rate"
            status = self.p.rng.choice(f.error_statuses)
            err = WireError(
                status,
                f"Simulated upstream error {status}.",
                type="server_error" if status >= 500 else "invalid_request_error",
            )
            return error_response(err, ctx.headers)
        return None

    def record(self, ctx: Ctx, status: int, stream: bool, seq: Sequence | None = None, **fields: Any) -> None:
        """Record the request's ground truth; with ``seq`` (it reached the engine) also its prompt tokens,
        how many of them were cached and the prefill the engine model gave it."""
        if seq is not None:
            fields["prompt_tokens"] = seq.prompt_tokens
            fields["degraded"] = seq.degraded
            if self.p.prefix_cache is not None:
                fields["cached_tokens"] = seq.cached_tokens
            if seq.admitted_at:
                prefill = seq.ready_at - seq.admitted_at - seq.extra_delay_s
                fields["prefill_ms"] = round(prefill * 1000.0, 3)
        ctx.recorded = True
        self.p.truth.add(
            TruthRecord(
                id=ctx.rid,
                received_at=ctx.wall,
                status=status,
                stream=stream,
                fault=ctx.fault,
                client_request_id=ctx.headers.get("x-request-id"),
                api=ctx.api,
                **fields,
            )
        )

    def ms(self, ctx: Ctx, t: float) -> float:
        return round((t - ctx.t0) * 1000.0, 3)

    # -- chat and completions ---------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completions")

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "responses")

    async def messages(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "messages")

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        ctx = Ctx(request, _ID_PREFIX[kind] + self.p.new_id())
        try:
            return await self._generate_inner(request, kind, ctx)
        except (asyncio.CancelledError, ConnectionResetError):
            # The client went away (aiohttp cancels the handler, or a write finds the transport closing); nginx's
            # 499 names that outcome. Without the second, a stream whose client left during its last writes had
            # no truth at all.
            if not ctx.recorded:
                self.record(ctx, 499, False)
            raise
        except Abort:
            if ctx.fault == "outage":  # other aborts recorded their truth before raising
                self.record(ctx, 0, False)
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPServiceUnavailable() from None  # never sent: the transport is gone

    async def _generate_inner(self, request: web.Request, kind: str, ctx: Ctx) -> web.StreamResponse:
        p = self.p
        if kind == "messages" and not p.spec.params.anthropic:
            self.record(ctx, 404, False)
            return sim_anthropic.not_served()
        if (early := await self.gate(request, ctx)) is not None:
            self.record(ctx, early.status, False)
            return sim_anthropic.reshape(early) if kind == "messages" else early
        if kind == "responses":
            return await sim_responses.handle(self, request, ctx)
        if kind == "messages":
            return await sim_anthropic.handle(self, request, ctx)
        body = await request.read()
        req: ChatCompletionRequest | CompletionRequest
        try:
            if kind == "chat":
                req = decode_request("chat", body, strict=p.spec.strict)
            else:
                req = decode_request("completions", body, strict=p.spec.strict)
        except WireError as exc:
            self.record(ctx, exc.status, False)
            return error_response(exc, ctx.headers)
        stream = bool(req.stream)
        if p.spec.params.dialect == "openai" and p.spec.strict and (vendor := shape.refuse_vendor_fields(req)):
            self.record(ctx, vendor.status, stream)
            return error_response(vendor, ctx.headers)
        if p.spec.models and req.model not in p.spec.models:
            self.record(ctx, 404, stream)
            return error_response(wire_errors.model_not_found(req.model), ctx.headers)
        if req.n is not None and req.n > 1:
            self.record(ctx, 400, stream)
            err = wire_errors.invalid_request("n > 1 is not supported by this provider.", param="n")
            return error_response(err, ctx.headers)
        if isinstance(req, ChatCompletionRequest):
            max_tokens = req.max_completion_tokens or req.max_tokens
            prompt_text = chat_prompt(req)
        else:
            max_tokens = req.max_tokens
            prompt_text = req.prompt if isinstance(req.prompt, str) else " ".join(map(str, req.prompt))
        limit = p.spec.params.max_output_tokens
        if max_tokens is not None and max_tokens > limit:
            self.record(ctx, 400, stream)
            err = wire_errors.invalid_request(
                f"max_tokens is too large: {max_tokens}. This model supports at most {limit} completion tokens.",
                param="max_completion_tokens" if getattr(req, "max_completion_tokens", None) else "max_tokens",
            )
            return error_response(err, ctx.headers)
        if p.faults.active and (injected := self.injected_error(ctx)) is not None:
            self.record(ctx, injected.status, stream)
            return injected

        seed = p.text_seed(req.seed)
        stop = [req.stop] if isinstance(req.stop, str) else req.stop
        seq = self.sequence(ctx.rid, prompt_text, max_tokens, seed, stop, req)
        if (refused := await self.submit(seq, ctx, stream, self.prompt_blocks(request, prompt_text))) is not None:
            return refused
        try:
            if stream:
                return await self._stream(request, req, kind, seq, ctx)
            return await self._unary(request, req, kind, seq, ctx)
        finally:
            p.engine.cancel(seq)  # no-op when finished; frees the slot when the client left early

    def prompt_blocks(self, request: web.Request, prompt_text: str) -> list[bytes]:
        """The prompt's block digests under the request's API key (none without a prefix cache)."""
        cache = self.p.prefix_cache
        return cache.digests(api_key(request), prompt_text) if cache is not None else []

    async def submit(self, seq: Sequence, ctx: Ctx, stream: bool, blocks: list[bytes]) -> web.Response | None:
        """Apply the active faults' delays to ``seq`` and hand it to the engine; the refusal (429 or 503)
        when the engine's queue is full, else None. Shared by chat, completions and responses.

        The prefix cache is asked as the request reaches the engine (after the pre-queue time, as a
        provider's serving engine would), and the prompt's blocks are kept once the engine has taken it."""
        p = self.p
        delay = p.pre_queue_delay(time.perf_counter())
        f = p.faults
        if f.active and f.spike_rate and p.rng.random() < f.spike_rate:
            ctx.fault = "spike"
            delay += f.spike_s
        if f.active and f.stall_first_token_s:
            ctx.fault = ctx.fault or "stall_first_token"
            seq.extra_delay_s = f.stall_first_token_s
        if f.active and f.slow_drip_s:
            ctx.fault = ctx.fault or "slow_drip"
            seq.drip_s = f.slow_drip_s
        if delay > 0:
            await asyncio.sleep(delay)
        seq.notify_each = stream
        cache = p.prefix_cache
        if cache is not None:
            seq.cached_tokens = cache.lookup(blocks)
        try:
            p.engine.submit(seq)
        except QueueFull as exc:
            status = p.spec.params.overflow_status
            ctx.fault = "queue_full"
            self.record(ctx, status, stream)
            err = (
                wire_errors.rate_limited(f"Too many requests in flight: {exc}.")
                if status == 429
                else wire_errors.overloaded(f"The engine is overloaded: {exc}.")
            )
            return error_response(err, ctx.headers)
        if cache is not None:
            cache.store(blocks)
        return None

    def sequence(
        self,
        rid: str,
        prompt_text: str,
        max_tokens: int | None,
        seed: int,
        stop: list[str] | None,
        req: ChatCompletionRequest | CompletionRequest,
    ) -> Sequence:
        p = self.p
        params = p.spec.params
        f = p.faults
        right = degrade.accuracy(f, params.accuracy)
        prompt_tokens = estimate_tokens(prompt_text)
        script: list[str] | None = None
        reasoning = 0
        call: tuple[str, str] | None = None
        degraded: str | None = None
        if isinstance(req, ChatCompletionRequest):
            reasoning = shape.reasoning_tokens(req, params, p.rng)
            if (picked := shape.tool_call(req, params, p.rng)) is not None:
                name, arguments = picked
                if (canary := degrade.canary_call(prompt_text, name, right, p.rng)) is not None:
                    arguments, wrong = canary
                    degraded = "canary_wrong" if wrong else None
                if (broken := degrade.break_tool_call(f, req.tools, name, arguments, p.rng)) is not None:
                    name, arguments, degraded = broken
                script = shape.fragments(arguments)
                call = ("call_" + rid.removeprefix("chatcmpl-"), name)
        answer = solve(prompt_text) if call is None else None
        if answer is not None:
            if p.rng.random() >= right:
                answer = wrong_answer(answer, p.rng)
                degraded = "canary_wrong"
            words = answer.split(" ")
            script = [words[0], *(" " + w for w in words[1:])]
        forced: str | None = None
        if (nothing := degrade.no_output(f, p.rng)) is not None:
            degraded, forced = nothing
            script, reasoning, call = [], 0, None
        ignore_eos = bool(req.ignore_eos) and degraded not in ("content_filtered", "empty_answer")
        min_tokens = req.min_tokens or 0
        cap = params.max_tokens_cap
        if max_tokens is not None and not cap:
            target, reason = max_tokens, "length"
        elif script is not None and not ignore_eos:
            target, reason = reasoning + len(script), "stop"
        else:
            base = params.default_output_tokens
            # From the text seed: the same request seed gives the same answer, length included.
            target = reasoning + max(1, round(base * random.Random(seed).uniform(0.5, 1.5)))
            reason = "length" if ignore_eos else "stop"
        if max_tokens is None and not ignore_eos:
            target = max(target, min_tokens)
        elif cap and max_tokens is not None and target > max_tokens:  # a cap, not a length: cut the answer
            target, reason = max_tokens, "length"
        seq = Sequence(
            rid,
            prompt_tokens=prompt_tokens,
            target=target,
            seed=seed,
            script=script,
            stop=stop,
            length_reason=reason,
            reasoning=reasoning,
            ignore_eos=ignore_eos,
            min_tokens=min_tokens,
            tool_call=call,
        )
        seq.degraded, seq.forced_finish = degraded, forced
        return seq

    def faulty_token_index(self, seq: Sequence) -> int | None:
        f = self.p.faults
        if f.active and f.malformed_rate and self.p.rng.random() < f.malformed_rate:
            return max(0, min(seq.target, 8) // 2)
        return None

    async def _unary(
        self,
        request: web.Request,
        req: ChatCompletionRequest | CompletionRequest,
        kind: str,
        seq: Sequence,
        ctx: Ctx,
    ) -> web.StreamResponse:
        f = self.p.faults
        cut = f.disconnect_after_tokens if f.active else None
        while not seq.done:
            if cut is not None and len(seq.out) >= cut:
                ctx.fault = "disconnect"
                self.record(ctx, 0, False, output_tokens=len(seq.out), seq=seq)
                raise Abort
            if cut is not None:
                seq.notify_each = True
            await seq.wait()
        thought = min(seq.reasoning, len(seq.out))
        body = _json.encode(unary_object(self.p.spec.params, req, kind, seq, int(ctx.wall)))
        if self.faulty_token_index(seq) is not None:
            ctx.fault = "malformed"
            body = body[: len(body) // 2]
        now = time.perf_counter()
        self.record(
            ctx,
            200,
            False,
            queue_ms=round((seq.admitted_at - seq.enqueued_at) * 1000, 3),
            ttft_ms=self.ms(ctx, seq.first_token_at) if seq.out else None,
            ttft_answer_ms=self.ms(ctx, seq.answer_at) if seq.answer_at else None,
            e2e_ms=self.ms(ctx, now),
            output_tokens=len(seq.out),
            reasoning_tokens=thought,
            seq=seq,
            finish_reason=finish_reason(seq) if kind == "chat" else seq.finish_reason,
        )
        return web.Response(body=body, content_type="application/json", headers=ctx.headers)

    async def _stream(
        self,
        request: web.Request,
        req: ChatCompletionRequest | CompletionRequest,
        kind: str,
        seq: Sequence,
        ctx: Ctx,
    ) -> web.StreamResponse:
        f = self.p.faults
        chat = kind == "chat"
        created, model = int(ctx.wall), req.model
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        # vLLM: usage (running totals) on every chunk when both include_usage and continuous_usage_stats.
        continuous = include_usage and bool(req.stream_options and req.stream_options.continuous_usage_stats)
        cut = f.disconnect_after_tokens if f.active else None
        bad_at = self.faulty_token_index(seq)
        resp = web.StreamResponse(status=200, headers={**_SSE_HEADERS, **ctx.headers})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        # OpenAI opens with a role-only chunk; it carries no token, so it is not the first token (docs/metrics.md).
        # Either way this write puts the headers on the wire, after which frames go straight out.
        zero = sim_usage(self.p.spec.params, seq, 0)
        opening = (
            chat_chunk_bytes(seq.id, created, model, "", role="assistant", usage=zero if continuous else None)
            if chat
            else b""
        )
        await resp.write(b"data: " + opening + b"\n\n" if opening else b"")
        writer = SSEWriter(
            request.transport,
            chat=chat,
            created=created,
            model=model,
            cut=cut,
            bad_at=bad_at,
            continuous_usage=continuous,
            params=self.p.spec.params,
        )
        writer.flush(seq)
        seq.sink = writer.on_token
        while not (seq.done or writer.cut_reached):
            await seq.wait()
        seq.sink = None
        writer.flush(seq)
        if writer.bad_at is not None and writer.sent > writer.bad_at:
            ctx.fault = "malformed"
        first_ms = self.ms(ctx, writer.first_at) if writer.sent else None
        answer_ms = self.ms(ctx, writer.answer_at) if writer.answer_at else None
        if writer.cut_reached:
            ctx.fault = "disconnect"
            self.record(
                ctx,
                200,
                True,
                ttft_ms=first_ms,
                ttft_answer_ms=answer_ms,
                output_tokens=writer.sent,
                reasoning_tokens=min(writer.sent, seq.reasoning),
                seq=seq,
                itl_ms=writer.gaps,
            )
            raise Abort
        thought = min(seq.reasoning, len(seq.out))
        usage = sim_usage(self.p.spec.params, seq, len(seq.out), reasoning=thought if seq.reasoning else None)
        every = usage if continuous else None
        tail = []
        if chat:
            finish = chat_chunk_bytes(seq.id, created, model, None, finish_reason=finish_reason(seq), usage=every)
            tail.append(b"data: " + finish + b"\n\n")
        else:
            tail.append(
                b"data: "
                + completion_chunk_bytes(seq.id, created, model, "", finish_reason=seq.finish_reason, usage=every)
                + b"\n\n"
            )
        if include_usage:
            builder = chat_chunk_bytes if chat else completion_chunk_bytes
            tail.append(b"data: " + builder(seq.id, created, model, None, usage=usage) + b"\n\n")
        tail.append(DONE_FRAME)
        await resp.write(b"".join(tail))
        await resp.write_eof()
        now = time.perf_counter()
        self.record(
            ctx,
            200,
            True,
            queue_ms=round((seq.admitted_at - seq.enqueued_at) * 1000, 3),
            ttft_ms=first_ms,
            ttft_answer_ms=answer_ms,
            e2e_ms=self.ms(ctx, now),
            output_tokens=len(seq.out),
            reasoning_tokens=thought,
            seq=seq,
            finish_reason=finish_reason(seq) if chat else seq.finish_reason,
            itl_ms=writer.gaps,
        )
        return resp

    # -- embeddings, models, health ---------------------------------------------------------------

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        from tailgate.sim.embeddings import handle

        return await handle(self, request, Ctx(request, "emb-" + self.p.new_id()))

    async def models(self, request: web.Request) -> web.StreamResponse:
        names = self.p.spec.models or (DEFAULT_MODEL,)
        created = int(self.p.started_at_wall)
        data = [{"id": m, "object": "model", "created": created, "owned_by": self.p.name} for m in names]
        return web.Response(body=_json.encode({"object": "list", "data": data}), content_type="application/json")

    async def health(self, request: web.Request) -> web.StreamResponse:
        f = self.p.faults
        if f.outage:
            return web.json_response({"status": "unavailable", "provider": self.p.name}, status=503)
        return web.json_response({"status": "ok", "provider": self.p.name})


DEFAULT_MODEL = "tailgate-sim"
_JSON_PATHS = (
    "/v1/chat/",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/embeddings",
    "/v1/batches",
    "/sim/",
)
"""POST paths whose bodies must be JSON (a 415 otherwise): every ``/v1`` one but ``/v1/files`` (multipart)."""
MAX_BODY_BYTES = 32 * 1024 * 1024
_ID_PREFIX = {"chat": "chatcmpl-", "completions": "cmpl-", "responses": "resp_", "messages": "msg_"}


def build_app(provider: Model) -> web.Application:
    """The aiohttp application of one simulated provider."""
    from tailgate.sim.batches import SimBatches
    from tailgate.sim.control import add_control_routes

    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[openai_shaped_errors])
    app[PROVIDER_KEY] = provider
    app[BODY_LIMITS_KEY] = BodyLimits(max_bytes=MAX_BODY_BYTES, json_paths=_JSON_PATHS)
    h = SimHandlers(provider)
    app.router.add_post("/v1/chat/completions", h.chat)
    app.router.add_post("/v1/completions", h.completions)
    app.router.add_post("/v1/responses", h.responses)
    app.router.add_post("/v1/messages", h.messages)
    app.router.add_post("/v1/messages/count_tokens", sim_anthropic.count_tokens_handler(h))
    app.router.add_post("/v1/embeddings", h.embeddings)
    app.router.add_get("/v1/models", h.models)
    app.router.add_get("/health", h.health)
    app.router.add_get("/healthz", h.health)
    batches = SimBatches(h, BatchLimits(max_file_bytes=MAX_BODY_BYTES))
    batches.add_routes(app)
    provider.batches = batches
    add_control_routes(app, provider, prefix="/sim")
    return app
