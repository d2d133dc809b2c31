"""The OpenAI Batch API on the gateway: ``/v1/files`` and ``/v1/batches`` (docs/batch.md).

Files, batches and their lines live in the gateway's store (``tailgate.ledger.batches``: the ledger's SQLite
file on one host, PostgreSQL in a fleet), so any replica answers for a batch another replica took. The caller
is the gateway key of the request (the admin key sees every key's files and batches); another key's file or
batch reads as missing (404), as OpenAI does. An upload is checked line by line when it arrives
(:func:`~tailgate.wire.batch.parse_input_file`): a bad line is a 400 naming its number and field. The lines
run later, in the executor (gateway/batch/batch_exec.py); ``GET /v1/batches/{id}`` shows their progress and, in the
``tailgate`` extension field, what they cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from aiohttp import web

from tailgate._aiohttp import error_response
from tailgate.config.schema import BatchConfig
from tailgate.ledger import batches as store
from tailgate.ledger.store import StoreConn, StoreError, open_store
from tailgate.wire import errors as wire_errors
from tailgate.wire.batch import (
    Batch,
    BatchError,
    BatchErrors,
    BatchInputError,
    BatchLimits,
    BatchRequestCounts,
    FileDeleted,
    FileObject,
    ListPage,
    decode_batch_create,
    parse_input_file,
)
from tailgate.wire.errors import WireError
from tailgate.wire.multipart import parse_form_data

if TYPE_CHECKING:
    from tailgate.gateway.access.auth import AccessGuard
    from tailgate.gateway.request_path.core import Core

__all__ = ["MAX_WINDOW_S", "MIN_WINDOW_S", "Caller", "TailgateBatch", "add_batch_routes", "batch_object"]

MIN_WINDOW_S = 3600.0
"""The shortest ``completion_window`` the gateway takes (``1h``); OpenAI takes ``24h`` only."""
MAX_WINDOW_S = 14 * 86400.0
"""The longest (``14d``, Bailian's ``336h``)."""
FILE_TTL_S = 30 * 86400
"""Output and error files are kept 30 days, as OpenAI keeps them."""

_T = TypeVar("_T")


class TailgateBatch(Batch, kw_only=True):
    """OpenAI's Batch object plus ``tailgate``: ``{"cost": …, "currency": …}``, what the settled lines cost."""

    tailgate: dict[str, Any] = msgspec.field(default_factory=dict)


def batch_object(rec: store.BatchRecord, currency: str | None) -> TailgateBatch:
    """The wire object of a stored batch."""

    def ts(v: float | None) -> int | None:
        return None if v is None else int(v)

    errors = BatchErrors(data=[msgspec.convert(e, BatchError) for e in rec.errors]) if rec.errors is not None else None
    return TailgateBatch(
        id=rec.id,
        endpoint=rec.endpoint,
        errors=errors,
        input_file_id=rec.input_file_id,
        completion_window=rec.completion_window,
        status=rec.status,  # type: ignore[arg-type]
        output_file_id=rec.output_file_id,
        error_file_id=rec.error_file_id,
        created_at=int(rec.created_at),
        in_progress_at=ts(rec.in_progress_at),
        expires_at=ts(rec.expires_at),
        finalizing_at=ts(rec.finalizing_at),
        completed_at=ts(rec.completed_at),
        failed_at=ts(rec.failed_at),
        expired_at=ts(rec.expired_at),
        cancelling_at=ts(rec.cancelling_at),
        cancelled_at=ts(rec.cancelled_at),
        request_counts=BatchRequestCounts(total=rec.total, completed=rec.completed, failed=rec.failed),
        metadata=rec.metadata or None,
        tailgate={"cost": round(rec.cost, 10), "currency": currency},
    )


def _file_object(rec: store.FileRecord) -> FileObject:
    return FileObject(
        id=rec.id,
        bytes=rec.bytes,
        created_at=int(rec.created_at),
        filename=rec.filename,
        purpose=rec.purpose,
        expires_at=None if rec.expires_at is None else int(rec.expires_at),
    )


_json = msgspec.json.Encoder()


def _ok(obj: object, status: int = 200) -> web.Response:
    return web.Response(body=_json.encode(obj), status=status, content_type="application/json")


class Caller(msgspec.Struct, frozen=True):
    """Who asks: the gateway key's id (None on an open gateway, or the admin key) and whether it is the admin."""

    key_id: str | None
    admin: bool


def add_batch_routes(
    app: web.Application,
    core: Core,
    guard: AccessGuard,
    config: Callable[[], BatchConfig],
    currency: Callable[[], str | None],
) -> None:
    """Serve ``/v1/files`` and ``/v1/batches`` from the store the key directory uses (the ledger's)."""
    api = _BatchApi(core, guard, config, currency)
    r = app.router
    r.add_post("/v1/files", api.wrap(api.upload))
    r.add_get("/v1/files", api.wrap(api.list_files))
    r.add_get("/v1/files/{id}", api.wrap(api.get_file))
    r.add_delete("/v1/files/{id}", api.wrap(api.delete_file))
    r.add_get("/v1/files/{id}/content", api.wrap(api.file_content))
    r.add_post("/v1/batches", api.wrap(api.create_batch))
    r.add_get("/v1/batches", api.wrap(api.list_batches))
    r.add_get("/v1/batches/{id}", api.wrap(api.get_batch))
    r.add_post("/v1/batches/{id}/cancel", api.wrap(api.cancel_batch))


class _BatchApi:
    def __init__(
        self,
        core: Core,
        guard: AccessGuard,
        config: Callable[[], BatchConfig],
        currency: Callable[[], str | None],
    ) -> None:
        self.core = core
        self.guard = guard
        self.config = config
        self.currency = currency

    # -- plumbing ----------------------------------------------------------------------------------

    def wrap(self, handler: Callable[[web.Request, Caller], Awaitable[web.Response]]) -> Callable[..., Any]:
        async def run(request: web.Request) -> web.Response:
            try:
                if not self.config().enabled:
                    raise wire_errors.not_found(f"Invalid URL ({request.method} {request.path}): batch.enabled is off.")
                return await handler(request, self.caller(request))
            except WireError as err:
                return error_response(err)

        return run

    def caller(self, request: web.Request) -> Caller:
        if self.guard.is_admin(request):
            return Caller(None, True)
        key_id = self.core.keys.identify(request)  # 401 as a WireError
        limits = self.core.key_directory.limits(key_id) if key_id is not None else None
        if limits is not None and limits.expires_at is not None and time.time() >= limits.expires_at:
            raise WireError(401, "This API key has expired.", code="key_expired")
        return Caller(key_id, False)

    def target(self) -> str | Path:
        target = self.core.key_directory.target
        if target is None:
            raise WireError(
                409,
                "The Batch API needs a store: enable the ledger (ledger.enabled) or set ledger.url.",
                type="invalid_request_error",
                code="no_store",
            )
        return target

    async def in_store(self, fn: Callable[[StoreConn], _T]) -> _T:
        target = self.target()

        def run() -> _T:
            with open_store(target) as conn:
                return fn(conn)

        try:
            return await asyncio.to_thread(run)
        except store.BatchStoreError as exc:
            status = 404 if str(exc).startswith("no ") else 400
            raise WireError(status, str(exc), type="invalid_request_error") from None
        except StoreError as exc:
            raise WireError(503, str(exc), type="server_error") from None

    # -- files -------------------------------------------------------------------------------------

    async def _read_upload(self, request: web.Request) -> bytes:
        """The body within ``batch.max_file_bytes`` (plus the form's own framing), in time."""
        limit = self.config().max_file_bytes + 64 * 1024
        if request.content_length is not None and request.content_length > limit:
            raise _too_large(self.config().max_file_bytes)
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(max(30.0, limit / 1_000_000)):  # at least 1 MB/s
                async for chunk in request.content.iter_chunked(1 << 20):
                    size += len(chunk)
                    if size > limit:
                        raise _too_large(self.config().max_file_bytes)
                    chunks.append(chunk)
        except TimeoutError:
            raise WireError(408, "The upload did not arrive in time.", code="request_timeout") from None
        return b"".join(chunks)

    async def upload(self, request: web.Request, who: Caller) -> web.Response:
        self.target()
        form = parse_form_data(request.headers.get("Content-Type", ""), await self._read_upload(request))
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose is None:
            raise wire_errors.invalid_request("Missing required parameter: 'purpose'.", param="purpose")
        if purpose.text() != "batch":
            raise wire_errors.invalid_request(
                f"Invalid value for 'purpose': {purpose.text()[:40]!r}. tailgate stores files for 'batch' only.",
                param="purpose",
            )
        if upload is None or upload.filename is None:
            raise wire_errors.invalid_request("Missing required parameter: 'file' (a file part).", param="file")
        cfg = self.config()
        if len(upload.data) > cfg.max_file_bytes:
            raise _too_large(cfg.max_file_bytes)
        limits = BatchLimits(max_file_bytes=cfg.max_file_bytes, max_lines=cfg.max_lines)
        try:  # every line checked now: a bad one is refused at upload, naming its number
            await asyncio.to_thread(parse_input_file, upload.data, limits=limits)
        except BatchInputError as exc:
            raise exc.as_wire_error() from None
        data, name = upload.data, upload.filename[:255]
        rec = await self.in_store(
            lambda c: store.create_file(c, key_id=who.key_id, purpose="batch", filename=name, content=data)
        )
        return _ok(_file_object(rec))

    async def list_files(self, request: web.Request, who: Caller) -> web.Response:
        purpose = request.query.get("purpose")
        limit = _limit(request, 10_000, 10_000)
        after = request.query.get("after")
        recs = await self.in_store(
            lambda c: store.list_files(
                c, key_id=who.key_id, admin=who.admin, purpose=purpose, limit=limit + 1, after=after
            )
        )
        return _ok(_page([_file_object(r) for r in recs], limit))

    async def _file(self, request: web.Request, who: Caller) -> store.FileRecord:
        file_id = request.match_info["id"]
        rec = await self.in_store(lambda c: store.get_file(c, file_id, key_id=who.key_id, admin=who.admin))
        if rec is None:
            raise WireError(404, f"No such File object: {file_id[:100]}", param="id")
        return rec

    async def get_file(self, request: web.Request, who: Caller) -> web.Response:
        return _ok(_file_object(await self._file(request, who)))

    async def file_content(self, request: web.Request, who: Caller) -> web.Response:
        file_id = request.match_info["id"]
        data = await self.in_store(lambda c: store.file_content(c, file_id, key_id=who.key_id, admin=who.admin))
        if data is None:
            raise WireError(404, f"No such File object: {file_id[:100]}", param="id")
        return web.Response(body=data, content_type="application/octet-stream")

    async def delete_file(self, request: web.Request, who: Caller) -> web.Response:
        rec = await self._file(request, who)
        await self.in_store(lambda c: store.delete_file(c, rec.id, key_id=who.key_id, admin=who.admin))
        return _ok(FileDeleted(id=rec.id))

    # -- batches -----------------------------------------------------------------------------------

    async def create_batch(self, request: web.Request, who: Caller) -> web.Response:
        req, window_s = decode_batch_create(await request.read(), min_window_s=MIN_WINDOW_S, max_window_s=MAX_WINDOW_S)
        cfg = self.config()
        limits = BatchLimits(max_file_bytes=cfg.max_file_bytes, max_lines=cfg.max_lines)

        def create(conn: StoreConn) -> store.BatchRecord:
            source = store.get_file(conn, req.input_file_id, key_id=who.key_id, admin=who.admin)
            if source is None:
                raise WireError(404, f"No such File object: {req.input_file_id[:100]}", param="input_file_id")
            if source.purpose != "batch":
                raise wire_errors.invalid_request(
                    f"File {source.id} has purpose {source.purpose!r}; a batch needs purpose 'batch'.",
                    param="input_file_id",
                )
            data = store.file_content(conn, source.id, key_id=None, admin=True) or b""
            now = time.time()
            common: dict[str, Any] = {
                "key_id": source.key_id if who.admin else who.key_id,
                "endpoint": req.endpoint,
                "input_file_id": source.id,
                "completion_window": req.completion_window,
                "metadata": req.metadata,
                "expires_at": now + window_s,
                "admin": True,
                "now": now,
            }
            try:
                parsed = parse_input_file(data, endpoint=req.endpoint, limits=limits)
            except BatchInputError as exc:  # OpenAI's way: the batch is created, and fails validation
                rec = store.create_batch(conn, lines=[], **common)
                failed = store.transition(
                    conn, rec.id, "failed", errors=[msgspec.to_builtins(e) for e in exc.errors], now=now
                )
                assert failed is not None
                return failed
            lines = [store.BatchLineInput(x.custom_id, x.method, x.url, _json.encode(x.body).decode()) for x in parsed]
            return store.create_batch(conn, lines=lines, status="in_progress", **common)

        rec = await self.in_store(create)
        return _ok(batch_object(rec, self.currency()))

    async def list_batches(self, request: web.Request, who: Caller) -> web.Response:
        limit = _limit(request, 20, 100)
        after = request.query.get("after")
        recs = await self.in_store(
            lambda c: store.list_batches(c, key_id=who.key_id, admin=who.admin, limit=limit + 1, after=after)
        )
        currency = self.currency()
        return _ok(_page([batch_object(r, currency) for r in recs], limit))

    async def get_batch(self, request: web.Request, who: Caller) -> web.Response:
        batch_id = request.match_info["id"]
        rec = await self.in_store(lambda c: store.get_batch(c, batch_id, key_id=who.key_id, admin=who.admin))
        if rec is None:
            raise WireError(404, f"No such Batch object: {batch_id[:100]}", param="id")
        return _ok(batch_object(rec, self.currency()))

    async def cancel_batch(self, request: web.Request, who: Caller) -> web.Response:
        batch_id = request.match_info["id"]
        try:
            rec = await self.in_store(lambda c: store.cancel_batch(c, batch_id, key_id=who.key_id, admin=who.admin))
        except WireError as err:
            if err.status == 400:  # a final batch: OpenAI answers 409
                err.status = 409
            raise
        return _ok(batch_object(rec, self.currency()))


def _too_large(limit: int) -> WireError:
    return WireError(
        413,
        f"The file is larger than {limit} bytes, the most a batch input file may be (batch.max_file_bytes).",
        param="file",
        code="file_too_large",
    )


def _limit(request: web.Request, default: int, most: int) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise wire_errors.invalid_request(f"Invalid 'limit': {raw[:20]!r}.", param="limit") from None
    if not 1 <= value <= most:
        raise wire_errors.invalid_request(f"'limit' must be between 1 and {most}.", param="limit")
    return value


def _page(items: list[Any], limit: int) -> ListPage[Any]:
    shown = items[:limit]
    return ListPage(
        data=shown,
        first_id=shown[0].id if shown else None,
        last_id=shown[-1].id if shown else None,
        has_more=len(items) > limit,
    )
