"""``POST /v1/responses``: the Responses API's basic text shape, stream and not, on the same engine.

One ``message`` output item with one ``output_text`` part; a stream is ``response.created`` …
``response.output_text.delta`` per token … ``response.completed`` (``response.incomplete`` when
``max_output_tokens`` cut it), and no ``[DONE]``. Faults apply as on chat, except the malformed chunk
(chat and completions only). A function call (``tools`` of ``type: function``) is decided as chat's is
(``tool_call_rate``, ``tool_result_call_rate`` after a ``function_call_output``, ``tool_arguments``) and sent as
one ``function_call`` output item whose arguments stream as ``response.function_call_arguments.delta``.
Thinking is chat only.
"""

from __future__ import annotations

import random
import time
from typing import Any

import msgspec
from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.accuracy import solve, wrong_answer
from tailgate.sim import degrade, shape
from tailgate.sim.engine import Sequence
from tailgate.sim.request import Abort, Ctx, Handlers
from tailgate.sim.text import estimate_tokens
from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError
from tailgate.wire.responses import (
    ResponseRequest,
    delta_event,
    input_text,
    opening_events,
    response_object,
    stream_event,
    text_events,
)
from tailgate.wire.types import ChatCompletionRequest, ChatMessage, decode_request

_json = msgspec.json.Encoder()
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


async def handle(h: Handlers, request: web.Request, ctx: Ctx) -> web.StreamResponse:
    """The request after ``_gate`` (outage, auth, rate limits) let it through."""
    p = h.p
    try:
        req = decode_request("responses", await request.read(), strict=p.spec.strict)
    except WireError as exc:
        h.record(ctx, exc.status, False)
        return error_response(exc, ctx.headers)
    stream = bool(req.stream)
    if p.spec.models and req.model not in p.spec.models:
        h.record(ctx, 404, stream)
        return error_response(wire_errors.model_not_found(req.model), ctx.headers)
    limit = p.spec.params.max_output_tokens
    if req.max_output_tokens is not None and req.max_output_tokens > limit:
        h.record(ctx, 400, stream)
        err = wire_errors.invalid_request(
            f"max_output_tokens is too large: {req.max_output_tokens}. This model supports at most {limit}.",
            param="max_output_tokens",
        )
        return error_response(err, ctx.headers)
    if p.faults.active and (injected := h.injected_error(ctx)) is not None:
        h.record(ctx, injected.status, stream)
        return injected
    seq = _sequence(h, ctx.rid, req)
    if (refused := await h.submit(seq, ctx, stream, h.prompt_blocks(request, input_text(req)))) is not None:
        return refused
    try:
        if stream:
            return await _stream(h, request, req, seq, ctx)
        return await _unary(h, req, seq, ctx)
    finally:
        p.engine.cancel(seq)


def _chat_view(req: ResponseRequest) -> ChatCompletionRequest:
    """The request as chat's tool-call decision reads it: its function tools, its tool_choice, and whether the
    turn answers a tool result (the input ends with a ``function_call_output``)."""
    tools = [
        {"type": "function", "function": {"name": t["name"], "parameters": t.get("parameters") or {}}}
        for t in req.tools or ()
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("name"), str)
    ]
    choice: Any = req.tool_choice
    if isinstance(choice, dict):
        choice = {"type": "function", "function": {"name": choice.get("name")}}
    last = req.input[-1] if isinstance(req.input, list) and req.input else None
    answers = isinstance(last, dict) and last.get("type") == "function_call_output"
    return ChatCompletionRequest(
        model=req.model,
        messages=[ChatMessage(role="tool" if answers else "user", content="")],
        tools=tools or None,
        tool_choice=choice,
    )


def _sequence(h: Handlers, rid: str, req: ResponseRequest) -> Sequence:
    p = h.p
    prompt = input_text(req)
    seed = p.text_seed(None)
    script: list[str] | None = None
    call: tuple[str, str] | None = None
    degraded: str | None = None
    if req.tools and (picked := shape.tool_call(_chat_view(req), p.spec.params, p.rng)) is not None:
        name, arguments = picked
        script = shape.fragments(arguments)
        call = ("call_" + rid.removeprefix("resp_"), name)
    elif (answer := solve(prompt)) is not None:
        if p.rng.random() >= degrade.accuracy(p.faults, p.spec.params.accuracy):
            answer = wrong_answer(answer, p.rng)
            degraded = "canary_wrong"
        words = answer.split(" ")
        script = [words[0], *(" " + w for w in words[1:])]
    cap = p.spec.params.max_tokens_cap
    if req.max_output_tokens is not None and not cap:
        target, reason = req.max_output_tokens, "length"
    elif script is not None:
        target, reason = len(script), "stop"
    else:
        base = p.spec.params.default_output_tokens
        target, reason = max(1, round(base * random.Random(seed).uniform(0.5, 1.5))), "stop"
    if cap and req.max_output_tokens is not None and target > req.max_output_tokens:
        target, reason = req.max_output_tokens, "length"
    seq = Sequence(
        rid,
        prompt_tokens=estimate_tokens(prompt),
        target=target,
        seed=seed,
        script=script,
        length_reason=reason,
        tool_call=call,
    )
    seq.degraded = degraded
    return seq


