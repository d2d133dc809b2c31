"""``POST /v1/embeddings``: deterministic unit vectors (same text, same vector), OpenAI's shape."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import math
import random
import time
from array import array
from typing import Any

import msgspec
from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.sim.request import Abort, Ctx, Handlers
from tailgate.sim.text import estimate_tokens
from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError
from tailgate.wire.types import decode_request

_json = msgspec.json.Encoder()
MAX_DIMENSIONS = 8192
"""Embedding sizes beyond this are refused (a 400), as real providers do: the vector is built in memory."""


async def handle(h: Handlers, request: web.Request, ctx: Ctx) -> web.StreamResponse:
    try:
        if (early := await h.gate(request, ctx)) is not None:
            h.record(ctx, early.status, False)
            return early
    except Abort:
        h.record(ctx, 0, False)
        if request.transport is not None:
            request.transport.abort()
        raise web.HTTPServiceUnavailable() from None
    p = h.p
    try:
        req = decode_request("embeddings", await request.read(), strict=p.spec.strict)
    except WireError as exc:
        h.record(ctx, exc.status, False)
        return error_response(exc, ctx.headers)
    if p.spec.models and req.model not in p.spec.models:
        h.record(ctx, 404, False)
        return error_response(wire_errors.model_not_found(req.model), ctx.headers)
    if p.faults.active and (injected := h.injected_error(ctx)) is not None:
        h.record(ctx, injected.status, False)
        return injected
    inputs: list[Any] = [req.input] if isinstance(req.input, str) else list(req.input)
    if inputs and all(isinstance(x, int) for x in inputs):
        inputs = [inputs]  # one token list
    if req.dimensions is not None and req.dimensions > MAX_DIMENSIONS:
        h.record(ctx, 400, False)
        err = wire_errors.invalid_request(
            f"{req.dimensions} is greater than the maximum of {MAX_DIMENSIONS} - 'dimensions'", param="dimensions"
        )
        return error_response(err, ctx.headers)
    dims = req.dimensions or 256
    delay = p.spec.params.embed_ms / 1000.0 * p.spec.time_scale * p.multiplier(ctx.t0)
    if delay > 0:
        await asyncio.sleep(delay)
    prompt_tokens = sum(estimate_tokens(x) if isinstance(x, str) else len(x) for x in inputs)
    data = []
    for i, item in enumerate(inputs):
        vector = _embedding(p.spec.seed, str(item), dims)
        emb: Any = (
            base64.b64encode(array("f", vector).tobytes()).decode() if req.encoding_format == "base64" else vector
        )
        data.append({"object": "embedding", "index": i, "embedding": emb})
    h.record(
        ctx,
        200,
        False,
        e2e_ms=h.ms(ctx, time.perf_counter()),
        prompt_tokens=prompt_tokens,
    )
    body = _json.encode(
        {
            "object": "list",
            "data": data,
            "model": req.model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }
    )
    return web.Response(body=body, content_type="application/json", headers=ctx.headers)


def _embedding(seed: int, text: str, dims: int) -> list[float]:
    """A deterministic unit vector for ``text`` (same text, same vector)."""
    digest = hashlib.blake2b(f"{seed}:{text}".encode(), digest_size=8).digest()
    rng = random.Random(int.from_bytes(digest, "little"))
    vec = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]
