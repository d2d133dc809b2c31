"""A scenario's batch, sent as a client sends one: the input file uploaded to the gateway's ``POST /v1/files``, the
batch created with ``POST /v1/batches``, polled with ``GET /v1/batches/{id}`` until it ends, its output and error
files read back (docs/scenarios.md, "A batch beside the load").

Beside the client's view the runner also reads, from the gateway's store, how many of the batch's lines are still
**pending** (not yet taken by a path: the batch lane or a provider job): the time the batch had lines waiting is
the span the lane's use of a provider's spare budget is judged over (``tailgate.scenario.batch_analysis``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tailgate.bench.workload import Workload
from tailgate.ledger import batch_lines
from tailgate.ledger.store import open_store
from tailgate.scenario.config import BatchLoad
from tailgate.wire.batch import TERMINAL_STATUSES

__all__ = ["BatchRecord", "build_input", "drive_batch"]

log = logging.getLogger("tailgate.scenario")

POLL_S = 0.25
"""How often the batch object and the store's pending count are read."""
FINAL = TERMINAL_STATUSES


@dataclass
class BatchRecord:
    """What the client saw of its batch, and when (seconds after the load started)."""

    lines: int
    endpoint: str
    alias: str
    completion_window: str
    window_s: float
    submitted_s: float | None = None
    batch_id: str | None = None
    error: str | None = None
    """Why the batch could not be submitted or read (the gateway's answer)."""
    status: str | None = None
    created_at: int | None = None
    ended_at: int | None = None
    """The batch object's ``completed_at`` / ``failed_at`` / ``expired_at`` / ``cancelled_at`` (Unix seconds)."""
    ended_s: float | None = None
    """When the client first saw it final."""
    request_counts: dict[str, int] = field(default_factory=dict)
    reported_cost: float | None = None
    """The batch object's ``tailgate.cost``."""
    output: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    progress: list[tuple[float, int, int, int]] = field(default_factory=list)
    """(t, completed, failed, pending) per poll."""
    pending_until_s: float | None = None
    """The last poll that saw a line pending, plus one poll (None: never saw one)."""
    cancelled_by_runner: bool = False


def build_input(batch: BatchLoad, alias: str, seed: int) -> bytes:
    """The JSONL input file: ``lines`` requests to ``endpoint``, prompts drawn as the load's (seeded)."""
    prompts = Workload(seed=seed + 41)
    out = []
    for i in range(1, batch.lines + 1):
        text = prompts.synthetic_prompt(batch.input_tokens)
        body: dict[str, Any] = {"model": alias}
        if batch.endpoint == "/v1/chat/completions":
            body |= {"messages": [{"role": "user", "content": text}], "max_tokens": batch.max_tokens}
        elif batch.endpoint == "/v1/completions":
            body |= {"prompt": text, "max_tokens": batch.max_tokens}
        else:
            body["input"] = text
        line = {"custom_id": f"line-{i}", "method": "POST", "url": batch.endpoint, "body": body}
        out.append(json.dumps(line, separators=(",", ":")).encode())
    return b"\n".join(out) + b"\n"


async def _json(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    data = await resp.read()
    if resp.status >= 400:
        raise RuntimeError(f"HTTP {resp.status}: {data[:300].decode('utf-8', 'replace')}")
    out = json.loads(data)
    if not isinstance(out, dict):
        raise RuntimeError(f"HTTP {resp.status}: not a JSON object")
    return out


async def _file_lines(http: aiohttp.ClientSession, base: str, file_id: object) -> list[dict[str, Any]]:
    if not isinstance(file_id, str):
        return []
    async with http.get(f"{base}/files/{file_id}/content") as resp:
        data = await resp.read()
        if resp.status >= 400:
            raise RuntimeError(f"HTTP {resp.status} reading {file_id}")
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def _pending(store: Path, batch_id: str) -> int:
    with open_store(store) as conn:
        return int(batch_lines.line_counts(conn, batch_id).get("pending", 0))


async def drive_batch(
    record: BatchRecord,
    payload: bytes,
    *,
    base_url: str,
    api_key: str,
    store: Path,
    submit_at: float,
    t0: float,
    load_done: asyncio.Event,
    wait_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Submit at ``t0 + submit_at``, poll until the batch is final (or ``wait_s`` after ``load_done``: then cancel
    it), read its files. Fills ``record``; never raises for the gateway's answers (``record.error`` says)."""
    base = base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"}
    async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=120)) as http:
        delay = t0 + submit_at - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        record.submitted_s = clock() - t0
        try:
            form = aiohttp.FormData()
            form.add_field("purpose", "batch")
            form.add_field("file", payload, filename="scenario-batch.jsonl", content_type="application/jsonl")
            async with http.post(f"{base}/files", data=form) as resp:
                uploaded = await _json(resp)
            create = {
                "input_file_id": uploaded["id"],
                "endpoint": record.endpoint,
                "completion_window": record.completion_window,
                "metadata": {"scenario": "batch"},
            }
            async with http.post(f"{base}/batches", json=create) as resp:
                obj = await _json(resp)
        except (aiohttp.ClientError, RuntimeError, KeyError, TimeoutError) as exc:
            record.error = f"submitting the batch failed: {exc}"
            log.warning("scenario batch: %s", record.error)
            return
        record.batch_id = str(obj["id"])
        record.created_at = obj.get("created_at")
        deadline: float | None = None
        while True:
            status = str(obj.get("status"))
            record.status = status
            counts = obj.get("request_counts") or {}
            record.request_counts = {k: int(v) for k, v in counts.items() if isinstance(v, int)}
            now = clock() - t0
            pending = await asyncio.to_thread(_pending, store, record.batch_id)
            if pending > 0:
                record.pending_until_s = now + POLL_S
            record.progress.append(
                (
                    round(now, 3),
                    record.request_counts.get("completed", 0),
                    record.request_counts.get("failed", 0),
                    pending,
                )
            )
            if status in FINAL:
                record.ended_s = now
                break
            if deadline is None and load_done.is_set():
                deadline = clock() + wait_s
            if deadline is not None and clock() > deadline and not record.cancelled_by_runner:
                record.cancelled_by_runner = True
                log.warning("scenario batch %s: not done %g s after the load; cancelling it", record.batch_id, wait_s)
                async with http.post(f"{base}/batches/{record.batch_id}/cancel") as resp:
                    await resp.read()
                deadline = clock() + 30.0  # the lines already running end
            elif deadline is not None and record.cancelled_by_runner and clock() > deadline:
                record.error = f"the batch was still {status} after the runner cancelled it"
                break
            await asyncio.sleep(POLL_S)
            try:
                async with http.get(f"{base}/batches/{record.batch_id}") as resp:
                    obj = await _json(resp)
            except (aiohttp.ClientError, RuntimeError, TimeoutError) as exc:
                record.error = f"reading the batch failed: {exc}"
                return
        ended = [obj.get(k) for k in ("completed_at", "failed_at", "expired_at", "cancelled_at")]
        record.ended_at = next((int(v) for v in ended if isinstance(v, int)), None)
        extra = obj.get("tailgate") or {}
        cost = extra.get("cost") if isinstance(extra, dict) else None
        record.reported_cost = float(cost) if isinstance(cost, (int, float)) else None
        try:
            record.output = await _file_lines(http, base, obj.get("output_file_id"))
            record.errors = await _file_lines(http, base, obj.get("error_file_id"))
        except (aiohttp.ClientError, RuntimeError, TimeoutError) as exc:
            record.error = f"reading the batch's files failed: {exc}"
