"""One batch line, answered: the simulated provider's own request checks and answer shapes, decoded at once.

A line is checked as its endpoint checks a live request (the body, the model, ``max_tokens``) and answered with
the body a live non-stream request would get, so a client reads the same objects either way. It is decoded on
the batch's own engine (:meth:`~tailgate.sim.engine.Engine.decode_now`): a real provider runs batch work on
capacity apart from its live traffic, so a line takes no live slot, no place in the queue and no rate-limit
token, and its time is the batch's turnaround, not the engine's steps. Nothing here touches the prefix cache
(a batch line reports no cached tokens).
"""

from __future__ import annotations

import base64
import time
from array import array
from dataclasses import dataclass
from typing import Any

import msgspec

from tailgate.sim import responses as sim_responses
from tailgate.sim.bodies import chat_prompt, unary_object
from tailgate.sim.embeddings import MAX_DIMENSIONS, _embedding
from tailgate.sim.engine import Engine, Sequence
from tailgate.sim.request import Handlers
from tailgate.sim.text import estimate_tokens
from tailgate.sim.truth import TruthRecord
from tailgate.wire import errors as wire_errors
from tailgate.wire.batch import BatchRequestInput
from tailgate.wire.errors import WireError
from tailgate.wire.types import ChatCompletionRequest, decode_request

__all__ = ["LineAnswer", "answer_line"]

_KIND = {
    "/v1/chat/completions": ("chat", "chatcmpl-"),
    "/v1/completions": ("completions", "cmpl-"),
    "/v1/responses": ("responses", "resp_"),
    "/v1/embeddings": ("embeddings", "emb-"),
}
_json = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class LineAnswer:
    """The HTTP answer one line got, and what the provider bills for it."""

    status: int
    body: Any
    request_id: str
    """The truth row's id (the body's ``id`` when it has one)."""
    prompt_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost: float = 0.0


def answer_line(h: Handlers, engine: Engine, batch_id: str, line: BatchRequestInput, fail: bool) -> LineAnswer:
    """Answer ``line`` of ``batch_id`` and record its truth row; ``fail`` answers it with a 500 instead."""
    p = h.p
    kind, prefix = _KIND[line.url]
    rid = prefix + p.new_id()
    wall = time.time()
    t0 = time.perf_counter()
    try:
        answer = _answer(h, engine, kind, rid, line.body, int(wall), fail)
    except WireError as err:
        answer = LineAnswer(err.status, err.to_dict(), rid)
    params = p.spec.params
    cost = 0.0
    if answer.status == 200:
        live = answer.prompt_tokens * params.price_input + answer.output_tokens * params.price_output
        cost = round(live / 1e6 * params.batch_price_ratio, 12)
    p.truth.add(
        TruthRecord(
            id=rid,
            received_at=wall,
            status=answer.status,
            stream=False,
            e2e_ms=round((time.perf_counter() - t0) * 1000.0, 3),
            output_tokens=answer.output_tokens if answer.status == 200 else None,
            reasoning_tokens=answer.reasoning_tokens if answer.status == 200 else None,
            prompt_tokens=answer.prompt_tokens if answer.status == 200 else None,
            fault="batch_fail_rate" if fail else None,
            batch_id=batch_id,
            custom_id=line.custom_id,
            cost=cost,
        )
    )
    return LineAnswer(
        answer.status,
        answer.body,
        rid,
        answer.prompt_tokens,
        answer.output_tokens,
        answer.reasoning_tokens,
        cost,
    )