def _call_item(seq: Sequence, status: str) -> dict[str, Any]:
    assert seq.tool_call is not None
    call_id, name = seq.tool_call
    arguments = "".join(seq.out) if status == "completed" else ""
    item_id = "fc_" + seq.id.removeprefix("resp_")
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def _final(req: ResponseRequest, seq: Sequence, created: int) -> dict[str, Any]:
    incomplete = seq.finish_reason == "length" and req.max_output_tokens is not None
    out = response_object(
        req,
        seq.id,
        created,
        status="incomplete" if incomplete else "completed",
        text="".join(seq.out),
        input_tokens=seq.prompt_tokens,
        cached_tokens=seq.cached_tokens,
        output_tokens=len(seq.out),
        incomplete=incomplete,
    )
    if seq.tool_call is not None:
        out["output"] = [_call_item(seq, "completed")]
    return out


async def _unary(h: Handlers, req: ResponseRequest, seq: Sequence, ctx: Ctx) -> web.StreamResponse:
    while not seq.done:
        await seq.wait()
    body = _json.encode(_final(req, seq, int(ctx.wall)))
    h.record(
        ctx,
        200,
        False,
        queue_ms=round((seq.admitted_at - seq.enqueued_at) * 1000, 3),
        ttft_ms=h.ms(ctx, seq.first_token_at) if seq.out else None,
        ttft_answer_ms=h.ms(ctx, seq.first_token_at) if seq.out else None,
        e2e_ms=h.ms(ctx, time.perf_counter()),
        output_tokens=len(seq.out),
        reasoning_tokens=0,
        seq=seq,
        finish_reason=seq.finish_reason,
    )
    return web.Response(body=body, content_type="application/json", headers=ctx.headers)


async def _stream(
    h: Handlers, request: web.Request, req: ResponseRequest, seq: Sequence, ctx: Ctx
) -> web.StreamResponse:
    created = int(ctx.wall)
    item_id = "msg_" + seq.id.removeprefix("resp_")
    resp = web.StreamResponse(status=200, headers={**_SSE_HEADERS, **ctx.headers})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    call = seq.tool_call is not None
    if call:
        item_id = "fc_" + seq.id.removeprefix("resp_")
        opening = opening_events(req, seq.id, created)[:2]
        opening.append(
            stream_event("response.output_item.added", 2, output_index=0, item=_call_item(seq, "in_progress"))
        )
        await resp.write(b"".join(opening))
    else:
        await resp.write(b"".join(opening_events(req, seq.id, created)))
    number = 3 if call else 4  # sequence_number of the next event
    sent = 0
    first_at = last_at = 0.0
    gaps: list[float] = []
    f = h.p.faults
    cut = f.disconnect_after_tokens if f.active else None
    while True:
        end = len(seq.out) if cut is None else min(len(seq.out), cut)
        if end > sent:
            frames = []
            for token in seq.out[sent:end]:
                if call:
                    kind = "response.function_call_arguments.delta"
                    frames.append(stream_event(kind, number, item_id=item_id, output_index=0, delta=token))
                else:
                    frames.append(delta_event(item_id, number, token))
                number += 1
            await resp.write(b"".join(frames))
            now = time.perf_counter()
            if sent == 0:
                first_at = now
            else:
                gaps.append(round((now - last_at) * 1000.0, 3))
            gaps.extend([0.0] * (end - sent - 1))
            last_at, sent = now, end
        if cut is not None and sent >= cut:
            ctx.fault = "disconnect"
            first = h.ms(ctx, first_at) if sent else None
            h.record(ctx, 200, True, ttft_ms=first, ttft_answer_ms=first, output_tokens=sent, seq=seq)
            raise Abort
        if seq.done:
            break
        await seq.wait()
    final = _final(req, seq, created)
    if call:
        arguments = "".join(seq.out)
        closing = [
            stream_event(
                "response.function_call_arguments.done", number, item_id=item_id, output_index=0, arguments=arguments
            ),
            stream_event("response.output_item.done", number + 1, output_index=0, item=_call_item(seq, "completed")),
        ]
        closing.append(stream_event(f"response.{final['status']}", number + 2, response=final))
    else:
        closing = text_events(item_id, number, "".join(seq.out))
        closing.append(stream_event(f"response.{final['status']}", number + 3, response=final))
    await resp.write(b"".join(closing))
    await resp.write_eof()
    first_ms = h.ms(ctx, first_at) if sent else None
    h.record(
        ctx,
        200,
        True,
        queue_ms=round((seq.admitted_at - seq.enqueued_at) * 1000, 3),
        ttft_ms=first_ms,
        ttft_answer_ms=first_ms,
        e2e_ms=h.ms(ctx, time.perf_counter()),
        output_tokens=len(seq.out),
        reasoning_tokens=0,
        seq=seq,
        finish_reason=seq.finish_reason,
        itl_ms=gaps,
    )
    return resp
