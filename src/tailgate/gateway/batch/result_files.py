"""A finished batch's output and error files, as OpenAI writes them (docs/batch.md)."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import msgspec

from tailgate.ledger import batch_lines as line_store
from tailgate.ledger import batches as store
from tailgate.ledger.store import StoreConn
from tailgate.wire.batch import BatchRequestOutput

__all__ = ["output_line", "write_result_files"]


def write_result_files(conn: StoreConn, rec: store.BatchRecord) -> tuple[str | None, str | None]:
    """The batch's output file (lines answered 2xx) and error file (every other settled line), written inside
    the caller's transaction (``store.transition(files=…)``); their ids, None for an empty one (as OpenAI)."""
    ok: list[bytes] = []
    bad: list[bytes] = []
    after = -1
    while True:
        page = line_store.read_lines(conn, rec.id, after_line=after, limit=1000)
        if not page:
            break
        after = page[-1].line
        for line in page:
            if line.state in ("pending", "leased"):
                continue
            item = output_line(rec.id, line)
            (ok if item.ok else bad).append(msgspec.json.encode(item) + b"\n")
    expires = time.time() + 30 * 86400
    ids: list[str | None] = []
    for kind, lines in (("output", ok), ("error", bad)):
        ids.append(
            store.create_file(
                conn,
                key_id=rec.key_id,
                purpose="batch_output",
                filename=f"{rec.id}_{kind}.jsonl",
                content=b"".join(lines),
                expires_at=expires,
            ).id
            if lines
            else None
        )
    return ids[0], ids[1]


def output_line(batch_id: str, line: store.LineRecord) -> BatchRequestOutput:
    """A settled line as OpenAI writes it to the output or error file."""
    from tailgate.wire.batch import BatchLineError, BatchResponse

    rid = hashlib.sha256(f"{batch_id}:{line.line}".encode()).hexdigest()[:24]
    if line.response_status is not None:
        try:
            body: Any = json.loads(line.result) if line.result else None
        except json.JSONDecodeError:
            body = line.result
        return BatchRequestOutput(
            id=f"batch_req_{rid}",
            custom_id=line.custom_id,
            response=BatchResponse(status_code=line.response_status, request_id=line.request_id or "", body=body),
        )
    err = json.loads(line.error) if line.error else {"code": "unknown", "message": "the line has no answer"}
    return BatchRequestOutput(
        id=f"batch_req_{rid}",
        custom_id=line.custom_id,
        error=BatchLineError(code=str(err.get("code")), message=str(err.get("message"))),
    )
