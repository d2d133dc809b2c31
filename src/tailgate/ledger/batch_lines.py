"""A batch's lines in the store: leased by replicas with expiry, completed and billed exactly once, read back.

The model is in :mod:`tailgate.ledger.batches` (docs/batch.md); this module is the part replicas run while a batch
is in progress.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from tailgate.ledger.batches import (
    _LINE_COLS,
    LINE_STATES,
    BatchStoreError,
    Completion,
    LeasedLine,
    LineRecord,
    _now,
    list_batches,
)
from tailgate.ledger.row import COLUMNS, LedgerRow
from tailgate.ledger.store import StoreConn

__all__ = [
    "batch_summaries",
    "complete_line",
    "forget_job",
    "lease_lines",
    "line_counts",
    "read_lines",
    "record_job",
    "release_lines",
    "renew_leases",
]

log = logging.getLogger("tailgate.batches")

# -- leases and completion --------------------------------------------------------------------------

_LEASABLE = "(l.state = 'pending' OR (l.state = 'leased' AND l.lease_expires <= ?))"


def lease_lines(
    conn: StoreConn,
    *,
    owner: str,
    limit: int,
    lease_s: float,
    batch_id: str | None = None,
    now: float | None = None,
    lines: tuple[int, int | None] | None = None,
) -> list[LeasedLine]:
    """Lease up to ``limit`` lines of in-progress batches (of ``batch_id`` only, when given) to ``owner`` until
    ``now + lease_s``: pending lines, and leased ones whose lease expired (a dead replica's). Oldest batch first,
    in line order; ``lines`` = ``(first, end)`` takes only lines ``first <= line < end`` (``end`` None: to the
    last). One statement: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, ``UPDATE … RETURNING`` on SQLite."""
    if limit < 1:
        return []
    at = _now(now)
    until = at + lease_s
    only = " AND l.batch_id = ?" if batch_id is not None else ""
    pick_args: tuple[Any, ...] = (at, *((batch_id,) if batch_id is not None else ()))
    if lines is not None:
        only += " AND l.line >= ?" + (" AND l.line < ?" if lines[1] is not None else "")
        pick_args = (*pick_args, *(x for x in lines if x is not None))
    pick_args = (*pick_args, limit)
    pick = (
        "SELECT {cols} FROM batch_lines l JOIN batches b ON b.id = l.batch_id "  # noqa: S608
        f"WHERE b.status = 'in_progress' AND {_LEASABLE}{only} ORDER BY b.created_at, l.batch_id, l.line LIMIT ?"
    )
    returning = (
        "RETURNING batch_id, line, custom_id, method, url, body, attempts, lease_expires, job_provider, job_file, "
        "job_id"
    )
    if conn.dialect == "postgres":
        # A materialised CTE: the pick runs once (a subquery in FROM may be rescanned per row and, skipping
        # locked rows, return others each time: more than ``limit`` lines).
        sql = (
            f"WITH pick AS MATERIALIZED ({pick.format(cols='l.batch_id, l.line')} FOR UPDATE OF l SKIP LOCKED) "  # noqa: S608
            "UPDATE batch_lines AS t SET state = 'leased', lease_owner = ?, lease_expires = ?, "
            "attempts = t.attempts + 1 FROM pick WHERE t.batch_id = pick.batch_id AND t.line = pick.line "
            "RETURNING t.batch_id, t.line, t.custom_id, t.method, t.url, t.body, t.attempts, t.lease_expires, "
            "t.job_provider, t.job_file, t.job_id"
        )
        args: tuple[Any, ...] = (*pick_args, owner, until)
    else:
        sql = (
            "UPDATE batch_lines SET state = 'leased', lease_owner = ?, lease_expires = ?, attempts = attempts + 1 "  # noqa: S608
            f"WHERE rowid IN ({pick.format(cols='l.rowid')}) {returning}"
        )
        args = (owner, until, *pick_args)
    rows = conn.execute(sql, args).fetchall()
    out = [LeasedLine(r[0], int(r[1]), r[2], r[3], r[4], r[5], int(r[6]), float(r[7]), *r[8:11]) for r in rows]
    out.sort(key=lambda x: (x.batch_id, x.line))
    return out


def renew_leases(
    conn: StoreConn, *, owner: str, lease_s: float, batch_id: str | None = None, now: float | None = None
) -> int:
    """Extend every lease ``owner`` still holds (unexpired) to ``now + lease_s``; return how many (a heartbeat
    for lines that run longer than a lease)."""
    at = _now(now)
    only = " AND batch_id = ?" if batch_id is not None else ""
    cur = conn.execute(
        "UPDATE batch_lines SET lease_expires = ? WHERE state = 'leased' AND lease_owner = ? "  # noqa: S608
        f"AND lease_expires > ?{only}",
        (at + lease_s, owner, at, *((batch_id,) if batch_id is not None else ())),
    )
    return int(cur.rowcount)


def release_lines(
    conn: StoreConn, *, owner: str, batch_id: str | None = None, custom_ids: Sequence[str] | None = None
) -> int:
    """Give ``owner``'s leased lines back as pending (a replica draining, or a line to retry later); return how
    many. ``custom_ids`` (with ``batch_id``) releases only those lines."""
    clause: str = ""
    args: tuple[Any, ...] = ()
    if batch_id is not None:
        clause, args = " AND batch_id = ?", (batch_id,)
    if custom_ids is not None:
        if batch_id is None:
            raise BatchStoreError("release_lines: custom_ids needs batch_id")
        if not custom_ids:
            return 0
        clause += f" AND custom_id IN ({', '.join('?' * len(custom_ids))})"
        args = (*args, *custom_ids)
    cur = conn.execute(
        "UPDATE batch_lines SET state = 'pending', lease_owner = NULL, lease_expires = NULL "  # noqa: S608
        f"WHERE state = 'leased' AND lease_owner = ?{clause}",
        (owner, *args),
    )
    return int(cur.rowcount)


def record_job(
    conn: StoreConn,
    batch_id: str,
    custom_ids: Sequence[str],
    *,
    owner: str,
    provider: str,
    file_id: str,
    job_id: str | None = None,
) -> int:
    """Record the provider job ``owner``'s leased lines were sent in: the provider, its input file (after the
    upload) and its batch id (after the create, before the first poll). Return how many lines were marked (fewer
    than ``custom_ids``: a lease was lost meanwhile). A replica taking these lines over resumes the job."""
    if not custom_ids:
        return 0
    marks = ", ".join("?" * len(custom_ids))
    cur = conn.execute(
        "UPDATE batch_lines SET job_provider = ?, job_file = ?, job_id = ? "  # noqa: S608
        f"WHERE batch_id = ? AND state = 'leased' AND lease_owner = ? AND custom_id IN ({marks})",
        (provider, file_id, job_id, batch_id, owner, *custom_ids),
    )
    return int(cur.rowcount)


def forget_job(conn: StoreConn, batch_id: str, custom_ids: Sequence[str]) -> int:
    """Clear the provider job of lines not yet settled (the provider does not know the job: send them again)."""
    if not custom_ids:
        return 0
    cur = conn.execute(
        "UPDATE batch_lines SET job_provider = NULL, job_file = NULL, job_id = NULL "  # noqa: S608
        f"WHERE batch_id = ? AND state IN ('pending', 'leased') AND custom_id IN ({', '.join('?' * len(custom_ids))})",
        (batch_id, *custom_ids),
    )
    return int(cur.rowcount)


_REQUEST_COLS = ", ".join(COLUMNS)


def complete_line(
    conn: StoreConn,
    batch_id: str,
    custom_id: str,
    *,
    by: str,
    ok: bool,
    response_status: int | None = None,
    result: str | None = None,
    error: Mapping[str, Any] | None = None,
    request_id: str | None = None,
    row: LedgerRow | None = None,
    now: float | None = None,
) -> Completion:
    """Settle line ``custom_id`` of ``batch_id`` exactly once: ``done`` (``ok``) or ``failed``.

    Accepted only while the line is pending or leased — whoever holds the lease, expired or not: the first
    result in wins. In the same transaction the batch's ``completed`` or ``failed`` count grows by one, its cost
    by ``row.cost``, and ``row`` (the line's ledger row: lane, provider, price tier, cost) is inserted into
    ``requests`` — so a line is billed exactly when it is settled, and never twice. A completion that comes
    after the line was settled (or cancelled) changes nothing and returns ``accepted=False`` with who settled
    it; it is logged. ``result`` is the response body's JSON text; ``error`` e.g. ``{"code", "message"}``.
    Raises ``BatchStoreError`` for a line that does not exist.
    """
    at = _now(now)
    state = "done" if ok else "failed"
    cost = row.cost if row is not None else None
    with conn.transaction():
        got = conn.execute(
            "UPDATE batch_lines SET state = ?, response_status = ?, result = ?, error = ?, request_id = ?, lane = ?, "
            "provider = ?, price_tier = ?, cost = ?, done_at = ?, done_by = ?, lease_owner = NULL, "
            "lease_expires = NULL WHERE batch_id = ? AND custom_id = ? AND state IN ('pending', 'leased') "
            "RETURNING line",
            (
                state,
                response_status,
                result,
                json.dumps(dict(error), ensure_ascii=False) if error is not None else None,
                request_id if request_id is not None else (row.request_id if row is not None else None),
                row.lane if row is not None else None,
                row.provider if row is not None else None,
                row.price_tier if row is not None else None,
                cost,
                at,
                by,
                batch_id,
                custom_id,
            ),
        ).fetchone()
        if got is not None:
            column = "completed" if ok else "failed"
            conn.execute(
                f"UPDATE batches SET {column} = {column} + 1, cost = cost + ? WHERE id = ?",  # noqa: S608
                (cost or 0.0, batch_id),
            )
            if row is not None:
                _insert_request(conn, row, batch_id, int(got[0]))
            return Completion(True, batch_id, custom_id, int(got[0]), state, by, at)
        now_row = conn.execute(
            "SELECT line, state, done_by, done_at FROM batch_lines WHERE batch_id = ? AND custom_id = ?",
            (batch_id, custom_id),
        ).fetchone()
    if now_row is None:
        raise BatchStoreError(f"batch {batch_id!r} has no line with custom_id {custom_id!r}")
    log.warning(
        "batch %s line %r: a second completion (by %s) refused: already %s by %s; its result is discarded, unbilled",
        batch_id,
        custom_id,
        by,
        now_row[1],
        now_row[2],
    )
    done_at = None if now_row[3] is None else float(now_row[3])
    return Completion(False, batch_id, custom_id, int(now_row[0]), now_row[1], now_row[2], done_at)


def _insert_request(conn: StoreConn, row: LedgerRow, batch_id: str, line: int) -> None:
    # Booleans as 0 / 1: both stores keep them in integer columns (PostgreSQL's SMALLINT takes no boolean).
    values = [int(v) if isinstance(v, bool) else v for v in (getattr(row, c) for c in COLUMNS)]
    if conn.dialect == "postgres":
        # origin / origin_id: UNIQUE in PostgreSQL's requests, a second guard against billing a line twice.
        conn.execute(
            f"INSERT INTO requests ({_REQUEST_COLS}, origin, origin_id) VALUES ({', '.join('?' * (len(COLUMNS) + 2))})",  # noqa: S608
            (*values, f"batch:{batch_id}", line),
        )
    else:
        conn.execute(
            f"INSERT INTO requests ({_REQUEST_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})",  # noqa: S608
            values,
        )


def read_lines(
    conn: StoreConn,
    batch_id: str,
    *,
    states: Sequence[str] | None = None,
    after_line: int = -1,
    limit: int = 1000,
) -> list[LineRecord]:
    """Lines of a batch in line order (those in ``states`` when given), from ``after_line + 1``, at most
    ``limit``: the executor writes the output (``done``) and error (``failed``, ``cancelled``) files page by page."""
    clause: str = ""
    args: tuple[Any, ...] = ()
    if states is not None:
        clause, args = f" AND state IN ({', '.join('?' * len(states))})", tuple(states)
    rows = conn.execute(
        f"SELECT {_LINE_COLS} FROM batch_lines WHERE batch_id = ? AND line > ?{clause} ORDER BY line LIMIT ?",  # noqa: S608
        (batch_id, after_line, *args, limit),
    ).fetchall()
    return [
        LineRecord(
            r[0],
            int(r[1]),
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            r[7],
            None if r[8] is None else float(r[8]),
            int(r[9]),
            None if r[10] is None else int(r[10]),
            r[11],
            r[12],
            r[13],
            r[14],
            r[15],
            r[16],
            None if r[17] is None else float(r[17]),
            None if r[18] is None else float(r[18]),
            r[19],
        )
        for r in rows
    ]


def line_counts(conn: StoreConn, batch_id: str, *, now: float | None = None) -> dict[str, int]:
    """How many lines of the batch are in each state (every state present, 0 when none), plus ``leased_live``:
    of the leased, those whose lease has not expired (a replica is working on them)."""
    at = _now(now)
    out: dict[str, int] = dict.fromkeys(LINE_STATES, 0)
    for state, n in conn.execute(
        "SELECT state, COUNT(*) FROM batch_lines WHERE batch_id = ? GROUP BY state", (batch_id,)
    ).fetchall():
        out[state] = int(n)
    (live,) = conn.execute(
        "SELECT COUNT(*) FROM batch_lines WHERE batch_id = ? AND state = 'leased' AND lease_expires > ?",
        (batch_id, at),
    ).fetchone()
    out["leased_live"] = int(live)
    return out


def batch_summaries(conn: StoreConn, *, limit: int = 50) -> list[dict[str, Any]]:
    """The newest ``limit`` batches of every key with what each has cost so far and how (the dashboard's batches
    panel): id, key, endpoint, status, created, ``request_counts``, ``cost`` (the settled lines' sum), and ``tiers``:
    per lane and price tier the lines settled and their cost, dearest first."""
    found = list_batches(conn, key_id=None, admin=True, limit=limit)
    if not found:
        return []
    marks = ", ".join("?" * len(found))
    tiers: dict[str, list[dict[str, Any]]] = {}
    for batch_id, lane, tier, lines, cost in conn.execute(
        "SELECT batch_id, lane, COALESCE(price_tier, ''), COUNT(*), SUM(cost) FROM batch_lines "  # noqa: S608
        f"WHERE batch_id IN ({marks}) AND lane IS NOT NULL GROUP BY batch_id, lane, COALESCE(price_tier, '')",
        tuple(b.id for b in found),
    ).fetchall():
        tiers.setdefault(batch_id, []).append(
            {"lane": lane, "price_tier": tier or None, "lines": int(lines), "cost": float(cost or 0.0)}
        )
    return [
        {
            "id": b.id,
            "key_id": b.key_id,
            "endpoint": b.endpoint,
            "status": b.status,
            "created_at": b.created_at,
            "request_counts": b.request_counts,
            "cost": b.cost,
            "tiers": sorted(tiers.get(b.id, []), key=lambda t: (-t["cost"], t["lane"], t["price_tier"] or "")),
        }
        for b in found
    ]
