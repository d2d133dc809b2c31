"""``POST /v1/messages``: the simulator's Anthropic dialect, on the same engine as chat.

Presets with ``anthropic: true`` serve it natively, as DeepSeek's (``https://api.deepseek.com/anthropic``)
and Bailian's Anthropic-compatible endpoints do; elsewhere the path is a 404 in Anthropic's error shape.
A request reads the same engine model as chat: thinking (the first tokens, as a ``thinking`` block with a
signature), tool calls (a ``tool_use`` block whose input streams as ``input_json_delta``), the accuracy
suite's answers, queueing, and the faults (outage, stalls, auth — ``x-api-key`` or a bearer —, rate
limits, quota, injected errors, ``disconnect_after_tokens``, ``malformed_rate``). Errors are Anthropic's
``{"type": "error", "error": {...}}``; truth rows say ``api: anthropic``.

``max_tokens`` is a cap here, not a length: Anthropic requires it on every request (Claude Code sends
32000), and a model stops when its answer ends. So the answer's length is the preset's natural one
(``default_output_tokens`` × 0.5–1.5, thinking first), cut to ``max_tokens`` (``stop_reason: max_tokens``).
``/v1/messages/count_tokens`` answers the simulator's own estimate and leaves no truth row.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from tailgate.sim.engine import Sequence
from tailgate.sim.request import Abort, Ctx, Handlers, api_key
from tailgate.sim.text import estimate_tokens, token_at
from tailgate.wire import anthropic as wa
from tailgate.wire import errors as wire_errors
from tailgate.wire.anthropic_translate import prompt_text, tool_choice_to_openai, tools_to_openai
from tailgate.wire.errors import WireError, parse_error_body
from tailgate.wire.types import ChatCompletionRequest, ChatMessage

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_json = msgspec.json.Encoder()


def error(err: WireError, headers: dict[str, str] | None = None) -> web.Response:
    """An error response in Anthropic's shape, with the error's own headers (Retry-After …)."""
    merged = {**(headers or {}), **(err.headers or {})}
    return web.Response(status=err.status, body=wa.error_body(err), content_type="application/json", headers=merged)


def reshape(resp: web.Response) -> web.Response:
    """The same refusal (status, headers) that the shared gate or engine answered, in Anthropic's shape."""
    body = resp.body if isinstance(resp.body, bytes) else b""
    headers = {k: v for k, v in resp.headers.items() if k.lower() not in ("content-type", "content-length")}
    return error(parse_error_body(resp.status, body), headers)


def not_served() -> web.Response:
    """What a provider without an Anthropic endpoint answers on ``/v1/messages``."""
    return error(wire_errors.not_found("This provider does not serve the Anthropic Messages API (POST /v1/messages)."))


def signature(seq_id: str) -> str:
    """A stand-in for the opaque thinking signature (stable per message, never parsed by anyone)."""
    return "sim-" + hashlib.sha256(seq_id.encode()).hexdigest()[:40]


def _answers_tool_result(req: wa.MessagesRequest) -> bool:
    """Whether the last turn (past any ``system`` turns) is a user turn carrying ``tool_result`` blocks."""
    last = next((m for m in reversed(req.messages) if m.role != "system"), None)
    return (
        last is not None
        and last.role == "user"
        and isinstance(last.content, list)
        and any(isinstance(b, wa.ToolResultBlock) for b in last.content)
    )


def _chat_view(req: wa.MessagesRequest) -> ChatCompletionRequest:
    """The request as the engine's shape functions read it (thinking switch, tools, tool_choice)."""
    tool_choice, _ = tool_choice_to_openai(req.tool_choice)
    thinking: dict[str, Any] | None = None
    if req.thinking is not None:
        thinking = {"type": "disabled" if req.thinking.type == "disabled" else "enabled"}
        if req.thinking.budget_tokens is not None:
            thinking["budget_tokens"] = req.thinking.budget_tokens
    return ChatCompletionRequest(
        model=req.model,
        messages=[ChatMessage(role="tool" if _answers_tool_result(req) else "user", content="")],
        tools=tools_to_openai(req),
        tool_choice=tool_choice,
        thinking=thinking,
    )


