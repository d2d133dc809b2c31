"""The batch store: uploaded files, batches and their lines, leased by replicas (docs/batch.md).

One module over both backends (a :class:`~tailgate.ledger.store.StoreConn` on SQLite or PostgreSQL), so one
host and a fleet run the same code. The model:

- a **file** (``files``) is an upload: owner key, purpose, filename, size, and its bytes in ``content`` (in the
  store itself, on both backends: a fleet's replicas all read it from PostgreSQL, and one SQLite file holds
  everything a single host keeps);
- a **batch** (``batches``) is one OpenAI batch: owner key, endpoint, input file, completion window, status with
  OpenAI's timestamps, ``request_counts`` (``total`` / ``completed`` / ``failed``), output and error file ids,
  metadata and the cost of its lines so far;
- a **line** (``batch_lines``) is one request of the input file, created with its batch in one transaction. Its
  ``state`` moves ``pending → leased → done | failed``; ``cancelled`` when its batch is cancelled, expires or
  fails before the line ran.

Replicas share a batch by **leasing** (:mod:`tailgate.ledger.batch_lines`):
:func:`~tailgate.ledger.batch_lines.lease_lines` takes up to N lines that are pending, or leased with an expired
lease, and stamps them with the replica's name and ``now + lease_s`` in one statement (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, so replicas leasing together never wait for nor take each other's lines; a single ``UPDATE … RETURNING``
on SQLite, whose writes are serialised). A replica that dies holds its lines only until their leases expire; then
any replica takes them again (``attempts`` counts the leases).

**Exactly once**: :func:`complete_line` settles a line by ``(batch, custom_id)`` only while it is pending or
leased — by whichever replica finishes first, lease expired or not — and, in the same transaction, adds it to
the batch's ``request_counts`` and cost and inserts its ledger row (``requests``, with its lane and price tier).
A second completion (a replica whose lease expired and that finished late) changes nothing and comes back as
``Completion(accepted=False, …)`` naming who settled the line: no line is counted or billed twice. The
executor that runs a line must therefore hand its :class:`~tailgate.ledger.row.LedgerRow` to ``complete_line``
and not also record it through the gateway's ledger writer.

Status moves (:func:`transition`) are compare-and-set: ``UPDATE … WHERE status IN (allowed)``, so of two
replicas finalising a batch together exactly one does it. Owners: every read and change that a client makes
takes ``key_id`` (the gateway key's id; None when the gateway runs without keys) and ``admin``; a key sees only
its own files and batches, the admin key all.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from tailgate.ledger.store import StoreConn

__all__ = [
    "ACTIVE",
    "BATCH_STATUSES",
    "LINE_STATES",
    "TERMINAL",
    "BatchLineInput",
    "BatchRecord",
    "BatchStoreError",
    "Completion",
    "FileRecord",
    "FileWriter",
    "LeasedLine",
    "LineRecord",
    "active_batches",
    "cancel_batch",
    "create_batch",
    "create_file",
    "delete_file",
    "expire_overdue",
    "file_content",
    "get_batch",
    "get_file",
    "list_batches",
    "list_files",
    "transition",
]

log = logging.getLogger("tailgate.batches")

BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]
BATCH_STATUSES: Final[tuple[BatchStatus, ...]] = (
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
)
TERMINAL: Final[frozenset[str]] = frozenset({"completed", "failed", "expired", "cancelled"})
ACTIVE: Final[tuple[str, ...]] = ("validating", "in_progress", "finalizing", "cancelling")
LineState = Literal["pending", "leased", "done", "failed", "cancelled"]
LINE_STATES: Final[tuple[LineState, ...]] = ("pending", "leased", "done", "failed", "cancelled")

_FROM: Final[dict[str, tuple[str, ...]]] = {
    "in_progress": ("validating",),
    "finalizing": ("in_progress",),
    "completed": ("finalizing",),
    "failed": ("validating", "in_progress", "finalizing"),
    "expired": ("validating", "in_progress", "finalizing"),
    "cancelling": ("validating", "in_progress"),
    "cancelled": ("cancelling",),
}
"""Which statuses each status may be reached from (OpenAI's lifecycle, docs/batch.md)."""

_LINE_END: Final[dict[str, str]] = {
    "failed": "batch_failed",
    "expired": "batch_expired",
    "cancelled": "batch_cancelled",
}
"""A batch ending in these statuses settles its unfinished lines as ``cancelled`` with this error code."""

_FILE_COLS = "id, key_id, purpose, filename, bytes, created_at, expires_at"
_BATCH_COLS = (
    "id, key_id, endpoint, input_file_id, completion_window, status, created_at, expires_at, in_progress_at, "
    "finalizing_at, completed_at, failed_at, expired_at, cancelling_at, cancelled_at, total, completed, failed, "
    "output_file_id, error_file_id, errors, metadata, cost"
)
_LINE_COLS = (
    "batch_id, line, custom_id, method, url, body, state, lease_owner, lease_expires, attempts, response_status, "
    "result, error, request_id, lane, provider, price_tier, cost, done_at, done_by"
)


class BatchStoreError(ValueError):
    """A batch-store operation that cannot be done (unknown id, another key's, a wrong status); says why."""


# -- records -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileRecord:
    """One uploaded file (without its bytes: :func:`file_content` reads them)."""

    id: str
    key_id: str | None
    purpose: str
    filename: str
    bytes: int
    created_at: float
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One batch, as stored. Timestamps are Unix seconds (None until the batch reached that status)."""

    id: str
    key_id: str | None
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: float
    expires_at: float | None
    in_progress_at: float | None
    finalizing_at: float | None
    completed_at: float | None
    failed_at: float | None
    expired_at: float | None
    cancelling_at: float | None
    cancelled_at: float | None
    total: int
    completed: int
    failed: int
    output_file_id: str | None
    error_file_id: str | None
    errors: list[dict[str, Any]] | None
    """Batch-level errors (OpenAI's ``errors.data``), e.g. why validation failed; None when there were none."""
    metadata: dict[str, str]
    cost: float
    """The sum of the settled lines' costs, in the providers' price currency."""

    @property
    def request_counts(self) -> dict[str, int]:
        """OpenAI's ``request_counts``."""
        return {"total": self.total, "completed": self.completed, "failed": self.failed}


@dataclass(frozen=True, slots=True)
class BatchLineInput:
    """One line of an input file, as the gateway parsed it: ``body`` is the request's JSON text."""

    custom_id: str
    method: str
    url: str
    body: str


@dataclass(frozen=True, slots=True)
class LeasedLine:
    """A line this replica now holds until ``lease_expires`` (``attempts`` includes this lease)."""

    batch_id: str
    line: int
    custom_id: str
    method: str
    url: str
    body: str
    attempts: int
    lease_expires: float
    job_provider: str | None = None
    """The provider batch job this line was sent in (provider, its input file, its batch id), as recorded with
    :func:`~tailgate.ledger.batch_lines.record_job`: a replica taking the line over resumes that job."""
    job_file: str | None = None
    job_id: str | None = None


@dataclass(frozen=True, slots=True)
class LineRecord:
    """A line as stored (for the output and error files, and for tests)."""

    batch_id: str
    line: int
    custom_id: str
    method: str
    url: str
    body: str
    state: str
    lease_owner: str | None
    lease_expires: float | None
    attempts: int
    response_status: int | None
    result: str | None
    """The response body's JSON text (done lines, and failed ones that got a response)."""
    error: str | None
    """The error's JSON text (``{"code": …, "message": …}``) of a failed or cancelled line."""
    request_id: str | None
    lane: str | None
    provider: str | None
    price_tier: str | None
    cost: float | None
    done_at: float | None
    done_by: str | None


@dataclass(frozen=True, slots=True)
class Completion:
    """What :func:`complete_line` did: ``accepted`` False means the line was already settled (``state``, by
    ``done_by`` at ``done_at``) and this result was discarded, unbilled."""

    accepted: bool
    batch_id: str
    custom_id: str
    line: int
    state: str
    done_by: str | None
    done_at: float | None


FileWriter = Callable[[StoreConn, BatchRecord], tuple[str | None, str | None]]
"""Writes a batch's output and error files inside the caller's transaction; their ids (None: no such file)."""


# -- owners ------------------------------------------------------------------------------------------------


def _owner_clause(key_id: str | None, admin: bool) -> tuple[str, tuple[Any, ...]]:
    if admin:
        return "", ()
    if key_id is None:
        return " AND key_id IS NULL", ()
    return " AND key_id = ?", (key_id,)


def _now(now: float | None) -> float:
    return time.time() if now is None else now


# -- files -------------------------------------------------------------------------------------------------


def create_file(
    conn: StoreConn,
    *,
    key_id: str | None,
    purpose: str,
    filename: str,
    content: bytes,
    expires_at: float | None = None,
    now: float | None = None,
    file_id: str | None = None,
) -> FileRecord:
    """Store an uploaded file (its bytes in the store); the id is ``file-`` + 24 hex digits unless given."""
    rec = FileRecord(
        file_id or f"file-{secrets.token_hex(12)}", key_id, purpose, filename, len(content), _now(now), expires_at
    )
    conn.execute(
        f"INSERT INTO files ({_FILE_COLS}, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
        (rec.id, rec.key_id, rec.purpose, rec.filename, rec.bytes, rec.created_at, rec.expires_at, content),
    )
    return rec


def get_file(conn: StoreConn, file_id: str, *, key_id: str | None, admin: bool = False) -> FileRecord | None:
    """The file ``file_id`` if this owner may see it, else None (another key's file reads as missing)."""
    clause, args = _owner_clause(key_id, admin)
    row = conn.execute(f"SELECT {_FILE_COLS} FROM files WHERE id = ?{clause}", (file_id, *args)).fetchone()  # noqa: S608
    return _file(row) if row else None


def file_content(conn: StoreConn, file_id: str, *, key_id: str | None, admin: bool = False) -> bytes | None:
    """The bytes of ``file_id`` if this owner may see it, else None."""
    clause, args = _owner_clause(key_id, admin)
    row = conn.execute(f"SELECT content FROM files WHERE id = ?{clause}", (file_id, *args)).fetchone()  # noqa: S608
    return bytes(row[0]) if row else None


def list_files(
    conn: StoreConn,
    *,
    key_id: str | None,
    admin: bool = False,
    purpose: str | None = None,
    limit: int = 10_000,
    after: str | None = None,
) -> list[FileRecord]:
    """This owner's files, newest first; ``after`` (a file id) continues a listing past that file."""
    clause, args = _owner_clause(key_id, admin)
    if purpose is not None:
        clause += " AND purpose = ?"
        args = (*args, purpose)
    if after is not None:
        anchor = conn.execute("SELECT created_at, id FROM files WHERE id = ?", (after,)).fetchone()
        if anchor is not None:
            clause += " AND (created_at < ? OR (created_at = ? AND id < ?))"
            args = (*args, anchor[0], anchor[0], anchor[1])
    rows = conn.execute(
        f"SELECT {_FILE_COLS} FROM files WHERE 1 = 1{clause} ORDER BY created_at DESC, id DESC LIMIT ?",  # noqa: S608
        (*args, limit),
    ).fetchall()
    return [_file(r) for r in rows]


def delete_file(conn: StoreConn, file_id: str, *, key_id: str | None, admin: bool = False) -> bool:
    """Delete the file if this owner may see it; False when there is none. Batches keep their lines."""
    clause, args = _owner_clause(key_id, admin)
    cur = conn.execute(f"DELETE FROM files WHERE id = ?{clause}", (file_id, *args))  # noqa: S608
    return bool(cur.rowcount)


def _file(r: Sequence[Any]) -> FileRecord:
    return FileRecord(r[0], r[1], r[2], r[3], int(r[4]), float(r[5]), None if r[6] is None else float(r[6]))


# -- batches -----------------------------------------------------------------------------------------------


def create_batch(
    conn: StoreConn,
    *,
    key_id: str | None,
    endpoint: str,
    input_file_id: str,
    completion_window: str,
    lines: Sequence[BatchLineInput],
    metadata: Mapping[str, str] | None = None,
    expires_at: float | None = None,
    status: Literal["validating", "in_progress"] = "validating",
    admin: bool = False,
    now: float | None = None,
    batch_id: str | None = None,
) -> BatchRecord:
    """Create a batch and all its lines (pending) in one transaction; ``total`` = ``len(lines)``.

    The input file must exist and be this owner's (``admin`` may use any). A ``custom_id`` given twice is
    refused with both line numbers (OpenAI requires them unique in a batch). ``status="in_progress"`` starts it
    at once (the gateway validated the lines before calling); ``expires_at`` is when its window closes.
    """
    seen: dict[str, int] = {}
    for n, line in enumerate(lines):
        if line.custom_id in seen:
            raise BatchStoreError(
                f"custom_id {line.custom_id!r} appears on lines {seen[line.custom_id] + 1} and {n + 1}: "
                "each line of a batch needs its own custom_id"
            )
        seen[line.custom_id] = n
    at = _now(now)
    bid = batch_id or f"batch_{secrets.token_hex(12)}"
    meta = dict(metadata or {})
    with conn.transaction():
        if get_file(conn, input_file_id, key_id=key_id, admin=admin) is None:
            raise BatchStoreError(f"no file {input_file_id!r} (input_file_id) for this key")
        conn.execute(
            "INSERT INTO batches (id, key_id, endpoint, input_file_id, completion_window, status, created_at, "
            "expires_at, in_progress_at, total, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                bid,
                key_id,
                endpoint,
                input_file_id,
                completion_window,
                status,
                at,
                expires_at,
                at if status == "in_progress" else None,
                len(lines),
                json.dumps(meta, ensure_ascii=False),
            ),
        )
        if lines:
            conn.executemany(
                "INSERT INTO batch_lines (batch_id, line, custom_id, method, url, body) VALUES (?, ?, ?, ?, ?, ?)",
                [(bid, n, x.custom_id, x.method, x.url, x.body) for n, x in enumerate(lines)],
            )
        rec = get_batch(conn, bid, key_id=key_id, admin=True)
    assert rec is not None
    return rec


def get_batch(conn: StoreConn, batch_id: str, *, key_id: str | None, admin: bool = False) -> BatchRecord | None:
    """The batch ``batch_id`` if this owner may see it, else None."""
    clause, args = _owner_clause(key_id, admin)
    row = conn.execute(f"SELECT {_BATCH_COLS} FROM batches WHERE id = ?{clause}", (batch_id, *args)).fetchone()  # noqa: S608
    return _batch(row) if row else None


def list_batches(
    conn: StoreConn, *, key_id: str | None, admin: bool = False, limit: int = 20, after: str | None = None
) -> list[BatchRecord]:
    """This owner's batches, newest first (OpenAI's order); ``after`` (a batch id) continues past that batch."""
    clause, args = _owner_clause(key_id, admin)
    if after is not None:
        anchor = conn.execute("SELECT created_at, id FROM batches WHERE id = ?", (after,)).fetchone()
        if anchor is not None:
            clause += " AND (created_at < ? OR (created_at = ? AND id < ?))"
            args = (*args, anchor[0], anchor[0], anchor[1])
    rows = conn.execute(
        f"SELECT {_BATCH_COLS} FROM batches WHERE 1 = 1{clause} ORDER BY created_at DESC, id DESC LIMIT ?",  # noqa: S608
        (*args, limit),
    ).fetchall()
    return [_batch(r) for r in rows]


def active_batches(conn: StoreConn) -> list[BatchRecord]:
    """Every batch not yet in a final status, oldest first: what a replica resumes after a restart."""
    rows = conn.execute(
        f"SELECT {_BATCH_COLS} FROM batches WHERE status IN (?, ?, ?, ?) ORDER BY created_at, id",  # noqa: S608
        ACTIVE,
    ).fetchall()
    return [_batch(r) for r in rows]


def transition(
    conn: StoreConn,
    batch_id: str,
    to: BatchStatus,
    *,
    now: float | None = None,
    output_file_id: str | None = None,
    error_file_id: str | None = None,
    errors: Sequence[Mapping[str, Any]] | None = None,
    files: FileWriter | None = None,
) -> BatchRecord | None:
    """Move the batch to ``to`` and stamp ``{to}_at``, if it is in a status ``to`` may follow; else None.

    Compare-and-set: of several replicas moving a batch together, one gets the record and the rest None.
    ``finalizing`` needs every line settled (none pending or leased). ``failed``, ``expired`` and ``cancelled``
    settle the lines not yet done as ``cancelled`` (error code ``batch_failed`` / ``batch_expired`` /
    ``batch_cancelled``) in the same transaction, so a late completion of one is refused.
    ``output_file_id`` / ``error_file_id`` / ``errors`` are set when given. ``files`` (the executor's) writes the
    batch's output and error files in the same transaction, after its lines were settled, and returns their ids:
    nobody sees the batch in its new status without them.
    """
    if to not in _FROM:
        raise BatchStoreError(f"a batch cannot be moved to {to!r}; one of {', '.join(_FROM)}")
    with conn.transaction():
        rec = _transition(conn, batch_id, to, _now(now), output_file_id, error_file_id, errors)
        if rec is not None and files is not None:
            out, err = files(conn, rec)
            if out is not None or err is not None:
                conn.execute(
                    "UPDATE batches SET output_file_id = ?, error_file_id = ? WHERE id = ?", (out, err, batch_id)
                )
                rec = get_batch(conn, batch_id, key_id=None, admin=True)
        return rec


def _transition(
    conn: StoreConn,
    batch_id: str,
    to: str,
    at: float,
    output_file_id: str | None = None,
    error_file_id: str | None = None,
    errors: Sequence[Mapping[str, Any]] | None = None,
) -> BatchRecord | None:
    """:func:`transition` inside the caller's transaction."""
    froms = _FROM[to]
    sets = [f"status = ?, {to}_at = ?"]
    args: list[Any] = [to, at]
    for column, value in (("output_file_id", output_file_id), ("error_file_id", error_file_id)):
        if value is not None:
            sets.append(f"{column} = ?")
            args.append(value)
    if errors is not None:
        sets.append("errors = ?")
        args.append(json.dumps([dict(e) for e in errors], ensure_ascii=False))
    guard = ""
    if to == "finalizing":
        guard = " AND NOT EXISTS (SELECT 1 FROM batch_lines WHERE batch_id = ? AND state IN ('pending', 'leased'))"
    cur = conn.execute(
        f"UPDATE batches SET {', '.join(sets)} WHERE id = ? AND status IN ({', '.join('?' * len(froms))}){guard}",  # noqa: S608
        (*args, batch_id, *froms, *((batch_id,) if guard else ())),
    )
    if not cur.rowcount:
        return None
    if to in _LINE_END:
        err = json.dumps({"code": _LINE_END[to], "message": f"the batch was {to} before this line ran"})
        conn.execute(
            "UPDATE batch_lines SET state = 'cancelled', error = ?, done_at = ?, lease_owner = NULL, "
            "lease_expires = NULL WHERE batch_id = ? AND state IN ('pending', 'leased')",
            (err, at, batch_id),
        )
    return get_batch(conn, batch_id, key_id=None, admin=True)


def expire_overdue(conn: StoreConn, *, now: float | None = None, files: FileWriter | None = None) -> list[BatchRecord]:
    """Move every batch whose window closed (``expires_at <= now``) and that is still validating, in progress
    or finalizing to ``expired`` (its unfinished lines ``cancelled``, code ``batch_expired``); return those this
    call moved — of replicas sweeping together, each batch is moved by one."""
    at = _now(now)
    due = conn.execute(
        "SELECT id FROM batches WHERE expires_at IS NOT NULL AND expires_at <= ? "
        "AND status IN ('validating', 'in_progress', 'finalizing') ORDER BY expires_at, id",
        (at,),
    ).fetchall()
    moved = [transition(conn, bid, "expired", now=at, files=files) for (bid,) in due]
    return [b for b in moved if b is not None]


def cancel_batch(
    conn: StoreConn, batch_id: str, *, key_id: str | None, admin: bool = False, now: float | None = None
) -> BatchRecord:
    """Cancel a batch for its owner: ``cancelling``, and its pending lines ``cancelled`` (never leased again).

    Lines already leased may still complete; the executor moves the batch to ``cancelled``
    (:func:`transition`) once none is leased. Cancelling a batch already cancelling or cancelled returns it as
    it is; a batch in another final status (or finalizing) raises ``BatchStoreError`` saying which.
    """
    at = _now(now)
    with conn.transaction():
        rec = get_batch(conn, batch_id, key_id=key_id, admin=admin)
        if rec is None:
            raise BatchStoreError(f"no batch {batch_id!r} for this key")
        if rec.status in ("cancelling", "cancelled"):
            return rec
        moved = _transition(conn, batch_id, "cancelling", at)
        if moved is None:
            raise BatchStoreError(
                f"batch {batch_id!r} is {rec.status}: only a validating or in_progress batch can be cancelled"
            )
        conn.execute(
            "UPDATE batch_lines SET state = 'cancelled', error = ?, done_at = ? "
            "WHERE batch_id = ? AND state = 'pending'",
            (
                json.dumps({"code": "batch_cancelled", "message": "the batch was cancelled before this line ran"}),
                at,
                batch_id,
            ),
        )
        return moved


def _batch(r: Sequence[Any]) -> BatchRecord:
    def ts(v: Any) -> float | None:
        return None if v is None else float(v)

    return BatchRecord(
        id=r[0],
        key_id=r[1],
        endpoint=r[2],
        input_file_id=r[3],
        completion_window=r[4],
        status=r[5],
        created_at=float(r[6]),
        expires_at=ts(r[7]),
        in_progress_at=ts(r[8]),
        finalizing_at=ts(r[9]),
        completed_at=ts(r[10]),
        failed_at=ts(r[11]),
        expired_at=ts(r[12]),
        cancelling_at=ts(r[13]),
        cancelled_at=ts(r[14]),
        total=int(r[15]),
        completed=int(r[16]),
        failed=int(r[17]),
        output_file_id=r[18],
        error_file_id=r[19],
        errors=json.loads(r[20]) if r[20] else None,
        metadata=json.loads(r[21]) if r[21] else {},
        cost=float(r[22]),
    )
