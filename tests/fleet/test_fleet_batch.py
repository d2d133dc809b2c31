"""One batch run by a fleet that loses a replica and restarts another (issue 41's fleet must-show).

Three real ``tailgate serve`` replicas on one real redis-server and one real PostgreSQL, a simulated provider in
the test's event loop, the official ``openai`` SDK as the client: ``files.create(purpose="batch")`` and
``batches.create``; mid-batch replica A is SIGKILLed (its leases expire after ``batch.lease``, 2 s here, and the
others take its lines) and replica B is stopped gracefully and started again (it gives its lines back at once).
The output and error files answer every ``custom_id`` exactly once; every ledger row of the batch in PostgreSQL
matches the simulator's truth by request id, one to one; no line is billed twice.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
import yaml
from openai import AsyncOpenAI

from conftest import SimFactory
from fleet_store import Replica, fleet_config
from pg_cluster import PostgresCluster
from sim_truth import truth
from tailgate.state.server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

LINES = 360
LEASE_S = 2.0


def _config(
    tmp: Path,
    i: int,
    sim_url: str,
    pg_url: str,
    redis_url: str | None,
    ns: str,
    concurrency: int,
    *,
    batch_api: bool = False,
    job_lines: int = 5000,
) -> Path:
    path = fleet_config(tmp, i, sim_url, pg_url, redis_url=redis_url, namespace=ns)
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    data["routing"] = {"probes": {"enabled": False}}
    data["batch"] = {
        "poll_interval": 0.1,
        "lease": LEASE_S,
        "concurrency": concurrency,
        "provider_poll_interval": 0.2,
        "provider_job_lines": job_lines,
    }
    if batch_api:
        data["providers"]["p"]["batch_api"] = True
        data["providers"]["p"]["price"]["batch"] = {"ratio": 0.5}
    path.write_text(yaml.safe_dump(data))
    return path


def _jsonl(n: int) -> bytes:
    return b"".join(
        json.dumps(
            {
                "custom_id": f"line-{i:04d}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "chat", "messages": [{"role": "user", "content": f"summarise {i}"}], "max_tokens": 8},
            }
        ).encode()
        + b"\n"
        for i in range(n)
    )


def _done_by(pg_url: str, batch_id: str) -> Counter[str]:
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT done_by FROM batch_lines WHERE batch_id = %s AND state IN ('done', 'failed')", (batch_id,)
        ).fetchall()
    return Counter(r[0] for r in rows)


def _leased(pg_url: str, batch_id: str) -> dict[str, list[str]]:
    """Owner → the custom_ids it holds leased (live or expired)."""
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT lease_owner, custom_id FROM batch_lines WHERE batch_id = %s AND state = 'leased'", (batch_id,)
        ).fetchall()
    out: dict[str, list[str]] = {}
    for owner, custom_id in rows:
        out.setdefault(owner, []).append(custom_id)
    return out


async def _until(check: Callable[[], Awaitable[bool]], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not await check():
        assert time.monotonic() < deadline, f"not within {within_s:g} s: {what}"
        await asyncio.sleep(0.02)


def _pid(owner: str) -> int:
    return int(owner.split(":")[-2])  # the executor's owner: host:pid:token


def _ledger(pg_url: str, batch_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(the batch's rows: request id, line, status, tokens, cost; every other batch-lane row: request id, cost)."""
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


