"""OpenAI's Files + Batch API on a simulated provider: ``/v1/files`` and ``/v1/batches``.

A batch runs as a real provider's does, on capacity apart from live traffic (no live slot, queue place or
rate-limit token): ``validating`` (its input file parsed by :func:`tailgate.wire.batch.parse_input_file`;
``failed`` with ``errors.data`` naming each bad line) → ``in_progress`` (its lines answered evenly over the
turnaround, ``request_counts`` growing as they are) → ``finalizing`` → ``completed``, the output file holding
the lines answered 2xx and the error file every other. It ``expires`` when its expiry comes first (lines not
yet answered go to the error file as ``batch_expired``), and ``POST /cancel`` makes it ``cancelling`` then
``cancelled`` (``batch_cancelled``). Every answered line leaves a truth row with ``batch_id``, ``custom_id``
and its ``cost`` at the preset's batch price.

Turnaround, line failures and expiry follow the provider's faults when set (``batch_turnaround_s``,
``batch_fail_rate``, ``batch_expire_after_s``, wall seconds) and otherwise the preset (``batch_turnaround_s``
and the ``completion_window``, both × ``time_scale``). Files and batches belong to the API key that created
them: another key gets a 404, as another account would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec
from aiohttp import web

from tailgate.sim.batch_lines import answer_line
from tailgate.sim.engine import Engine
from tailgate.sim.request import Handlers, api_key
from tailgate.sim.text import token_at
from tailgate.wire import errors as wire_errors
from tailgate.wire.batch import (
    TERMINAL_STATUSES,
    Batch,
    BatchInputError,
    BatchLimits,
    BatchLineError,
    BatchRequestInput,
    BatchRequestOutput,
    BatchResponse,
    BatchUsage,
    FileDeleted,
    FileObject,
    ListPage,
    decode_batch_create,
    encode_jsonl,
    parse_input_file,
)
from tailgate.wire.errors import WireError
from tailgate.wire.multipart import parse_form_data

__all__ = ["MAX_WINDOW_S", "MIN_WINDOW_S", "SimBatches"]

log = logging.getLogger("tailgate.sim")
_json = msgspec.json.Encoder()
_T = TypeVar("_T", FileObject, Batch)

MIN_WINDOW_S = 24 * 3600.0
MAX_WINDOW_S = 336 * 3600.0
"""``completion_window`` from 24h to 336h (or 1d … 14d), as Bailian accepts (OpenAI: 24h only)."""
FILE_TTL_S = 30 * 86400
"""OpenAI: "files with purpose=batch expire after 30 days" (file_create_params.py); shown, not enforced."""
_SLICE_S = 0.001
"""The runner works at most this long (a 200-token line takes ≈ 0.3 ms), then leaves the event loop to live
requests as long: a batch takes at most half the loop, and a live request waits at most one slice for it."""


@dataclass(slots=True)
class _File:
    obj: FileObject
    data: bytes
    owner: str


@dataclass(slots=True)
class _Job:
    batch: Batch
    owner: str
    data: bytes
    turnaround_s: float
    expires_mono: float
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    cancel: bool = False
    closing: bool = False
    """Its files are being written: too late to cancel."""
    task: asyncio.Task[None] | None = None

    def cancelled(self) -> bool:
        """Was a cancel asked for (read through a call: it changes while the runner awaits)?"""
        return self.cancel


class SimBatches:
    """The files and batches of one simulated provider, and the tasks running its batches."""

    def __init__(self, h: Handlers, limits: BatchLimits) -> None:
        self.h = h
        self.p = h.p
        self.limits = limits
        self.files: dict[str, _File] = {}
        self.jobs: dict[str, _Job] = {}
        self._ids = random.Random(self.p.spec.seed + 3)
        # Its own engine, never started: lines are decoded at once (decode_now), their time is the turnaround.
        self.engine = Engine(self.p.spec.params, token_fn=token_at)

    # -- routes -----------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/files", self.upload)
        app.router.add_get("/v1/files", self.list_files)
        app.router.add_get("/v1/files/{id}", self.get_file)
        app.router.add_delete("/v1/files/{id}", self.delete_file)
        app.router.add_get("/v1/files/{id}/content", self.file_content)
        app.router.add_post("/v1/batches", self.create_batch)
        app.router.add_get("/v1/batches", self.list_batches)
        app.router.add_get("/v1/batches/{id}", self.get_batch)
        app.router.add_post("/v1/batches/{id}/cancel", self.cancel_batch)
        app.on_cleanup.append(self._on_cleanup)

    async def _on_cleanup(self, _app: web.Application) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop every running batch (the provider is stopping)."""
        tasks = [job.task for job in self.jobs.values() if job.task is not None and not job.task.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def snapshot(self) -> dict[str, object]:
        """``/sim/state``'s ``batches``: files stored and batches by status."""
        return {"files": len(self.files), "batches": dict(Counter(job.batch.status for job in self.jobs.values()))}

    def _gate(self, request: web.Request) -> str:
        """The caller's key (the owner of what it creates), after the checks a provider makes first."""
        p = self.p
        if not p.spec.params.batch_api:
            raise wire_errors.not_found(f"Invalid URL ({request.method} {request.path})")
        if p.faults.outage:
            raise wire_errors.overloaded("Service unavailable (simulated outage).")
        key = api_key(request)
        if p.spec.api_keys and key not in p.spec.api_keys:
            raise wire_errors.authentication_error()
        return key

    # -- files ------------------------------------------------------------------------------------

    async def upload(self, request: web.Request) -> web.Response:
        owner = self._gate(request)
        form = parse_form_data(request.headers.get("Content-Type", ""), await request.read())
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose is None:
            raise wire_errors.invalid_request("Missing required parameter: 'purpose'.", param="purpose")
        if purpose.text() != "batch":
            raise wire_errors.invalid_request(
                f"Invalid value for 'purpose': {purpose.text()[:40]!r}. This provider stores files for 'batch' only.",
                param="purpose",
            )
        if upload is None or upload.filename is None:
            raise wire_errors.invalid_request("Missing required parameter: 'file' (a file part).", param="file")
        if len(upload.data) > self.limits.max_file_bytes:
            raise WireError(
                413,
                f"The file is {len(upload.data)} bytes; the limit is {self.limits.max_file_bytes}.",
                param="file",
                code="file_too_large",
            )
        now = int(time.time())
        obj = FileObject(
            id=f"file-{self._ids.getrandbits(96):024x}",
            bytes=len(upload.data),
            created_at=now,
            filename=upload.filename[:255],
            purpose="batch",
            expires_at=now + FILE_TTL_S,
        )
        self.files[obj.id] = _File(obj, upload.data, owner)
        return _ok(obj)

    def _file(self, request: web.Request, owner: str) -> _File:
        file_id = request.match_info["id"]
        found = self.files.get(file_id)
        if found is None or found.owner != owner:
            raise WireError(404, f"No such File object: {file_id[:100]}", param="id")
        return found

    async def list_files(self, request: web.Request) -> web.Response:
        owner = self._gate(request)
        purpose = request.query.get("purpose")
        items = [
            f.obj for f in self.files.values() if f.owner == owner and (purpose is None or f.obj.purpose == purpose)
        ]
        return _ok(_page(items, request, default_limit=10_000, max_limit=10_000))

    async def get_file(self, request: web.Request) -> web.Response:
        return _ok(self._file(request, self._gate(request)).obj)

    async def file_content(self, request: web.Request) -> web.Response:
        found = self._file(request, self._gate(request))
        return web.Response(body=found.data, content_type="application/octet-stream")

    async def delete_file(self, request: web.Request) -> web.Response:
        found = self._file(request, self._gate(request))
        del self.files[found.obj.id]
        return _ok(FileDeleted(id=found.obj.id))

    # -- batches ----------------------------------------------------------------------------------

    async def create_batch(self, request: web.Request) -> web.Response:
        owner = self._gate(request)
        req, window_s = decode_batch_create(await request.read(), min_window_s=MIN_WINDOW_S, max_window_s=MAX_WINDOW_S)
        source = self.files.get(req.input_file_id)
        if source is None or source.owner != owner:
            raise WireError(404, f"No such File object: {req.input_file_id[:100]}", param="input_file_id")
        if source.obj.purpose != "batch":
            raise wire_errors.invalid_request(
                f"File {source.obj.id} has purpose {source.obj.purpose!r}; a batch needs purpose 'batch'.",
                param="input_file_id",
            )
        p, f = self.p, self.p.faults
        scale = p.spec.time_scale
        turnaround = (
            f.batch_turnaround_s if f.batch_turnaround_s is not None else p.spec.params.batch_turnaround_s * scale
        )
        expire = f.batch_expire_after_s if f.batch_expire_after_s is not None else window_s * scale
        wall = time.time()
        batch = Batch(
            id=f"batch_{self._ids.getrandbits(96):024x}",
            endpoint=req.endpoint,
            input_file_id=source.obj.id,
            completion_window=req.completion_window,
            status="validating",
            created_at=int(wall),
            expires_at=int(wall + expire),
            metadata=req.metadata,
        )
        job = _Job(batch, owner, source.data, turnaround, time.monotonic() + expire)
        self.jobs[batch.id] = job
        encoded = _json.encode(batch)  # the object as created, before its task runs
        job.task = asyncio.get_running_loop().create_task(self._run(job), name=f"tailgate-sim-{batch.id}")
        return web.Response(body=encoded, content_type="application/json")

    def _job(self, request: web.Request, owner: str) -> _Job:
        batch_id = request.match_info["id"]
        job = self.jobs.get(batch_id)
        if job is None or job.owner != owner:
            raise WireError(404, f"No such Batch object: {batch_id[:100]}", param="id")
        return job

    async def list_batches(self, request: web.Request) -> web.Response:
        owner = self._gate(request)
        items = [job.batch for job in self.jobs.values() if job.owner == owner]
        return _ok(_page(items, request, default_limit=20, max_limit=100, order="desc"))

    async def get_batch(self, request: web.Request) -> web.Response:
        return _ok(self._job(request, self._gate(request)).batch)

    async def cancel_batch(self, request: web.Request) -> web.Response:
        job = self._job(request, self._gate(request))
        batch = job.batch
        if batch.status != "cancelling" and (batch.status in TERMINAL_STATUSES or job.closing):
            raise WireError(409, f"Cannot cancel a batch with status '{batch.status}'.", param="id")
        if batch.status != "cancelling":
            batch.status = "cancelling"
            batch.cancelling_at = int(time.time())
            job.cancel = True
            job.wake.set()
        return _ok(batch)

    # -- running a batch --------------------------------------------------------------------------

    async def _run(self, job: _Job) -> None:
        try:
            await self._run_inner(job)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must fail the batch, not leave it in_progress for ever
            log.exception("%s: batch %s failed", self.p.name, job.batch.id)
            batch = job.batch
            batch.status, batch.failed_at = "failed", int(time.time())

    async def _run_inner(self, job: _Job) -> None:
        batch = job.batch
        await asyncio.sleep(0)  # the create call answers first, with status "validating"
        try:
            # In a thread: 5,000 lines take tens of ms to check, and the GIL's switch interval lets live
            # requests run between (this loop is theirs too).
            lines = await asyncio.to_thread(parse_input_file, job.data, endpoint=batch.endpoint, limits=self.limits)
        except BatchInputError as exc:
            batch.status, batch.failed_at, batch.errors = "failed", int(time.time()), exc.as_batch_errors()
            return
        job.data = b""
        if job.cancelled():
            await self._finish(job, lines, [], "cancelled")
            return
        batch.status, batch.in_progress_at = "in_progress", int(time.time())
        batch.request_counts.total = len(lines)
        batch.model = lines[0].body.get("model") if lines else None
        outputs: list[BatchRequestOutput] = []
        start, n = time.monotonic(), len(lines)
        while len(outputs) < n:
            now = time.monotonic()
            if job.cancelled() or now >= job.expires_mono:
                break
            due = start + job.turnaround_s * (len(outputs) + 1) / n
            if due > now:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(job.wake.wait(), min(due, job.expires_mono) - now)
                continue
            # Answer the lines now due in slices of _SLICE_S, then rest as long: live requests share this event
            # loop, and a bare sleep(0) would hand the runner a slice on every one of their loop iterations.
            slice_end = time.perf_counter() + _SLICE_S
            while len(outputs) < n and start + job.turnaround_s * (len(outputs) + 1) / n <= now:
                outputs.append(self._answer(job, lines[len(outputs)]))
                if time.perf_counter() >= slice_end:
                    break
            await asyncio.sleep(_SLICE_S if time.perf_counter() >= slice_end else 0)
        if job.cancelled():
            await self._finish(job, lines, outputs, "cancelled")
        elif len(outputs) < n:
            await self._finish(job, lines, outputs, "expired")
        else:
            job.closing = True
            batch.status, batch.finalizing_at = "finalizing", int(time.time())
            await asyncio.sleep(0)
            await self._finish(job, lines, outputs, "completed")

    def _answer(self, job: _Job, line: BatchRequestInput) -> BatchRequestOutput:
        f = self.p.faults
        fail = bool(f.batch_fail_rate) and self.p.rng.random() < f.batch_fail_rate
        answer = answer_line(self.h, self.engine, job.batch.id, line, fail)
        counts, batch = job.batch.request_counts, job.batch
        if answer.status == 200:
            counts.completed += 1
            if batch.usage is None:
                batch.usage = BatchUsage()
            usage = batch.usage
            usage.input_tokens += answer.prompt_tokens
            usage.output_tokens += answer.output_tokens
            usage.output_tokens_details.reasoning_tokens += answer.reasoning_tokens
            usage.total_tokens += answer.prompt_tokens + answer.output_tokens
        else:
            counts.failed += 1
        return BatchRequestOutput(
            id=f"batch_req_{self._ids.getrandbits(96):024x}",
            custom_id=line.custom_id,
            response=BatchResponse(status_code=answer.status, request_id=answer.request_id, body=answer.body),
        )

    async def _finish(
        self, job: _Job, lines: list[BatchRequestInput], outputs: list[BatchRequestOutput], status: str
    ) -> None:
        """Write the output and error files and set the final status (lines not answered: ``batch_<status>``)."""
        batch = job.batch
        job.closing = True
        code = f"batch_{status}"
        message = (
            "This request could not be executed before the completion window expired."
            if status == "expired"
            else "This request was not executed: the batch was cancelled."
        )
        for line in lines[len(outputs) :]:
            outputs.append(
                BatchRequestOutput(
                    id=f"batch_req_{self._ids.getrandbits(96):024x}",
                    custom_id=line.custom_id,
                    error=BatchLineError(code=code, message=message),
                )
            )
            batch.request_counts.failed += 1
        ok = [o for o in outputs if o.ok]
        bad = [o for o in outputs if not o.ok]
        batch.output_file_id = self._store_output(job, await asyncio.to_thread(encode_jsonl, ok), "output")
        batch.error_file_id = self._store_output(job, await asyncio.to_thread(encode_jsonl, bad), "error")
        now = int(time.time())
        if status == "completed":
            batch.status, batch.completed_at = "completed", now
        elif status == "expired":
            batch.status, batch.expired_at = "expired", now
        else:
            batch.status, batch.cancelled_at = "cancelled", now

    def _store_output(self, job: _Job, data: bytes, kind: str) -> str | None:
        if not data:
            return None
        now = int(time.time())
        obj = FileObject(
            id=f"file-{self._ids.getrandbits(96):024x}",
            bytes=len(data),
            created_at=now,
            filename=f"{job.batch.id}_{kind}.jsonl",
            purpose="batch_output",
            expires_at=now + FILE_TTL_S,
        )
        self.files[obj.id] = _File(obj, data, job.owner)
        return obj.id


def _ok(obj: object) -> web.Response:
    return web.Response(body=_json.encode(obj), content_type="application/json")


def _page(
    items: list[_T], request: web.Request, *, default_limit: int, max_limit: int, order: str | None = None
) -> ListPage[_T]:
    """One cursor page: ``order`` (``desc``: newest first, the default), ``after`` (an id), ``limit``."""
    q = request.query
    order = order or q.get("order", "desc")
    if order not in ("asc", "desc"):
        raise wire_errors.invalid_request(f"order must be 'asc' or 'desc', got {order[:20]!r}.", param="order")
    raw = q.get("limit", str(default_limit))
    if not raw.isdigit() or not 1 <= int(raw) <= max_limit:
        raise wire_errors.invalid_request(
            f"limit must be an integer from 1 to {max_limit}, got {raw[:20]!r}.", param="limit"
        )
    limit = int(raw)
    ordered = list(reversed(items)) if order == "desc" else list(items)
    if (after := q.get("after")) is not None:
        ids = [item.id for item in ordered]
        if after not in ids:
            raise wire_errors.invalid_request(f"No object with id {after[:100]!r} to list after.", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    data = ordered[:limit]
    return ListPage(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=len(ordered) > limit,
    )
