"""``/sim/*``: run-time fault control, ground truth and live engine state of a simulated provider.

``GET /sim/faults`` shows the active set, ``POST`` merges the JSON object it is given (fields of
:class:`~tailgate.sim.faults.Faults`; unknown or invalid fields are a 400 naming the field), ``DELETE``
clears every fault. ``GET /sim/truth[?limit=N]`` returns recent requests as the simulator timed them;
``DELETE /sim/truth`` forgets them. ``GET /sim/state`` shows slots, queue, steps, step lateness and the
requests the ``hold`` fault holds; ``DELETE /sim/state`` resets the lateness histogram and the step/token
counters (discard a warm-up).
``DELETE /sim/cache`` empties the provider's prefix cache (a cold start without a restart).
``GET /sim/headers`` lists the headers of the last :data:`HEADERS_KEPT` ``/v1`` requests as received (what a
gateway forwarded), ``DELETE /sim/headers`` forgets them.
"""

from __future__ import annotations

from collections import deque

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import ValidationError

from tailgate._aiohttp import error_response
from tailgate.config.loader import format_path
from tailgate.sim.faults import Faults
from tailgate.sim.request import Model
from tailgate.wire import errors as wire_errors
from tailgate.wire import parse_json
from tailgate.wire.errors import WireError

HEADERS_KEPT = 256
"""Requests whose headers ``/sim/headers`` keeps (the oldest go first)."""


def _faults_json(faults: Faults) -> web.Response:
    return web.json_response({"faults": faults.model_dump(), "active": faults.active})


def _bad(message: str, param: str | None = None) -> web.Response:
    err = wire_errors.invalid_request(message, param=param)
    return web.Response(status=400, body=err.body(), content_type="application/json")


def add_control_routes(app: web.Application, provider: Model, *, prefix: str) -> None:
    """Mount the control endpoints of ``provider`` under ``prefix`` (``/sim`` or ``/sim/<name>``)."""

    async def get_faults(_request: web.Request) -> web.Response:
        return _faults_json(provider.faults)

    async def post_faults(request: web.Request) -> web.Response:
        try:
            data = parse_json(await request.read())
        except WireError as err:
            return error_response(err)
        if not isinstance(data, dict):
            return _bad('Expected a JSON object of fault fields, e.g. {"error_rate": 0.1}.')
        try:
            update = Faults.model_validate(data)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = format_path(tuple(first["loc"]))
            message = "unknown fault field" if first["type"] == "extra_forbidden" else first["msg"]
            return _bad(f"{where}: {message}", param=where)
        return _faults_json(provider.set_faults(update))

    async def delete_faults(_request: web.Request) -> web.Response:
        return _faults_json(provider.clear_faults())

    async def get_truth(request: web.Request) -> web.Response:
        raw = request.query.get("limit")
        limit = None
        if raw is not None:
            if not raw.isdigit():
                return _bad(f"limit must be a non-negative integer, got {raw!r}", param="limit")
            limit = int(raw)
        return web.Response(body=provider.truth.as_json(limit), content_type="application/json")

    async def delete_truth(_request: web.Request) -> web.Response:
        provider.truth.clear()
        return web.json_response({"cleared": True})

    async def get_state(_request: web.Request) -> web.Response:
        return web.json_response(
            {
                "provider": provider.name,
                "preset": provider.spec.preset,
                "url": provider.url,
                "time_scale": provider.spec.time_scale,
                "engine": provider.engine.snapshot(),
                "prefix_cache": cache.snapshot() if (cache := provider.prefix_cache) is not None else None,
                "faults": provider.faults.model_dump(exclude_defaults=True),
                "requests": provider.truth.total,
                "held": provider.held,
                "batches": provider.batches.snapshot() if provider.batches is not None else None,
            }
        )

    async def delete_state(_request: web.Request) -> web.Response:
        provider.engine.reset_stats()
        return web.json_response({"reset": True, "engine": provider.engine.snapshot()})

    async def delete_cache(_request: web.Request) -> web.Response:
        cache = provider.prefix_cache
        if cache is not None:
            cache.clear()
        return web.json_response({"cleared": cache is not None})

    seen: deque[list[list[str]]] = deque(maxlen=HEADERS_KEPT)

    @web.middleware
    async def record_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/v1/"):
            seen.append([[name, value] for name, value in request.headers.items()])
        return await handler(request)

    async def get_headers(_request: web.Request) -> web.Response:
        return web.json_response({"requests": [{"headers": h} for h in seen]})  # bad bytes as \udcXX escapes

    async def delete_headers(_request: web.Request) -> web.Response:
        seen.clear()
        return web.json_response({"cleared": True})

    app.middlewares.append(record_headers)
    app.router.add_get(f"{prefix}/headers", get_headers)
    app.router.add_delete(f"{prefix}/headers", delete_headers)
    app.router.add_get(f"{prefix}/faults", get_faults)
    app.router.add_post(f"{prefix}/faults", post_faults)
    app.router.add_delete(f"{prefix}/faults", delete_faults)
    app.router.add_get(f"{prefix}/truth", get_truth)
    app.router.add_delete(f"{prefix}/truth", delete_truth)
    app.router.add_get(f"{prefix}/state", get_state)
    app.router.add_delete(f"{prefix}/state", delete_state)
    app.router.add_delete(f"{prefix}/cache", delete_cache)