async def test_a_fleet_losing_one_replica_and_restarting_another_answers_and_bills_each_line_once(
    tmp_path: Path, sim: SimFactory, pg_cluster: PostgresCluster, redis_server: RedisServer
) -> None:
    pg_url = pg_cluster.fresh_database(f"fleet_batch_{uuid.uuid4().hex[:8]}")
    ns = f"fb{uuid.uuid4().hex[:8]}"
    provider = await sim("instant", models=("m",), engine={"step_ms": 15.0})  # ~0.15 s a line: a batch of ~8 s
    concurrency = 4
    configs = [_config(tmp_path, i, provider.url, pg_url, redis_server.url, ns, concurrency) for i in range(3)]
    replicas = [Replica(c, tmp_path / f"replica{i}.log", drain_timeout=5.0) for i, c in enumerate(configs)]
    restarted: Replica | None = None
    try:
        await asyncio.gather(*(r.ready() for r in replicas))
        started = time.monotonic()
        client = AsyncOpenAI(base_url=replicas[2].url + "/v1", api_key="sk-unused", max_retries=0, timeout=20)
        upload = await client.files.create(file=("nightly.jsonl", _jsonl(LINES)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        assert batch.status == "in_progress"

        async def settled(n: int) -> bool:
            return sum((await asyncio.to_thread(_done_by, pg_url, batch.id)).values()) >= n

        async def a_holds_a_lease() -> bool:
            return any(_pid(o) == a.proc.pid for o in await asyncio.to_thread(_leased, pg_url, batch.id))

        a, b = replicas[0], replicas[1]
        await _until(lambda: settled(LINES // 4), 30, "a quarter of the lines settled")
        await _until(a_holds_a_lease, 10, "A holds a lease")
        await asyncio.to_thread(a.stop, signal.SIGKILL)  # A dies holding leases: they expire after LEASE_S
        held_by_a = [
            c
            for o, ids in (await asyncio.to_thread(_leased, pg_url, batch.id)).items()
            for c in ids
            if _pid(o) == a.proc.pid
        ]
        assert held_by_a, "A died holding no lease"
        await _until(lambda: settled(LINES // 2), 30, "half of the lines settled")
        assert await asyncio.to_thread(b.stop) == 0  # B stops gracefully …
        held = await asyncio.to_thread(_leased, pg_url, batch.id)
        assert not [o for o in held if _pid(o) == b.proc.pid], "B gave its lines back as it stopped"
        restarted = Replica(configs[1], tmp_path / "replica1-again.log", drain_timeout=5.0)
        await restarted.ready()  # … and comes back on the same config

        deadline = time.monotonic() + 60
        while (batch := await client.batches.retrieve(batch.id)).status not in ("completed", "failed", "expired"):
            assert time.monotonic() < deadline, batch.request_counts
            await asyncio.sleep(0.2)
        elapsed = time.monotonic() - started
        assert batch.status == "completed", batch
        assert batch.request_counts is not None
        assert (batch.request_counts.total, batch.request_counts.completed) == (LINES, LINES)

        # Every custom_id exactly once across the output and error files.
        out = (await client.files.content(batch.output_file_id or "")).text.splitlines()
        err = (await client.files.content(batch.error_file_id)).text.splitlines() if batch.error_file_id else []
        answered = Counter(json.loads(x)["custom_id"] for x in out + err)
        assert answered == Counter(f"line-{i:04d}" for i in range(LINES))
        assert not err
        await client.close()

        # Who ran the lines: A before it died, B's two lives, and C; the restarted B is a new owner.
        owners = await asyncio.to_thread(_done_by, pg_url, batch.id)
        assert sum(owners.values()) == LINES
        assert len(owners) == 4, owners  # A, B, B again, C
        assert {a.proc.pid, b.proc.pid, restarted.proc.pid, replicas[2].proc.pid} == {_pid(o) for o in owners}
        with psycopg.connect(pg_url) as conn:  # the lines A died holding: run again, by another replica
            retaken = conn.execute(
                "SELECT done_by, attempts FROM batch_lines WHERE batch_id = %s AND custom_id = ANY(%s)",
                (batch.id, held_by_a),
            ).fetchall()
        assert all(_pid(o) != a.proc.pid and n >= 2 for o, n in retaken), retaken

        # The ledger: one billed row per line, each matching the simulator's truth one to one by request id.
        billed, other = await asyncio.to_thread(_ledger, pg_url, batch.id)
        assert len(billed) == LINES
        assert len({r[1] for r in billed}) == LINES  # one row per line (origin_id = the line)
        assert len({r[0] for r in billed}) == LINES
        assert {(r[2], r[6]) for r in billed} == {(200, "batch-lane")}
        assert all(r[5] is not None and r[5] > 0 for r in billed)
        records = [rec for rec in await truth(provider.url) if rec["client_request_id"]]
        seen = Counter(rec["client_request_id"] for rec in records)
        assert max(seen.values()) == 1, "the simulator saw a request id twice"
        by_id = {rec["client_request_id"]: rec for rec in records}
        for rid, _line, status, prompt, output, _cost, _lane in billed:
            rec = by_id.get(rid)
            assert rec is not None, f"billed {rid} never reached the provider"
            assert (rec["status"], rec["prompt_tokens"], rec["output_tokens"]) == (status, prompt, output)
        # The provider served some lines twice (A's in flight when it died, B's cut by its stop): each such
        # extra call is another attempt of a line billed once, under its attempt's id, and bills nothing itself.
        billed_ids = {r[0] for r in billed}
        extra = [rid for rid in by_id if rid.startswith("batch_req_") and rid not in billed_ids]
        line_of = re.compile(r"^(batch_req_[0-9a-f]{20})-\d+$")
        billed_lines = Counter(m.group(1) for rid in billed_ids if (m := line_of.match(rid)))
        assert len(billed_lines) == LINES
        assert max(billed_lines.values()) == 1
        for rid in extra:
            m = line_of.match(rid)
            assert m is not None, rid
            assert billed_lines[m.group(1)] == 1, rid
        assert len(extra) <= 2 * concurrency, extra  # at most the two replicas' lines in flight
        assert all(cost is None or cost == 0 for _, cost in other), other  # cut attempts bill nothing
        print(  # the run's numbers, for docs/batch.md
            f"fleet batch: {LINES} lines in {elapsed:.1f} s, owners {sorted(owners.values())}, A died holding "
            f"{len(held_by_a)} leases, {len(extra)} lines re-run after the kill / restart, "
            f"{len(other)} unbilled attempt rows"
        )
    finally:
        for r in [*replicas, *([restarted] if restarted is not None else [])]:
            await asyncio.to_thread(r.stop)


async def test_a_replica_killed_while_its_provider_jobs_run_leaves_them_to_be_resumed_not_sent_again(
    tmp_path: Path, sim: SimFactory, pg_cluster: PostgresCluster
) -> None:
    """Replica A sends 60 lines to the provider's batch API as 3 jobs and is SIGKILLed while they run; replica B
    (started after) leases the lines once A's leases expire, finds each job recorded on its lines and polls it:
    the provider ran 3 jobs, each line once, and every ledger row in PostgreSQL is one line of them (the
    simulator's truth by request id)."""
    pg_url = pg_cluster.fresh_database(f"fleet_batch_jobs_{uuid.uuid4().hex[:8]}")
    provider = await sim("instant", models=("m",), faults={"batch_turnaround_s": 3.0})
    cfg = [_config(tmp_path, i, provider.url, pg_url, None, "x", 4, batch_api=True, job_lines=20) for i in range(2)]
    a = Replica(cfg[0], tmp_path / "a.log", drain_timeout=5.0)
    b: Replica | None = None
    try:
        await a.ready()
        client = AsyncOpenAI(base_url=a.url + "/v1", api_key="sk-unused", max_retries=0, timeout=20)
        upload = await client.files.create(file=("in.jsonl", _jsonl(60)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )

        def recorded() -> list[tuple[Any, ...]]:
            with psycopg.connect(pg_url) as conn:
                return conn.execute(
                    "SELECT job_id, state, lease_owner FROM batch_lines WHERE batch_id = %s", (batch.id,)
                ).fetchall()

        async def all_sent() -> bool:
            return all(r[0] for r in await asyncio.to_thread(recorded))

        await _until(all_sent, 15, "every line in a recorded provider job")
        await client.close()
        await asyncio.to_thread(a.stop, signal.SIGKILL)
        at_kill = await asyncio.to_thread(recorded)
        jobs = {r[0] for r in at_kill}
        assert len(jobs) == 3
        assert {(r[1], _pid(r[2])) for r in at_kill} == {("leased", a.proc.pid)}  # A died holding every line
        b = Replica(cfg[1], tmp_path / "b.log", drain_timeout=5.0)
        await b.ready()
        client = AsyncOpenAI(base_url=b.url + "/v1", api_key="sk-unused", max_retries=0, timeout=20)
        deadline = time.monotonic() + 40
        while (batch := await client.batches.retrieve(batch.id)).status not in ("completed", "failed", "expired"):
            assert time.monotonic() < deadline, batch.request_counts
            await asyncio.sleep(0.2)
        assert batch.status == "completed", batch
        out = (await client.files.content(batch.output_file_id or "")).text.splitlines()
        assert batch.error_file_id is None
        assert Counter(json.loads(x)["custom_id"] for x in out) == Counter(f"line-{i:04d}" for i in range(60))
        await client.close()
        owners = await asyncio.to_thread(_done_by, pg_url, batch.id)
        assert {_pid(o) for o in owners} == {b.proc.pid}
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{provider.url}/batches?limit=100", headers={"Authorization": "Bearer sk-up-0123456789"}) as r,
        ):
            sent = {j["id"] for j in (await r.json())["data"]}
        assert sent == jobs  # B polled A's jobs: none sent again
        records = [rec for rec in await truth(provider.url) if rec["batch_id"] is not None]
        assert len(records) == 60
        billed, _ = await asyncio.to_thread(_ledger, pg_url, batch.id)
        assert {r[6] for r in billed} == {"provider-batch"}
        by_id = {rec["id"]: rec for rec in records}
        assert {r[0] for r in billed} == set(by_id)  # one to one, by request id
        for rid, _line, _status, prompt, output, _cost, _lane in billed:
            assert (by_id[rid]["prompt_tokens"], by_id[rid]["output_tokens"]) == (prompt, output)
    finally:
        for replica in (a, *([b] if b is not None else [])):
            await asyncio.to_thread(replica.stop)