async def handle(h: Handlers, request: web.Request, ctx: Ctx) -> web.StreamResponse:
    """The request after the shared gate (outage, stalls, auth, rate limits, quota) let it through."""
    p = h.p
    try:
        req = wa.decode_messages(await request.read(), strict=p.spec.strict)
        chat = _chat_view(req)
    except WireError as exc:
        h.record(ctx, exc.status, False)
        return error(exc, ctx.headers)
    stream = req.stream
    if p.spec.models and req.model not in p.spec.models:
        h.record(ctx, 404, stream)
        return error(WireError(404, f"model: {req.model}", type="not_found_error"), ctx.headers)
    limit = p.spec.params.max_output_tokens
    if req.max_tokens > limit:
        h.record(ctx, 400, stream)
        err = wire_errors.invalid_request(f"max_tokens: {req.max_tokens} > {limit}, the maximum for this model.")
        return error(err, ctx.headers)
    if p.faults.active and (injected := h.injected_error(ctx)) is not None:
        h.record(ctx, injected.status, stream)
        return reshape(injected)
    text = prompt_text(req)
    seq = h.sequence(ctx.rid, text, None, p.text_seed(None), req.stop_sequences, chat)
    if seq.target > req.max_tokens:  # max_tokens caps the natural answer (module docstring)
        seq.target, seq.length_reason = req.max_tokens, "length"
    if (refused := await h.submit(seq, ctx, stream, h.prompt_blocks(request, text))) is not None:
        return reshape(refused)
    try:
        if stream:
            return await _stream(h, request, req, seq, ctx)
        return await _unary(h, req, seq, ctx)
    finally:
        p.engine.cancel(seq)


def _stop(seq: Sequence, stop_sequences: list[str] | None) -> tuple[str, str | None]:
    """Anthropic's stop reason; for a stop string, which one matched (the engine holds back the token
    that completed it, so it is recomputed from the text seed)."""
    if seq.finish_reason in ("content_filter", "sensitive"):
        return "refusal", None  # Anthropic's stop reason for an answer its classifiers stopped
    if seq.finish_reason != "stop":
        return ("max_tokens", None) if seq.finish_reason == "length" else ("end_turn", None)
    if seq.tool_call is not None:
        return "tool_use", None
    answer = len(seq.out) - seq.reasoning
    if stop_sequences and seq.stop and (seq.script is None or answer < len(seq.script)):
        token = token_at(seq.seed, answer) if seq.script is None else seq.script[answer]
        tail = seq.tail + token
        matched = next((s for s in stop_sequences if s in tail), None)
        if matched is not None:
            return "stop_sequence", matched
    return "end_turn", None


def _usage(seq: Sequence, output_tokens: int) -> wa.Usage:
    """Anthropic's usage: ``input_tokens`` is the uncached part of the prompt and the prefix cache's hit is
    ``cache_read_input_tokens`` (the three counts add up to the prompt; the simulator writes no explicit
    cache, so ``cache_creation_input_tokens`` stays 0)."""
    cached = seq.cached_tokens or 0
    return wa.Usage(
        input_tokens=seq.prompt_tokens - cached, output_tokens=output_tokens, cache_read_input_tokens=cached
    )


def _tool_id(seq: Sequence) -> str:
    return "toolu_" + seq.id.removeprefix("msg_")


