"""The batch executor: runs the lines of the gateway's batches (docs/batch.md, "Paths").

A background task of ``tailgate serve`` (started and stopped with the gateway). Every ``batch.poll_interval``
it expires the batches whose window closed, then for each batch in progress decides its **path** and leases
lines from the store (``tailgate.ledger.batches``; replicas of a fleet lease from one PostgreSQL and never take
each other's lines):

- **provider-batch**: the alias has a route whose provider serves OpenAI's Batch API
  (``providers.NAME.batch_api: true``) and whose batch price is the lowest expected cost, and the batch has at
  least ``batch.provider_min_left`` of its window left. Up to ``batch.provider_job_lines`` lines become one
  provider job: uploaded as JSONL, created with a ``24h`` window, polled every ``batch.provider_poll_interval``,
  and its output and error files mapped back by ``custom_id``. Each line's ledger row (lane ``provider-batch``,
  tier ``batch``, priced at ``price.batch``) is written by :func:`~tailgate.ledger.batch_lines.complete_line` in
  the transaction that settles the line. The first ``batch.lane_share`` of its lines run on the batch lane instead.
- **batch-lane**: otherwise each line is one request through the gateway's own request path — the key's
  limits and models, routing, pacing, retries — marked ``x-tailgate-class: batch`` (the lowest priority), at
  most ``batch.concurrency`` at once per replica. The proxy's ledger row for it is taken from the books
  (:meth:`BatchExecutor.divert`) and written with the line's settlement, lane ``batch-lane``: never twice.

A batch whose lines are all settled is finalised (``finalizing`` → output and error files → ``completed``);
a cancelled batch moves to ``cancelled`` once no line is running; an expired one gets its files too. Leases
are renewed while lines run, so a replica's death only delays its lines; a restart simply leases again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import msgspec
from multidict import CIMultiDict

from tailgate._runtime import stop_task
from tailgate.config.schema import BatchConfig
from tailgate.gateway.access.auth import SelfCall
from tailgate.gateway.batch.line_admission import JobLines, budget_refused, job_lines
from tailgate.gateway.batch.placement import DEFAULT_LINE_S, place, window_closing
from tailgate.gateway.batch.provider_jobs import job_groups, json_call, open_job, provider_line_row
from tailgate.gateway.batch.result_files import write_result_files
from tailgate.gateway.http.exchange import Reply, Stream
from tailgate.ledger import batch_lines as line_store
from tailgate.ledger import batches as store
from tailgate.ledger.errors import redact_url
from tailgate.ledger.row import LedgerRow
from tailgate.ledger.store import StoreConn, db_errors, open_store
from tailgate.wire.batch import TERMINAL_STATUSES, BatchRequestOutput, decode_output_file

if TYPE_CHECKING:
    from tailgate.gateway.http.exchange import Exchange
    from tailgate.gateway.request_path.admission import Ticket
    from tailgate.gateway.request_path.core import Core
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.routing import Route

__all__ = ["BatchExecutor"]

log = logging.getLogger("tailgate.batches")

_T = TypeVar("_T")
Handle = Callable[["Exchange"], Awaitable[Reply | Stream]]

_RETRY_STATUSES = frozenset({429, 503})
"""A lane line answered this (no capacity now) goes back to pending for a later try, up to ``_MAX_TRIES``."""
_MAX_TRIES = 20


class _LineExchange(SelfCall):
    """A batch line as the proxy sees it: the key's id instead of a bearer, the line's body, no connection."""

    __slots__ = ("body", "headers", "owner")

    def __init__(self, owner: str | None, headers: Mapping[str, str], body: bytes) -> None:
        self.owner = owner
        self.headers: Mapping[str, str] = CIMultiDict(headers)
        self.body = body

    @property
    def deadline_hit(self) -> bool:
        return False

    async def open_stream(self, headers: dict[str, str], first: bytes) -> Stream:
        raise RuntimeError("a batch line never streams")

    def send(self, reply: Reply) -> None:
        """Nothing to send: the executor reads the handler's reply."""

    def detach(self) -> asyncio.Task[Any] | None:
        return None


