"""The dashboard's HTTP side: the page, its vendored assets and the JSON API behind it (docs/dashboard.md).

Everything here is read-only except the two control endpoints, which need the admin key and a
``Controls`` supplied by the host (the gateway); in monitor-only mode there is none and they answer 404.
Store reads run in a worker thread, one short-lived connection per request, so a slow query never
stalls the host's event loop (the gateway's proxy shares it).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.dashboard.keys_page import add_keys_page
from tailgate.ledger import leaderboard
from tailgate.ledger.leaderboard import SORTS
from tailgate.ledger.schema import open_db
from tailgate.ledger.series import WINDOWS, catalog, compare, heatmap, parse_window, series
from tailgate.ledger.store import StoreConn, db_errors, has_table, is_postgres_url, open_store
from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError

T = TypeVar("T")

STATIC = Path(__file__).parent / "static"
CACHE_ENTRIES = 256

ReadGuard = Callable[[web.Request], WireError | None]
"""May this request read the dashboard's data? None to let it pass, else the error to answer with."""

LiveCallback = Callable[[], Mapping[str, Any]]
"""Returns the host's live provider state (the shape is in docs/dashboard.md); called per request."""


@dataclass(frozen=True)
class Controls:
    """Drain / enable from the dashboard, and who may use them.

    ``is_admin(request)`` checks the request's ``Authorization: Bearer`` against the admin key;
    ``set_drained(provider, drained)`` applies the change and returns a JSON-able result, raising
    ``KeyError`` for an unknown provider. ``enabled`` is False (or a callable answering False) when no
    admin key is configured, so the page can say why its buttons stay off; a callable is asked per request
    (the gateway's admin key may come with a config reload).
    """

    is_admin: Callable[[web.Request], bool]
    set_drained: Callable[[str, bool], Mapping[str, Any]]
    enabled: bool | Callable[[], bool] = True

    def on(self) -> bool:
        """Are the controls usable now?"""
        return self.enabled() if callable(self.enabled) else self.enabled


