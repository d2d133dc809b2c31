"""The dashboard's Keys & spend page (``/dashboard/keys``) and its read-only JSON (docs/keys.md).

``GET /dashboard/api/keys``: every key's state, limits and spend today and this month (never a secret or
its digest); ``GET /dashboard/api/usage?by=key|alias|provider|day|lane&since=7d``: the usage report of
``tailgate usage``; ``GET /dashboard/api/batches?limit=50``: the newest batches of every key, each with its
status, counts, cost so far and its lines' lanes and price tiers (docs/batch.md). Each reads whichever store the
host uses, the fleet's PostgreSQL included. Creating, changing and revoking go to the gateway's ``/admin/keys``
with the admin key the page asks for.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from tailgate.config.units import parse_duration
from tailgate.ledger.batch_lines import batch_summaries
from tailgate.ledger.keys import keys_with_spend
from tailgate.ledger.store import StoreConn, has_table
from tailgate.ledger.usage import DIMENSIONS, usage
from tailgate.wire import errors as wire_errors

__all__ = ["add_keys_page"]

STATIC = Path(__file__).parent / "static"

Query = Callable[[Callable[[Any], Any]], Awaitable[Any]]


def _keys(conn: Any, now: float) -> list[dict[str, Any]]:
    if not isinstance(conn, StoreConn) or not has_table(conn, "keys"):
        return []  # no store yet, or one from before keys existed
    return keys_with_spend(conn, now)


def _usage(conn: Any, since: float, by: Any) -> list[dict[str, Any]]:
    if not isinstance(conn, StoreConn) or not has_table(conn, "usage_hourly"):
        return []
    return usage(conn, since=since, by=by)


def _batches(conn: Any, limit: int) -> list[dict[str, Any]]:
    if not isinstance(conn, StoreConn) or not has_table(conn, "batches"):
        return []  # no store yet, or one from before the batch lane
    return batch_summaries(conn, limit=limit)


def add_keys_page(
    app: web.Application,
    query: Query,
    wrap: Callable[[Callable[[web.Request], Any]], Callable[[web.Request], Any]],
    *,
    may_manage: Callable[[web.Request], bool],
    currency: Callable[[], str | None] | None = None,
) -> None:
    async def page(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "keys.html", headers={"Cache-Control": "no-cache"})

    async def keys(request: web.Request) -> web.Response:
        now = time.time()
        found = await query(lambda c: _keys(c, now))
        # What this caller may do (not what is configured): it read the keys; ``admin``: it holds the admin
        # key, so the page offers create and revoke.
        body = {"now": now, "admin": may_manage(request), "read": True, "keys": found}
        body["currency"] = currency() if currency is not None else None  # the providers' price currency
        return web.json_response(body)

    async def usage_report(request: web.Request) -> web.Response:
        by = request.query.get("by") or "key"
        if by not in DIMENSIONS:
            raise wire_errors.invalid_request(f"by must be one of {', '.join(DIMENSIONS)}, got {by!r}", param="by")
        text = request.query.get("since") or "7d"
        try:
            since_s = float(parse_duration(text))
        except ValueError as exc:
            raise wire_errors.invalid_request(str(exc), param="since") from None
        now = time.time()
        groups = await query(lambda c: _usage(c, now - since_s, by))
        cur = currency() if currency is not None else None
        return web.json_response({"by": by, "since": text, "now": now, "currency": cur, "groups": groups})

    async def batches(request: web.Request) -> web.Response:
        raw = request.query.get("limit") or "50"
        if not raw.isdigit() or not 1 <= int(raw) <= 500:
            raise wire_errors.invalid_request(f"limit must be 1 … 500, got {raw[:20]!r}", param="limit")
        found = await query(lambda c: _batches(c, int(raw)))
        cur = currency() if currency is not None else None
        return web.json_response({"now": time.time(), "currency": cur, "batches": found})

    app.router.add_get("/dashboard/keys", page)
    app.router.add_get("/dashboard/api/batches", wrap(batches))
    app.router.add_get("/dashboard/api/keys", wrap(keys))
    app.router.add_get("/dashboard/api/usage", wrap(usage_report))
