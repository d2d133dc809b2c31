"""``/admin/keys``: runtime keys over HTTP (admin key required; docs/keys.md).

``GET /admin/keys`` lists every key (never a secret or its digest) with today's and this month's spend;
``POST /admin/keys`` creates one and returns its secret **once** (``{"key": "sk-…", …}``, 201);
``PATCH /admin/keys/{id}`` changes limits, models, class, expiry or metadata (``null`` clears a limit);
``DELETE /admin/keys/{id}`` (or ``POST /admin/keys/{id}/revoke``) revokes it. A change is written to the
store, bumps the fleet's ``keys`` generation and reloads this replica's keys before the answer, so
every replica refuses a revoked key within about half a second.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.config.units import parse_duration
from tailgate.ledger.keys import KeyRecord, KeyStoreError, create_key, keys_with_spend, revoke_key, update_key
from tailgate.ledger.store import StoreConn, StoreError, open_store
from tailgate.wire.errors import WireError

if TYPE_CHECKING:
    from tailgate.gateway.access.auth import AccessGuard
    from tailgate.gateway.access.key_directory import KeyDirectory
    from tailgate.gateway.request_path.core import InForce
    from tailgate.state import SharedState

__all__ = ["add_key_routes", "fields_from_json"]


def fields_from_json(body: dict[str, Any], now: float) -> dict[str, Any]:
    """Key fields from a JSON body; ``expires`` may be a duration from now (``"30d"``) instead of ``expires_at``."""
    out = {k: v for k, v in body.items() if k not in ("id", "expires")}
    if "expires" in body:
        value = body["expires"]
        out["expires_at"] = None if value is None else now + float(parse_duration(value))
    return out


def _known_models(fields: dict[str, Any], aliases: Collection[str]) -> None:
    """A key may list only aliases this gateway serves: a typo would make a key that can call nothing."""
    unknown = [m for m in fields.get("models") or () if m not in aliases]
    if unknown:
        known = ", ".join(sorted(aliases))
        raise WireError(
            400,
            f"'models': no alias {', '.join(map(repr, unknown))} in the config (known: {known}).",
            type="invalid_request_error",
        )


def add_key_routes(
    app: web.Application, keys: KeyDirectory, in_force: InForce, state: SharedState, *, access: AccessGuard
) -> None:
    """The routes above over the key directory, the route table in force (a key's ``models`` must name its
    aliases), the access guard and the fleet's ``state`` (its ``keys`` generation tells the other replicas to
    reload)."""
    target = keys.target

    def guard(request: web.Request) -> web.Response | None:
        refusal = access.check(request, "admin")  # the one access decision (auth.py)
        return error_response(refusal) if refusal is not None else None

    async def in_store(fn: Callable[[StoreConn], Any]) -> Any:
        if target is None:
            raise WireError(409, "Runtime keys need a store: enable the ledger or set ledger.url.", type="conflict")

        def run() -> Any:
            with open_store(target) as conn:
                return fn(conn)

        try:
            return await asyncio.to_thread(run)
        except KeyStoreError as exc:
            status = 404 if str(exc).startswith("no key") else 409 if "already exists" in str(exc) else 400
            raise WireError(status, str(exc), type="invalid_request_error") from None
        except StoreError as exc:
            raise WireError(503, str(exc), type="server_error") from None

    async def changed() -> None:
        await state.bump("keys")
        await keys.reload()

    async def body_of(request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise WireError(400, "The body must be a JSON object.", type="invalid_request_error") from None
        if not isinstance(body, dict):
            raise WireError(400, "The body must be a JSON object.", type="invalid_request_error")
        return body

    def wrap(handler: Callable[[web.Request], Awaitable[web.Response]]) -> Callable[[web.Request], Any]:
        async def run(request: web.Request) -> web.Response:
            if (denied := guard(request)) is not None:
                return denied
            try:
                return await handler(request)
            except WireError as err:
                return error_response(err)
            except ValueError as exc:  # a bad duration
                return error_response(WireError(400, str(exc), type="invalid_request_error"))

        return run

    async def list_all(request: web.Request) -> web.Response:
        now = time.time()
        keys = await in_store(lambda c: keys_with_spend(c, now))
        return web.json_response({"keys": keys})

    async def create(request: web.Request) -> web.Response:
        body = await body_of(request)
        key_id = body.get("id")
        if not isinstance(key_id, str):
            raise WireError(400, "'id' (the key's name, e.g. team-a) is required.", type="invalid_request_error")
        now = time.time()
        fields = fields_from_json(body, now)
        _known_models(fields, in_force.routes.aliases)  # the table in force now
        rec, secret = await in_store(lambda c: create_key(c, key_id, now=now, **fields))
        await changed()
        return web.json_response({"key": secret, **rec.public(now)}, status=201)

    async def update(request: web.Request) -> web.Response:
        body = await body_of(request)
        now = time.time()
        fields = fields_from_json(body, now)
        _known_models(fields, in_force.routes.aliases)  # the table in force now
        key_id = request.match_info["id"]
        rec: KeyRecord = await in_store(lambda c: update_key(c, key_id, now=now, **fields))
        await changed()
        return web.json_response(rec.public(now))

    async def revoke(request: web.Request) -> web.Response:
        key_id = request.match_info["id"]
        rec: KeyRecord = await in_store(lambda c: revoke_key(c, key_id))
        await changed()
        return web.json_response(rec.public())

    r = app.router
    r.add_get("/admin/keys", wrap(list_all))
    r.add_post("/admin/keys", wrap(create))
    r.add_patch("/admin/keys/{id}", wrap(update))
    r.add_delete("/admin/keys/{id}", wrap(revoke))
    r.add_post("/admin/keys/{id}/revoke", wrap(revoke))