class _Dashboard:
    def __init__(
        self,
        db_path: Path | str,
        live: LiveCallback | None,
        controls: Controls | None,
        clock: Callable[[], float],
        guard: ReadGuard | None = None,
        guard_required: Callable[[], bool] | None = None,
    ) -> None:
        self.guard = guard
        self.guard_required = guard_required
        self.db_path = db_path
        """A SQLite file, or a ``postgresql://`` URL (the fleet's store: docs/ledger.md)."""
        self.live_cb = live
        self.controls = controls
        self.clock = clock
        self._cache: dict[str, tuple[float, asyncio.Future[Any]]] = {}

    # -- plumbing ---------------------------------------------------------------------------

    def _read(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn`` on a fresh connection; a store that does not exist yet reads as an empty one."""
        # Without a file: an empty in-memory database (no tables, every view empty), and nothing created.
        target = self.db_path
        if isinstance(target, str):
            conn: Any = open_store(target)
        else:
            conn = StoreConn(open_db(target), "sqlite") if target.exists() else sqlite3.connect(":memory:")
        with contextlib.closing(conn):
            return fn(conn)

    async def _query(self, fn: Callable[[Any], T]) -> T:
        return await asyncio.to_thread(self._read, fn)

    async def _cached(self, request: web.Request, window_s: float, fn: Callable[[Any], T]) -> T:
        """``_query`` shared by identical requests for a while: ``window_s / 4000`` seconds, 5 s to 2 min.

        A week of a busy store takes seconds of Python to aggregate, in a thread that shares the GIL with the
        host's event loop (the gateway's proxy); every open tab refreshing every 30 s must not multiply that.
        Requests that pin ``now`` are never cached. Concurrent identical requests wait for one computation.
        """
        if "now" in request.query:
            return await self._query(fn)
        key, mono = request.path_qs, time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > mono:
            result: T = await asyncio.shield(hit[1])
            return result
        if len(self._cache) >= CACHE_ENTRIES:
            for k in [k for k, (expires, _) in self._cache.items() if expires <= mono] or list(self._cache):
                del self._cache[k]
        future: asyncio.Future[T] = asyncio.ensure_future(self._query(fn))
        self._cache[key] = (mono + min(120.0, max(5.0, window_s / 4000.0)), future)

        def forget_failure(done: asyncio.Future[T]) -> None:
            # An error is not cached. Reading it here also keeps a computation whose caller went away (a
            # closed tab) from logging "exception was never retrieved".
            if (done.cancelled() or done.exception() is not None) and self._cache.get(key, (0.0, None))[1] is done:
                del self._cache[key]

        future.add_done_callback(forget_failure)
        return await asyncio.shield(future)

    def _now(self, request: web.Request) -> float:
        raw = request.query.get("now")
        if not raw:
            return self.clock()
        try:
            now = float(raw)
        except ValueError:
            now = math.nan
        if not math.isfinite(now):
            raise wire_errors.invalid_request(f"now must be Unix seconds, got {raw!r}", param="now")
        return now

    @staticmethod
    def _window(request: web.Request, default: str) -> tuple[str, float]:
        raw = request.query.get("window") or default
        try:
            return raw, parse_window(raw)
        except ValueError as exc:
            raise wire_errors.invalid_request(str(exc), param="window") from None

    @staticmethod
    def _opt(request: web.Request, name: str) -> str | None:
        return request.query.get(name) or None

    # -- pages ------------------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def slash(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPPermanentRedirect("../dashboard")  # relative: works behind a proxy's path prefix

    # -- JSON API ---------------------------------------------------------------------------

    async def meta(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "mode": "gateway" if self.live_cb is not None else "monitor",
                "live": self.live_cb is not None,
                "controls": self.controls is not None and self.controls.on(),
                "auth_required": self.auth_required(),
                "windows": list(WINDOWS),
                "now": self.clock(),
            }
        )

    async def catalog(self, request: web.Request) -> web.Response:
        _, window_s = self._window(request, "7d")
        now = self._now(request)
        return web.json_response(
            await self._cached(request, window_s, lambda c: catalog(c, window_s=window_s, now=now))
        )

    async def leaderboard(self, request: web.Request) -> web.Response:
        window, window_s = self._window(request, "7d")
        now = self._now(request)
        model, sort = self._opt(request, "model"), request.query.get("sort") or "p90"
        if sort not in SORTS:
            raise wire_errors.invalid_request(f"sort must be one of {', '.join(SORTS)}, got {sort!r}", param="sort")

        def rows(conn: Any) -> list[dict[str, Any]]:
            if not _has_table(conn, "samples"):  # a store the monitor has not migrated yet: no rows
                return []
            return [r.to_dict() for r in leaderboard.compute(conn, window_s=window_s, now=now, model=model, sort=sort)]

        found = await self._cached(request, window_s, rows)
        return web.json_response(
            {"window": window, "window_s": window_s, "now": now, "model": model, "sort": sort, "rows": found}
        )

    async def series(self, request: web.Request) -> web.Response:
        provider = self._opt(request, "provider")
        if provider is None:
            raise wire_errors.invalid_request("provider is required", param="provider")
        window = request.query.get("window") or "1h"
        if window not in WINDOWS:
            raise wire_errors.invalid_request(f"window must be one of {', '.join(WINDOWS)}", param="window")
        model, workload = self._opt(request, "model"), self._opt(request, "workload")
        now = self._now(request)
        try:
            body = await self._cached(
                request,
                WINDOWS[window][0],
                lambda c: series(c, provider=provider, model=model, window=window, now=now, workload=workload),
            )
        except ValueError as exc:
            raise wire_errors.invalid_request(str(exc), param="workload") from None
        return web.json_response(body)

    async def heatmap(self, request: web.Request) -> web.Response:
        _, window_s = self._window(request, "7d")
        now = self._now(request)
        model, workload = self._opt(request, "model"), self._opt(request, "workload")
        raw_tz = request.query.get("tz") or "0"
        try:
            tz = int(raw_tz)
        except ValueError:
            raise wire_errors.invalid_request(f"tz must be minutes east of UTC, got {raw_tz!r}", param="tz") from None
        if not -14 * 60 <= tz <= 14 * 60:
            raise wire_errors.invalid_request("tz must be within ±840 minutes", param="tz")
        try:
            body = await self._cached(
                request,
                window_s,
                lambda c: heatmap(c, window_s=window_s, now=now, model=model, tz_offset_min=tz, workload=workload),
            )
        except ValueError as exc:
            raise wire_errors.invalid_request(str(exc), param="workload") from None
        return web.json_response(body)

    async def compare(self, request: web.Request) -> web.Response:
        _, window_s = self._window(request, "24h")
        now = self._now(request)
        model = self._opt(request, "model")
        return web.json_response(
            await self._cached(request, window_s, lambda c: compare(c, window_s=window_s, now=now, model=model))
        )

    async def live(self, request: web.Request) -> web.Response:
        if self.live_cb is None:
            return error_response(wire_errors.not_found("No live state here: the dashboard runs without a gateway."))
        return web.json_response(live_view(self.live_cb()))

    def auth_required(self) -> bool:
        """Does reading the data need a key now (the host decides per request; without a host's say: a guard)?"""
        return self.guard_required() if self.guard_required is not None else self.guard is not None

    def may_manage(self, request: web.Request) -> bool:
        """Does this request carry the key that works the controls (the admin key, with controls on)?"""
        return self.controls is not None and self.controls.on() and self.controls.is_admin(request)

    async def auth(self, request: web.Request) -> web.Response:
        """What the caller may do: ``read`` the data (else the read guard's 401) and use the ``admin`` controls."""
        if self.guard is not None and (denied := self.guard(request)) is not None:
            return error_response(denied)
        return web.json_response({"admin": self.may_manage(request), "read": True})

    def _guard(self, request: web.Request) -> web.Response | None:
        if self.controls is None:
            return error_response(wire_errors.not_found("No controls here: the dashboard runs without a gateway."))
        if not self.controls.on():
            return error_response(
                WireError(403, "Controls are off: set admin_key in the config.", type="request_forbidden")
            )
        if not self.controls.is_admin(request):
            return error_response(
                WireError(
                    401,
                    "Controls need the admin key (Authorization: Bearer <admin key>).",
                    code="invalid_api_key",
                )
            )
        return None

    async def _set(self, request: web.Request, drained: bool) -> web.Response:
        if (denied := self._guard(request)) is not None:
            return denied
        assert self.controls is not None  # _guard returned None
        name = request.match_info["name"]
        try:
            result = self.controls.set_drained(name, drained)
        except KeyError:
            return error_response(wire_errors.not_found(f"No provider named {name!r}."))
        return web.json_response(dict(result))

    async def drain(self, request: web.Request) -> web.Response:
        return await self._set(request, True)

    async def enable(self, request: web.Request) -> web.Response:
        return await self._set(request, False)


def _has_table(conn: Any, name: str) -> bool:
    return has_table(conn, name)


def live_view(state: Mapping[str, Any]) -> dict[str, Any]:
    """The host's live state plus ``cutovers``: every provider's recent breaker transitions and drain
    changes, newest first, with ``ago_s`` computed against the state's own ``clock`` (monotonic)."""
    out = dict(state)
    clock = state.get("clock")
    cutovers = []
    for p in state.get("providers", []):
        breaker = p.get("breaker") or {}
        for t in breaker.get("transitions", []):
            at = t.get("time")
            ago = round(clock - at, 3) if isinstance(clock, int | float) and isinstance(at, int | float) else None
            cutovers.append(
                {
                    "provider": p.get("name"),
                    "from": t.get("from"),
                    "to": t.get("to"),
                    "reason": t.get("reason"),
                    "ago_s": ago,
                }
            )
    cutovers.sort(key=lambda c: (c["ago_s"] is None, c["ago_s"] or 0.0))
    out["cutovers"] = cutovers[:20]
    return out


async def _wire_errors(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
    """Render a ``WireError`` raised by a dashboard handler; a broken store answers 503, not a traceback."""
    try:
        response: web.StreamResponse = await handler(request)
    except WireError as err:
        return error_response(err)
    except db_errors() as exc:
        return error_response(WireError(503, f"The store cannot be read: {exc}", type="server_error"))
    return response


def mount(
    app: web.Application,
    db_path: str | Path,
    *,
    live: LiveCallback | None = None,
    controls: Controls | None = None,
    clock: Callable[[], float] = time.time,
    guard: ReadGuard | None = None,
    guard_required: Callable[[], bool] | None = None,
    currency: Callable[[], str | None] | None = None,
) -> None:
    """Add ``/dashboard``, ``/dashboard/static/*`` and ``/dashboard/api/*`` to ``app``.

    ``db_path`` is the tailgate store (read-only here; a missing file reads as empty and is not created).
    ``live`` gives the gateway's live state for ``/dashboard/api/live`` (404 without it: monitor-only
    mode); ``controls`` enables ``POST /dashboard/api/providers/{name}/drain|enable`` for admin-key
    holders. ``clock`` is wall-clock Unix seconds (tests pin it). ``guard``, when given, must pass every
    API request but ``meta`` (the page shell and its static assets hold no data and stay public, so a
    browser can load them and ask for a key); it is asked on every request, so the host decides with the
    keys in force then. ``guard_required`` tells ``meta`` whether the guard asks for a key now. ``currency``
    names the currency of the costs the Keys & spend page shows (the host's providers' price currency).
    """
    target = db_path if is_postgres_url(db_path) else Path(db_path).expanduser()
    dash = _Dashboard(target, live, controls, clock, guard, guard_required)

    def wrap(handler: Callable[[web.Request], Any], *, public: bool = False) -> Callable[[web.Request], Any]:
        async def run(request: web.Request) -> web.StreamResponse:
            if guard is not None and not public and handler != dash.auth and (denied := guard(request)) is not None:
                return error_response(denied)
            return await _wire_errors(request, handler)

        return run

    r = app.router
    r.add_get("/dashboard", dash.page)
    r.add_get("/dashboard/", dash.slash)
    r.add_static("/dashboard/static", STATIC, append_version=False)
    for path, handler in (
        ("meta", dash.meta),
        ("catalog", dash.catalog),
        ("leaderboard", dash.leaderboard),
        ("series", dash.series),
        ("heatmap", dash.heatmap),
        ("compare", dash.compare),
        ("live", dash.live),
        ("auth", dash.auth),
    ):
        r.add_get(f"/dashboard/api/{path}", wrap(handler, public=path == "meta"))
    add_keys_page(app, dash._query, wrap, may_manage=dash.may_manage, currency=currency)
    r.add_post("/dashboard/api/providers/{name}/drain", wrap(dash.drain))
    r.add_post("/dashboard/api/providers/{name}/enable", wrap(dash.enable))
