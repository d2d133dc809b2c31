"""One batch run by a fleet that loses a replica and restarts another, for tests/fleet/test_fleet_batch.py and
benchmarks/bench_fleet_batch.py: three real ``tailgate serve`` replicas (``fleet_store.Replica``) on one
PostgreSQL (and optionally one Redis) in front of a simulated provider, the official ``openai`` SDK as the client.

:func:`run_kill_and_restart` submits a batch (``files.create(purpose="batch")`` + ``batches.create``), SIGKILLs
replica A while it holds leases once a quarter of the lines are settled, stops replica B (SIGTERM) at half and
starts it again on the same config, polls the batch to its end and reads back everything a verdict needs: the
output and error files, who settled each line, the batch's ledger rows in PostgreSQL and the simulator's truth."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import yaml
from openai import AsyncOpenAI

from fleet_store import Replica, fleet_config
from sim_truth import truth

__all__ = [
    "FleetBatchRun",
    "batch_config",
    "batch_jsonl",
    "done_by",
    "leased",
    "ledger",
    "owner_pid",
    "run_kill_and_restart",
    "until",
]


def batch_config(
    tmp: Path,
    i: int,
    sim_url: str,
    pg_url: str,
    redis_url: str | None,
    ns: str,
    concurrency: int,
    *,
    lease_s: float = 2.0,
    batch_api: bool = False,
    job_lines: int = 5000,
) -> Path:
    """Replica ``i``'s config (``fleet_store.fleet_config``) with a fast executor and a short ``batch.lease``."""
    path = fleet_config(tmp, i, sim_url, pg_url, redis_url=redis_url, namespace=ns)
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    data["routing"] = {"probes": {"enabled": False}}
    data["batch"] = {
        "poll_interval": 0.1,
        "lease": lease_s,
        "concurrency": concurrency,
        "provider_poll_interval": 0.2,
        "provider_job_lines": job_lines,
    }
    if batch_api:
        data["providers"]["p"]["batch_api"] = True
        data["batch"]["lane_share"] = 0.0  # every line in the provider's jobs (the split: test_gateway_batch_split)
        data["providers"]["p"]["price"]["batch"] = {"ratio": 0.5}
    path.write_text(yaml.safe_dump(data))
    return path


def batch_jsonl(n: int) -> bytes:
    return b"".join(
        json.dumps(
            {
                "custom_id": f"line-{i:05d}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "chat", "messages": [{"role": "user", "content": f"summarise {i}"}], "max_tokens": 8},
            }
        ).encode()
        + b"\n"
        for i in range(n)
    )


def done_by(pg_url: str, batch_id: str) -> Counter[str]:
    """Settled lines per replica (the executor's owner name)."""
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT done_by FROM batch_lines WHERE batch_id = %s AND state IN ('done', 'failed')", (batch_id,)
        ).fetchall()
    return Counter(r[0] for r in rows)


def leased(pg_url: str, batch_id: str) -> dict[str, list[str]]:
    """Owner → the custom_ids it holds leased (live or expired)."""
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT lease_owner, custom_id FROM batch_lines WHERE batch_id = %s AND state = 'leased'", (batch_id,)
        ).fetchall()
    out: dict[str, list[str]] = {}
    for owner, custom_id in rows:
        out.setdefault(owner, []).append(custom_id)
    return out


def owner_pid(owner: str) -> int:
    return int(owner.split(":")[-2])  # the executor's owner: host:pid:token