def _content(seq: Sequence) -> list[wa.OutputBlock]:
    thought = min(seq.reasoning, len(seq.out))
    blocks: list[wa.OutputBlock] = []
    if thought:
        blocks.append(wa.ThinkingBlock(thinking="".join(seq.out[:thought]), signature=signature(seq.id)))
    answer = "".join(seq.out[thought:])
    if seq.tool_call is not None:
        try:
            args = msgspec.json.decode(answer) if answer else {}
        except msgspec.DecodeError:
            args = {}  # cut by max_tokens mid-JSON: what the model had said is not an object yet
        blocks.append(wa.ToolUseBlock(id=_tool_id(seq), name=seq.tool_call[1], input=args))
    elif answer:
        blocks.append(wa.TextBlock(text=answer))
    return blocks


async def _unary(h: Handlers, req: wa.MessagesRequest, seq: Sequence, ctx: Ctx) -> web.StreamResponse:
    f = h.p.faults
    cut = f.disconnect_after_tokens if f.active else None
    while not seq.done:
        if cut is not None and len(seq.out) >= cut:
            ctx.fault = "disconnect"
            h.record(ctx, 0, False, seq, output_tokens=len(seq.out))
            raise Abort
        if cut is not None:
            seq.notify_each = True
        await seq.wait()
    reason, sequence = _stop(seq, req.stop_sequences)
    message = wa.MessageResponse(
        id=seq.id,
        model=req.model,
        content=_content(seq),
        stop_reason=reason,
        stop_sequence=sequence,
        usage=_usage(seq, len(seq.out)),
    )
    body = _json.encode(message)
    if h.faulty_token_index(seq) is not None:
        ctx.fault = "malformed"
        body = body[: len(body) // 2]
    h.record(
        ctx,
        200,
        False,
        seq,
        queue_ms=round((seq.admitted_at - seq.enqueued_at) * 1000, 3),
        ttft_ms=h.ms(ctx, seq.first_token_at) if seq.out else None,
        ttft_answer_ms=h.ms(ctx, seq.answer_at) if seq.answer_at else None,
        e2e_ms=h.ms(ctx, time.perf_counter()),
        output_tokens=len(seq.out),
        reasoning_tokens=min(seq.reasoning, len(seq.out)),
        finish_reason=reason,
    )
    return web.Response(body=body, content_type="application/json", headers=ctx.headers)


class _Blocks:
    """The stream's content blocks as tokens arrive: thinking first, then text or one tool_use."""

    def __init__(self, seq: Sequence) -> None:
        self.seq = seq
        self.index = -1
        self.kind: str | None = None

    def token(self, i: int) -> list[bytes]:
        seq = self.seq
        kind = "thinking" if i < seq.reasoning else ("tool_use" if seq.tool_call is not None else "text")
        out: list[bytes] = []
        if kind != self.kind:
            out.extend(self.close())
            self.index += 1
            self.kind = kind
            block: wa.OutputBlock
            if kind == "thinking":
                block = wa.ThinkingBlock(thinking="", signature="")
            elif kind == "tool_use" and seq.tool_call is not None:
                block = wa.ToolUseBlock(id=_tool_id(seq), name=seq.tool_call[1], input={})
            else:
                block = wa.TextBlock(text="")
            out.append(wa.event_frame(wa.ContentBlockStartEvent(index=self.index, content_block=block)))
        token = seq.out[i]
        delta: wa.Delta
        if kind == "thinking":
            delta = wa.ThinkingDelta(thinking=token)
        elif kind == "tool_use":
            delta = wa.InputJsonDelta(partial_json=token)
        else:
            delta = wa.TextDelta(text=token)
        out.append(wa.event_frame(wa.ContentBlockDeltaEvent(index=self.index, delta=delta)))
        return out

    def close(self) -> list[bytes]:
        if self.kind is None:
            return []
        out = []
        if self.kind == "thinking":
            sig = wa.SignatureDelta(signature=signature(self.seq.id))
            out.append(wa.event_frame(wa.ContentBlockDeltaEvent(index=self.index, delta=sig)))
        out.append(wa.event_frame(wa.ContentBlockStopEvent(index=self.index)))
        self.kind = None
        return out


def _malformed(frame: bytes) -> bytes:
    """A frame cut inside its JSON, then ended: what a broken upstream sends."""
    head, _, data = frame.partition(b"data: ")
    return head + b"data: " + data[: max(1, len(data) // 2)].rstrip(b"\n") + b"\n\n"


async def _stream(
    h: Handlers, request: web.Request, req: wa.MessagesRequest, seq: Sequence, ctx: Ctx
) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers={**_SSE_HEADERS, **ctx.headers})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    start = wa.MessageResponse(
        id=seq.id,
        model=req.model,
        content=[],
        usage=_usage(seq, 1),
    )
    await resp.write(wa.event_frame(wa.MessageStartEvent(message=start)) + wa.event_frame(wa.PingEvent()))
    f = h.p.faults
    cut = f.disconnect_after_tokens if f.active else None
    bad_at = h.faulty_token_index(seq)
    blocks = _Blocks(seq)
    sent = 0
    first_at = last_at = answer_at = 0.0
    gaps: list[float] = []
    while True:
        end = len(seq.out) if cut is None else min(len(seq.out), cut)
        if end > sent:
            frames: list[bytes] = []
            for i in range(sent, end):
                token_frames = blocks.token(i)
                if bad_at is not None and i == bad_at:
                    token_frames[-1] = _malformed(token_frames[-1])
                    ctx.fault = "malformed"
                frames.extend(token_frames)
            await resp.write(b"".join(frames))
            now = time.perf_counter()
            if sent == 0:
                first_at = now
            else:
                gaps.append(round((now - last_at) * 1000.0, 3))
            if not answer_at and end > seq.reasoning:
                answer_at = now
            gaps.extend([0.0] * (end - sent - 1))
            last_at, sent = now, end
        if cut is not None and sent >= cut:
            ctx.fault = "disconnect"
            h.record(
                ctx,
                200,
                True,
                seq,
                ttft_ms=h.ms(ctx, first_at) if sent else None,
                ttft_answer_ms=h.ms(ctx, answer_at) if answer_at else None,
                output_tokens=sent,
                reasoning_tokens=min(sent, seq.reasoning),
                itl_ms=gaps,
            )
            raise Abort
        if seq.done:
            break
        await seq.wait()
    reason, sequence = _stop(seq, req.stop_sequences)
    closing = blocks.close()
    closing.append(
        wa.event_frame(
            wa.MessageDeltaEvent(
                delta=wa.MessageDelta(stop_reason=reason, stop_sequence=sequence),
                usage=wa.MessageDeltaUsage(output_tokens=len(seq.out)),
            )
        )
    )
    closing.append(wa.event_frame(wa.MessageStopEvent()))
    await resp.write(b"".join(closing))
    await resp.write_eof()
    h.record(
        ctx,
        200,
        True,
        seq,
        queue_ms=round((seq.admitted_at - seq.enqueued_at) * 1000, 3),
        ttft_ms=h.ms(ctx, first_at) if sent else None,
        ttft_answer_ms=h.ms(ctx, answer_at) if answer_at else None,
        e2e_ms=h.ms(ctx, time.perf_counter()),
        output_tokens=len(seq.out),
        reasoning_tokens=min(seq.reasoning, len(seq.out)),
        finish_reason=reason,
        itl_ms=gaps,
    )
    return resp


def count_tokens_handler(h: Handlers) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}`` by the simulator's own estimate."""

    async def count_tokens(request: web.Request) -> web.StreamResponse:
        p = h.p
        if not p.spec.params.anthropic:
            return not_served()
        if p.spec.api_keys and api_key(request) not in p.spec.api_keys:
            return error(wire_errors.authentication_error("invalid x-api-key"))
        try:
            req = wa.decode_count_tokens(await request.read(), strict=p.spec.strict)
        except WireError as exc:
            return error(exc)
        return web.json_response({"input_tokens": estimate_tokens(prompt_text(req))})

    return count_tokens