def _answer(
    h: Handlers, engine: Engine, kind: str, rid: str, body: dict[str, Any], created: int, fail: bool
) -> LineAnswer:
    """The line checked as its endpoint checks a live request, then (as ``error_rate`` does live) the injected
    failure, then the answer."""
    p = h.p
    raw = _json.encode({k: v for k, v in body.items() if k not in ("stream", "stream_options")})
    if kind == "embeddings":
        return _embeddings(h, rid, raw, fail)
    if kind == "responses":
        rreq = decode_request("responses", raw, strict=p.spec.strict)
        _check_model(h, rreq.model)
        limit = p.spec.params.max_output_tokens
        if rreq.max_output_tokens is not None and rreq.max_output_tokens > limit:
            raise wire_errors.invalid_request(
                f"max_output_tokens is too large: {rreq.max_output_tokens}. This model supports at most {limit}.",
                param="max_output_tokens",
            )
        _injected(fail)
        seq = sim_responses._sequence(h, rid, rreq)
        engine.decode_now(seq)
        return _done(rid, sim_responses._final(rreq, seq, created), seq)
    req = (
        decode_request("chat", raw, strict=p.spec.strict)
        if kind == "chat"
        else decode_request("completions", raw, strict=p.spec.strict)
    )
    _check_model(h, req.model)
    if req.n is not None and req.n > 1:
        raise wire_errors.invalid_request("n > 1 is not supported by this provider.", param="n")
    if isinstance(req, ChatCompletionRequest):
        max_tokens = req.max_completion_tokens or req.max_tokens
        prompt_text = chat_prompt(req)
    else:
        max_tokens = req.max_tokens
        prompt_text = req.prompt if isinstance(req.prompt, str) else " ".join(map(str, req.prompt))
    limit = p.spec.params.max_output_tokens
    if max_tokens is not None and max_tokens > limit:
        raise wire_errors.invalid_request(
            f"max_tokens is too large: {max_tokens}. This model supports at most {limit} completion tokens.",
            param="max_tokens",
        )
    _injected(fail)
    stop = [req.stop] if isinstance(req.stop, str) else req.stop
    seq = h.sequence(rid, prompt_text, max_tokens, p.text_seed(req.seed), stop, req)
    engine.decode_now(seq)
    return _done(rid, unary_object(p.spec.params, req, kind, seq, created), seq)


def _done(rid: str, body: dict[str, Any], seq: Sequence) -> LineAnswer:
    return LineAnswer(
        200,
        msgspec.to_builtins(body),
        rid,
        prompt_tokens=seq.prompt_tokens,
        output_tokens=len(seq.out),
        reasoning_tokens=min(seq.reasoning, len(seq.out)),
    )


def _injected(fail: bool) -> None:
    if fail:
        raise WireError(500, "Simulated batch line failure (batch_fail_rate).", type="server_error")


def _check_model(h: Handlers, model: str) -> None:
    models = h.p.spec.models
    if models and model not in models:
        raise wire_errors.model_not_found(model)


def _embeddings(h: Handlers, rid: str, raw: bytes, fail: bool) -> LineAnswer:
    p = h.p
    req = decode_request("embeddings", raw, strict=p.spec.strict)
    _check_model(h, req.model)
    if req.dimensions is not None and req.dimensions > MAX_DIMENSIONS:
        raise wire_errors.invalid_request(
            f"{req.dimensions} is greater than the maximum of {MAX_DIMENSIONS} - 'dimensions'", param="dimensions"
        )
    _injected(fail)
    inputs: list[Any] = [req.input] if isinstance(req.input, str) else list(req.input)
    if inputs and all(isinstance(x, int) for x in inputs):
        inputs = [inputs]
    dims = req.dimensions or 256
    prompt_tokens = sum(estimate_tokens(x) if isinstance(x, str) else len(x) for x in inputs)
    data = []
    for i, item in enumerate(inputs):
        vector = _embedding(p.spec.seed, str(item), dims)
        emb: Any = (
            base64.b64encode(array("f", vector).tobytes()).decode() if req.encoding_format == "base64" else vector
        )
        data.append({"object": "embedding", "index": i, "embedding": emb})
    body = {
        "object": "list",
        "data": data,
        "model": req.model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
    return LineAnswer(200, body, rid, prompt_tokens=prompt_tokens)