def ledger(pg_url: str, batch_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(the batch's rows: request id, line, status, prompt and output tokens, cost, lane; every other batch-lane
    row: request id, cost)."""
    with psycopg.connect(pg_url) as conn:
        billed = conn.execute(
            "SELECT request_id, origin_id, status, prompt_tokens, output_tokens, cost, lane FROM requests "
            "WHERE origin = %s",
            (f"batch:{batch_id}",),
        ).fetchall()
        other = conn.execute(
            "SELECT request_id, cost FROM requests WHERE lane = 'batch-lane' AND origin IS DISTINCT FROM %s",
            (f"batch:{batch_id}",),
        ).fetchall()
    return billed, other


async def until(check: Callable[[], Awaitable[bool]], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s:g} s: {what}")
        await asyncio.sleep(0.02)


@dataclass
class FleetBatchRun:
    """What :func:`run_kill_and_restart` saw."""

    lines: int
    status: str = ""
    elapsed_s: float = 0.0
    completed: int = 0
    answered: Counter[str] = field(default_factory=Counter)
    """custom_id → times it is in the output and error files."""
    error_lines: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    """``a`` (killed), ``b`` (stopped), ``b2`` (B again), ``c`` → process id."""
    owners: Counter[str] = field(default_factory=Counter)
    held_by_a: list[str] = field(default_factory=list)
    """The lines A held leased when it died."""
    retaken: list[tuple[str, int]] = field(default_factory=list)
    """(settled by, attempts) of each line A died holding."""
    b_held_after_stop: int = 0
    billed: list[tuple[Any, ...]] = field(default_factory=list)
    other: list[tuple[Any, ...]] = field(default_factory=list)
    truth_by_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    truth_ids_seen_twice: int = 0


async def run_kill_and_restart(
    tmp: Path,
    sim_url: str,
    pg_url: str,
    redis_url: str | None,
    *,
    lines: int,
    concurrency: int = 4,
    lease_s: float = 2.0,
    ns: str = "fleet-batch",
    within_s: float = 60.0,
) -> FleetBatchRun:
    run = FleetBatchRun(lines)
    configs = [batch_config(tmp, i, sim_url, pg_url, redis_url, ns, concurrency, lease_s=lease_s) for i in range(3)]
    replicas = [Replica(c, tmp / f"replica{i}.log", drain_timeout=5.0) for i, c in enumerate(configs)]
    a, b, c = replicas
    run.pids = {"a": a.proc.pid, "b": b.proc.pid, "c": c.proc.pid}
    client: AsyncOpenAI | None = None
    try:
        await asyncio.gather(*(r.ready() for r in replicas))
        client = AsyncOpenAI(base_url=c.url + "/v1", api_key="sk-unused", max_retries=0, timeout=60)
        started = time.monotonic()
        upload = await client.files.create(file=("nightly.jsonl", batch_jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )

        async def settled(n: int) -> bool:
            return sum((await asyncio.to_thread(done_by, pg_url, batch.id)).values()) >= n

        async def a_holds_a_lease() -> bool:
            return any(owner_pid(o) == a.proc.pid for o in await asyncio.to_thread(leased, pg_url, batch.id))

        await until(lambda: settled(lines // 4), within_s, "a quarter of the lines settled")
        await until(a_holds_a_lease, 10, "A holds a lease")
        await asyncio.to_thread(a.stop, signal.SIGKILL)  # A dies holding leases: they expire after lease_s
        held = await asyncio.to_thread(leased, pg_url, batch.id)
        run.held_by_a = [cid for o, ids in held.items() for cid in ids if owner_pid(o) == a.proc.pid]
        await until(lambda: settled(lines // 2), within_s, "half of the lines settled")
        await asyncio.to_thread(b.stop)  # B stops gracefully: it gives its lines back …
        held = await asyncio.to_thread(leased, pg_url, batch.id)
        run.b_held_after_stop = sum(len(ids) for o, ids in held.items() if owner_pid(o) == b.proc.pid)
        again = Replica(configs[1], tmp / "replica1-again.log", drain_timeout=5.0)
        replicas.append(again)
        run.pids["b2"] = again.proc.pid
        await again.ready()  # … and comes back on the same config

        deadline = time.monotonic() + within_s
        while (batch := await client.batches.retrieve(batch.id)).status not in ("completed", "failed", "expired"):
            if time.monotonic() > deadline:
                raise AssertionError(f"batch still {batch.status} after {within_s:g} s: {batch.request_counts}")
            await asyncio.sleep(0.2)
        run.elapsed_s = time.monotonic() - started
        run.status = batch.status
        run.completed = batch.request_counts.completed if batch.request_counts is not None else 0
        out = (await client.files.content(batch.output_file_id)).text.splitlines() if batch.output_file_id else []
        err = (await client.files.content(batch.error_file_id)).text.splitlines() if batch.error_file_id else []
        run.answered = Counter(json.loads(x)["custom_id"] for x in out + err)
        run.error_lines = len(err)
        run.owners = await asyncio.to_thread(done_by, pg_url, batch.id)
        with psycopg.connect(pg_url) as conn:
            run.retaken = [
                (str(r[0]), int(r[1]))
                for r in conn.execute(
                    "SELECT done_by, attempts FROM batch_lines WHERE batch_id = %s AND custom_id = ANY(%s)",
                    (batch.id, run.held_by_a),
                ).fetchall()
            ]
        run.billed, run.other = await asyncio.to_thread(ledger, pg_url, batch.id)
        records = [rec for rec in await truth(sim_url) if rec["client_request_id"]]
        seen = Counter(rec["client_request_id"] for rec in records)
        run.truth_ids_seen_twice = sum(1 for n in seen.values() if n > 1)
        run.truth_by_id = {rec["client_request_id"]: rec for rec in records}
        return run
    finally:
        if client is not None:
            await client.close()
        for r in replicas:
            await asyncio.to_thread(r.stop)