class BatchExecutor:
    """See the module docstring. ``handlers`` (the gateway's ``/v1`` POST handlers by path) is set when the app
    is built; :meth:`divert` is the books' hook for the lane's ledger rows."""

    def __init__(
        self,
        core: Core,
        config: Callable[[], BatchConfig],
        target: str | Path | None,
        *,
        currency: Callable[[], str | None] = lambda: None,
        record: Callable[[LedgerRow], None] | None = None,
    ) -> None:
        self.core = core
        self.config = config
        self.target = target
        self.record = record
        """The ledger writer, for lane attempts that are retried (their rows bill nothing)."""
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.handlers: Mapping[str, Handle] = {}
        self._waiting: dict[str, asyncio.Future[LedgerRow]] = {}
        self._task: asyncio.Task[None] | None = None
        self._work: set[asyncio.Task[None]] = set()
        self._lane_running = 0
        self._jobs: dict[str, int] = {}
        """Provider jobs running per batch id."""
        self._alias: dict[str, str] = {}
        self._session: aiohttp.ClientSession | None = None
        self._last_renew = 0.0
        self._threads: ThreadPoolExecutor | None = None
        """Store calls run here, not on the loop's default executor: one blocked in a locked store must not hold
        the process's exit (the default executor is joined when the loop ends)."""
        self._leased = False
        """This replica has leased lines (and may hold some): give them back when it stops."""
        self._hold: dict[str, float] = {}
        """Batch id → wall time before which its lines are not leased (a 429 / 503's ``Retry-After``)."""
        self._orphans: set[str] = set()
        """Request ids of lane lines cancelled mid-call (a stop): their rows, when they come, are the lane's."""
        self._calls: set[Future[Any]] = set()
        """Store calls running in ``_threads``: a stop waits for them before it gives the lines back."""
        self._closing: set[str] = set()
        """Batches whose window is about to close (``window_closing``): their lines run interactive from now on."""
        self._line_s = DEFAULT_LINE_S
        """Seconds a line took on the request path lately (a moving average): the pace ``window_closing`` assumes."""

    # -- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.target is None or not self.config().enabled or self._task is not None:
            return
        self._threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tailgate-batches")
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="tailgate-batch-executor")

    async def close(self) -> None:
        if self._task is not None:
            await stop_task(self._task)
            self._task = None
        for task in list(self._work):
            await stop_task(task)
        for _ in range(200):  # a store call still running (a lease its cancelled task asked for) lands first
            if not self._calls:
                break
            await asyncio.sleep(0.01)
        if self.target is not None and self._leased:  # give the lines this replica holds back, at once
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._store(lambda c: line_store.release_lines(c, owner=self.owner)), 2.0)
        if self._session is not None:
            await self._session.close()
            self._session = None
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)

    def divert(self, row: LedgerRow) -> bool:
        """The books' hook: True (and the row is the executor's) for a lane line's request."""
        fut = self._waiting.pop(row.request_id, None)
        if fut is None:
            if row.request_id in self._orphans:  # billed nothing (no answer): recorded, on the lane it ran on
                self._orphans.discard(row.request_id)
                if self.record is not None:
                    self.record(msgspec.structs.replace(row, lane="batch-lane"))
                return True
            return False
        if not fut.done():
            fut.set_result(row)
        return True

    async def _store(self, fn: Callable[[StoreConn], _T]) -> _T:
        target = self.target
        assert target is not None

        def run() -> _T:
            with open_store(target) as conn:
                return fn(conn)

        if self._threads is None:  # not started (tests call tick directly), or stopping
            return await asyncio.to_thread(run)
        call = self._threads.submit(run)  # tracked until it ends, even when the task awaiting it is cancelled
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)
        return await asyncio.wrap_future(call)

    async def _loop(self) -> None:
        failing: str | None = None
        store_errors = db_errors()
        while True:
            delay = self.config().poll_interval
            try:
                await self.tick()
                if failing is not None:
                    log.info("batch executor: the store answers again")
                failing = None
            except asyncio.CancelledError:
                raise
            except store_errors as exc:  # the store is down or busy: say so once, retry every few seconds
                said = redact_url(str(exc))
                if said != failing:
                    log.warning("batch executor: the store failed (%s); retrying", said)
                failing = said
                delay = max(delay, 5.0)
            except Exception:
                log.exception("batch executor: a round failed; trying again")
                delay = max(delay, 5.0)
            await asyncio.sleep(delay)

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run(), name=name)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    # -- one round -----------------------------------------------------------------------------------

    async def tick(self) -> None:
        """Expire, renew, finalise, lease and start lines: one round of the executor."""
        cfg = self.config()
        now = time.time()
        renew = now - self._last_renew >= cfg.lease / 3
        if renew:
            self._last_renew = now

        def sweep(conn: StoreConn) -> tuple[list[store.BatchRecord], list[store.BatchRecord]]:
            """One connection for an idle round: expire, renew this replica's leases, list the active batches."""
            expired = store.expire_overdue(conn, now=now, files=write_result_files)
            if renew:
                line_store.renew_leases(conn, owner=self.owner, lease_s=cfg.lease)
            return expired, store.active_batches(conn)

        expired, active = await self._store(sweep)
        for rec in expired:
            log.info("batch %s expired: its window closed with %d of %d lines done", rec.id, rec.completed, rec.total)
        for rec in active:
            if rec.status == "in_progress":
                await self._progress(rec, cfg)
            elif rec.status == "cancelling":
                await self._cancelling(rec)
            elif rec.status == "finalizing" and (rec.finalizing_at or 0) < time.time() - cfg.lease:
                await self._complete(rec)  # the replica that began it died: finish it

    async def _progress(self, rec: store.BatchRecord, cfg: BatchConfig) -> None:
        counts = await self._store(lambda c: line_store.line_counts(c, rec.id))
        if counts["pending"] == 0 and counts["leased"] == 0:
            moved = await self._store(lambda c: store.transition(c, rec.id, "finalizing"))
            if moved is not None:
                await self._complete(moved)
            return
        alias = await self._alias_of(rec.id)
        left = (rec.expires_at or float("inf")) - time.time()
        if window_closing(left, counts["pending"] + counts["leased"], cfg, self._line_s):
            self._closing.add(rec.id)  # for good: lines done faster than assumed must not send the rest back
        placement = place(self.core, alias, left, cfg, closing=rec.id in self._closing, total=rec.total)
        split = placement.lane_lines  # a provider job's batch: lines below this run on the batch lane
        lane = "batch-lane" if split else placement.lane
        if placement.lane == "provider-batch" and placement.route is not None:
            # leasable: pending lines and those whose lease expired (a dead replica's), as lease_lines takes them
            leasable = counts["pending"] + counts["leased"] - counts["leased_live"]
            if leasable <= 0 or self._hold.get(rec.id, 0.0) > time.time():
                return
            job_lines, span = cfg.provider_job_lines, (split, None) if split else None
            lines = await self._store(
                lambda c: line_store.lease_lines(
                    c, owner=self.owner, limit=job_lines, lease_s=cfg.lease, batch_id=rec.id, lines=span
                )
            )
            self._leased = self._leased or bool(lines)
            self._send_jobs(rec, alias, placement.route, lines)
            if not split:
                return
        free = cfg.concurrency - self._lane_running
        if free <= 0 or self._hold.get(rec.id, 0.0) > time.time():
            return
        lines = await self._store(
            lambda c: line_store.lease_lines(
                c, owner=self.owner, limit=free, lease_s=cfg.lease, batch_id=rec.id, lines=(0, split) if split else None
            )
        )
        self._leased = self._leased or bool(lines)
        if split and placement.route is not None:  # a lane line already sent in a provider job is resumed there
            self._send_jobs(rec, alias, placement.route, [x for x in lines if x.job_provider is not None])
            lines = [x for x in lines if x.job_provider is None]
        for line in lines:
            self._lane_running += 1
            self._spawn(self._lane_line(rec, line, lane), f"tailgate-batch-line-{rec.id}-{line.line}")

    def _send_jobs(self, rec: store.BatchRecord, alias: str, route: Route, lines: list[store.LeasedLine]) -> None:
        """Start provider jobs for leased ``lines``: a dead replica's job, recorded on its lines, is resumed (on
        its provider's route), not sent again; lines without one go to ``route`` as a new job."""
        routes = self.core.routes.aliases.get(alias, ())
        for (jp, _, _), group in job_groups(lines).items():
            on = next((r for r in routes if r.provider == jp), route)
            self._jobs[rec.id] = self._jobs.get(rec.id, 0) + 1
            self._spawn(self._provider_job(rec, on, group), f"tailgate-batch-job-{rec.id}")

    async def _alias_of(self, batch_id: str) -> str:
        alias = self._alias.get(batch_id)
        if alias is None:
            first = await self._store(lambda c: line_store.read_lines(c, batch_id, limit=1))
            alias = str(json.loads(first[0].body).get("model", "")) if first else ""
            self._alias[batch_id] = alias
        return alias

    async def _cancelling(self, rec: store.BatchRecord) -> None:
        counts = await self._store(lambda c: line_store.line_counts(c, rec.id))
        if counts["leased_live"] > 0:
            return
        moved = await self._store(lambda c: store.transition(c, rec.id, "cancelled", files=write_result_files))
        if moved is not None:
            log.info(
                "batch %s cancelled: %d lines done, %d not", rec.id, moved.completed, moved.total - moved.completed
            )

    async def _complete(self, rec: store.BatchRecord) -> None:
        """``finalizing`` → ``completed``, its files written in the same transaction (one replica does it)."""
        done = await self._store(lambda c: store.transition(c, rec.id, "completed", files=write_result_files))
        if done is not None:
            log.info("batch %s completed: %d lines, %d failed", rec.id, done.completed, done.failed)
        self._alias.pop(rec.id, None)
        self._closing.discard(rec.id)

    # -- the batch lane ------------------------------------------------------------------------------

    async def _lane_line(self, rec: store.BatchRecord, line: store.LeasedLine, lane: str = "batch-lane") -> None:
        try:
            await self._run_lane_line(rec, line, lane)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch %s line %r failed in the executor; it will be retried", rec.id, line.custom_id)
            with contextlib.suppress(Exception):
                await self._store(
                    lambda c: line_store.release_lines(
                        c, owner=self.owner, batch_id=rec.id, custom_ids=[line.custom_id]
                    )
                )
        finally:
            self._lane_running -= 1

    async def _run_lane_line(self, rec: store.BatchRecord, line: store.LeasedLine, lane: str) -> None:
        """One line on the request path: the batch lane (lowest priority), or ``interactive`` (full priority)."""
        handle = self.handlers.get(line.url)
        if handle is None:
            await self._fail(rec, line, 404, "invalid_url", f"The gateway does not serve {line.url}.")
            return
        body = json.loads(line.body)
        body.pop("stream", None)  # a batch line is answered whole
        body.pop("stream_options", None)
        digest = hashlib.sha256(f"{rec.id}:{line.line}".encode()).hexdigest()[:20]
        rid = f"batch_req_{digest}-{line.attempts}"
        fut: asyncio.Future[LedgerRow] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        headers = {"Content-Type": "application/json", "x-request-id": rid}
        if lane == "batch-lane":
            headers["x-tailgate-class"] = "batch"
        began = time.monotonic()
        try:
            try:
                reply = await handle(_LineExchange(rec.key_id, headers, json.dumps(body).encode()))
            except asyncio.CancelledError:
                self._orphans.add(rid)
                raise
            self.core.books.flush()  # the request's row, now (it ended with the handler: no tail to wait for)
            try:
                row: LedgerRow | None = await asyncio.wait_for(asyncio.shield(fut), timeout=5.0)
            except TimeoutError:
                row = None
                log.warning("batch %s line %r: no ledger row came back for %s", rec.id, line.custom_id, rid)
        finally:
            self._waiting.pop(rid, None)
        if not isinstance(reply, Reply):
            await self._fail(rec, line, 500, "stream", "The line was answered as a stream.")
            return
        left = (rec.expires_at or float("inf")) - time.time()
        # its budget's 429: the error file now, no Retry-After would help
        final = budget_refused(reply.status, reply.body, row.outcome if row is not None else None)
        if reply.status in _RETRY_STATUSES and not final and line.attempts < _MAX_TRIES and left > 60:
            try:
                wait = float(reply.headers.get("Retry-After", "1"))
            except ValueError:
                wait = 1.0
            self._hold[rec.id] = max(self._hold.get(rec.id, 0.0), time.time() + min(max(wait, 0.5), 60.0))
            if row is not None and self.record is not None:
                self.record(msgspec.structs.replace(row, lane=lane))  # a refused attempt: bills nothing
            await self._store(
                lambda c: line_store.release_lines(c, owner=self.owner, batch_id=rec.id, custom_ids=[line.custom_id])
            )
            return
        if row is not None:
            row = msgspec.structs.replace(row, lane=lane)
        ok = 200 <= reply.status < 300
        if ok:
            self._line_s = 0.8 * self._line_s + 0.2 * (time.monotonic() - began)
        await self._store(
            lambda c: line_store.complete_line(
                c,
                rec.id,
                line.custom_id,
                by=self.owner,
                ok=ok,
                response_status=reply.status,
                result=reply.body.decode("utf-8", "replace"),
                request_id=rid,
                row=row,
            )
        )

    async def _fail(
        self, rec: store.BatchRecord, line: store.LeasedLine, status: int, code: str, msg: str, body: str | None = None
    ) -> None:
        """Settle ``line`` failed with ``status`` and an OpenAI error body (``body``, else one made of ``code``)."""
        if body is None:
            err = {"message": msg, "type": "invalid_request_error", "param": None, "code": code}
            body = json.dumps({"error": err})
        await self._store(
            lambda c: line_store.complete_line(
                c, rec.id, line.custom_id, by=self.owner, ok=False, response_status=status, result=body
            )
        )

    # -- a provider's batch API ----------------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300))
        return self._session

    async def _provider_job(self, rec: store.BatchRecord, route: Route, lines: list[store.LeasedLine]) -> None:
        try:
            await self._run_provider_job(rec, route, lines)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("batch %s: a job on %s failed (%s); its lines go back to pending", rec.id, route.provider, exc)
            self._hold[rec.id] = time.time() + self.config().provider_poll_interval
            with contextlib.suppress(Exception):
                for line in lines:
                    if line.attempts >= _MAX_TRIES:
                        await self._fail(rec, line, 502, "provider_batch_error", f"{route.provider}: {exc}")
                ids = [x.custom_id for x in lines if x.attempts < _MAX_TRIES]
                await self._store(
                    lambda c: line_store.release_lines(c, owner=self.owner, batch_id=rec.id, custom_ids=ids)
                )
        finally:
            self._jobs[rec.id] -= 1

    async def _run_provider_job(self, rec: store.BatchRecord, route: Route, lines: list[store.LeasedLine]) -> None:
        provider = self.core.providers[route.provider]
        jobs = JobLines()  # each line's key checks and budget reservation, as a live request's (line_admission.py)
        try:
            await job_lines(self.core, rec.key_id, lines, route, provider, jobs)
            for line, refused in jobs.refused:
                err = refused.error
                await self._fail(rec, line, err.status, refused.reason, err.message, err.body().decode())
            await self._provider_job_lines(rec, route, provider, jobs)
        finally:  # a line never answered (the job failed, the gateway stops) keeps nothing of its reservation
            for ticket in jobs.tickets.values():
                self.core.admission.settle(ticket, 0, 0, 0.0)

    async def _provider_job_lines(
        self, rec: store.BatchRecord, route: Route, provider: ProviderState, jobs: JobLines
    ) -> None:
        by_job_id, payload, tickets = jobs.by_job_id, jobs.payload, jobs.tickets
        sent = list(by_job_id.values())  # the lines the key admitted
        if not by_job_id:
            return
        started = time.time()
        base = provider.config.base_url.rstrip("/")
        auth = {"Authorization": f"Bearer {provider.config.api_keys[0]}"}
        http = self._http()
        created, resumed = await open_job(
            http,
            base,
            auth,
            store=self._store,
            owner=self.owner,
            batch_id=rec.id,
            provider=provider.name,
            lines=sent,
            payload=b"".join(payload),
            endpoint=sent[0].url,
        )
        job = str(created["id"])
        verb = "resumes polling" if resumed else "sent to"
        log.info("batch %s: %d lines %s %s's job %s", rec.id, len(by_job_id), verb, provider.name, job)
        status = str(created.get("status"))
        state = created
        cancel_sent = False
        closing_by: float | None = None  # the window closes: the job is cancelled and waited for until then
        while status not in TERMINAL_STATUSES:
            cfg = self.config()
            await asyncio.sleep(cfg.provider_poll_interval)
            mine = await self._store(lambda c: store.get_batch(c, rec.id, key_id=None, admin=True))
            stop = mine is not None and mine.status in ("cancelling", "cancelled", "expired", "failed")
            left = (rec.expires_at or float("inf")) - time.time()
            if closing_by is None and (
                rec.id in self._closing or window_closing(left, len(by_job_id), cfg, self._line_s)
            ):
                self._closing.add(rec.id)
                closing_by, stop = time.monotonic() + max(5.0, 3 * cfg.provider_poll_interval), True
                log.info(
                    "batch %s: %.0f s of its window left: job %s cancelled, its lines go interactive", rec.id, left, job
                )
            if stop and not cancel_sent:
                cancel_sent = True
                with contextlib.suppress(Exception):
                    await json_call(http.post(f"{base}/batches/{job}/cancel", headers=auth))
            state = await json_call(http.get(f"{base}/batches/{job}", headers=auth))
            status = str(state.get("status"))
            if closing_by is not None and time.monotonic() > closing_by:
                break  # a job that will not end: its lines run interactive anyway
        results: list[BatchRequestOutput] = []
        for key in ("output_file_id", "error_file_id") if status in TERMINAL_STATUSES else ():
            if (fid := state.get(key)) is not None:
                async with http.get(f"{base}/files/{fid}/content", headers=auth) as r:
                    r.raise_for_status()
                    results.extend(decode_output_file(await r.read()))
        elapsed_ms = (time.time() - started) * 1000.0
        for out in results:
            if out.custom_id not in by_job_id or (closing_by is not None and out.response is None):
                continue  # not ours, or not run (the job cancelled as the window closes): interactive now
            line = by_job_id.pop(out.custom_id)
            await self._settle_provider_line(
                rec, route, provider, line, out, elapsed_ms, tickets.pop(out.custom_id, None)
            )
        if closing_by is not None and by_job_id:  # not answered in the job: back to the executor, interactive now
            ids = [line.custom_id for line in by_job_id.values()]
            await self._store(lambda c: line_store.forget_job(c, rec.id, ids))
            await self._store(lambda c: line_store.release_lines(c, owner=self.owner, batch_id=rec.id, custom_ids=ids))
            return  # their reservations are given back (``_run_provider_job``): the interactive path reserves anew
        for line in by_job_id.values():  # no answer from the provider
            await self._fail(
                rec,
                line,
                502,
                "provider_batch_" + status,
                f"{provider.name}'s batch job {job} ended {status} without answering this line.",
            )

    async def _settle_provider_line(
        self,
        rec: store.BatchRecord,
        route: Route,
        provider: ProviderState,
        line: store.LeasedLine,
        out: BatchRequestOutput,
        elapsed_ms: float,
        ticket: Ticket | None,
    ) -> None:
        resp = out.response
        if resp is None:
            if ticket is not None:
                self.core.admission.settle(ticket, 0, 0, 0.0)
            err = out.error
            msg = err.message if err is not None else "no answer"
            await self._fail(rec, line, 502, err.code if err is not None else "provider_error", msg)
            return
        row = provider_line_row(rec.id, rec.key_id, route, provider.name, provider.config.price, line, resp, elapsed_ms)
        if ticket is not None:  # the reservation → what the line used (nothing for a failed line: row.cost None)
            self.core.admission.settle(ticket, row.prompt_tokens, row.output_tokens, row.cost)
        ok = 200 <= resp.status_code < 300
        await self._store(
            lambda c: line_store.complete_line(
                c,
                rec.id,
                line.custom_id,
                by=self.owner,
                ok=ok,
                response_status=resp.status_code,
                result=json.dumps(resp.body),
                request_id=row.request_id,
                row=row,
            )
        )
