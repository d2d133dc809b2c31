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
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from openai import AsyncOpenAI

from conftest import SimFactory
from fleet_batch import batch_config, batch_jsonl, done_by, ledger, owner_pid, run_kill_and_restart, until
from fleet_store import Replica
from pg_cluster import PostgresCluster
from sim_truth import truth
from tailgate.state.server import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

LINES = 360
CONCURRENCY = 4
LINE_ID = re.compile(r"^(batch_req_[0-9a-f]{20})-\d+$")
"""A batch-lane line's request id: the line's digest, then the attempt (the lease) that sent it."""


async def test_a_fleet_losing_one_replica_and_restarting_another_answers_and_bills_each_line_once(
    tmp_path: Path, sim: SimFactory, pg_cluster: PostgresCluster, redis_server: RedisServer
) -> None:
    pg_url = pg_cluster.fresh_database(f"fleet_batch_{uuid.uuid4().hex[:8]}")
    provider = await sim("instant", models=("m",), engine={"step_ms": 15.0})  # ~0.15 s a line: a batch of ~10 s
    run = await run_kill_and_restart(
        tmp_path,
        provider.url,
        pg_url,
        redis_server.url,
        lines=LINES,
        concurrency=CONCURRENCY,
        ns=f"fb{uuid.uuid4().hex[:8]}",
    )
    assert run.status == "completed"
    assert run.completed == LINES
    # Every custom_id exactly once across the output and error files.
    assert run.answered == Counter(f"line-{i:05d}" for i in range(LINES))
    assert run.error_lines == 0

    # Who ran the lines: A before it died, B's two lives, and C (the restarted B is another owner).
    assert run.held_by_a, "A died holding no lease"
    assert run.b_held_after_stop == 0, "B gave its lines back as it stopped"
    assert sum(run.owners.values()) == LINES
    assert {owner_pid(o) for o in run.owners} == set(run.pids.values()), (run.owners, run.pids)
    assert len(run.retaken) == len(run.held_by_a)  # the lines A died holding: run again, by another replica
    assert all(owner_pid(o) != run.pids["a"] and n >= 2 for o, n in run.retaken), run.retaken

    # The ledger: one billed row per line, each matching the simulator's truth one to one by request id.
    billed = run.billed
    assert len(billed) == LINES
    assert len({r[1] for r in billed}) == LINES  # one row per line (origin_id = the line)
    assert len({r[0] for r in billed}) == LINES
    assert {(r[2], r[6]) for r in billed} == {(200, "batch-lane")}
    assert all(r[5] is not None and r[5] > 0 for r in billed)
    assert run.truth_ids_seen_twice == 0, "the simulator saw a request id twice"
    for rid, _line, status, prompt, output, _cost, _lane in billed:
        rec = run.truth_by_id.get(rid)
        assert rec is not None, f"billed {rid} never reached the provider"
        assert (rec["status"], rec["prompt_tokens"], rec["output_tokens"]) == (status, prompt, output)
    # The provider served some lines twice (A's in flight when it died, B's cut by its stop): each such extra
    # call is another attempt of a line billed once, under its attempt's id, and bills nothing itself.
    billed_ids = {r[0] for r in billed}
    billed_lines = Counter(m.group(1) for rid in billed_ids if (m := LINE_ID.match(rid)))
    assert len(billed_lines) == LINES
    assert max(billed_lines.values()) == 1
    extra = [rid for rid in run.truth_by_id if rid.startswith("batch_req_") and rid not in billed_ids]
    for rid in extra:
        m = LINE_ID.match(rid)
        assert m is not None, rid
        assert billed_lines[m.group(1)] == 1, rid
    assert len(extra) <= 2 * CONCURRENCY, extra  # at most the two replicas' lines in flight
    assert all(cost is None or cost == 0 for _, cost in run.other), run.other  # cut attempts bill nothing
    print(  # the run's numbers, for docs/batch.md
        f"fleet batch: {LINES} lines in {run.elapsed_s:.1f} s, settled per replica {sorted(run.owners.values())}, "
        f"A died holding {len(run.held_by_a)} leases, {len(extra)} lines re-run after the kill / restart, "
        f"{len(run.other)} unbilled attempt rows"
    )


async def test_a_replica_killed_while_its_provider_jobs_run_leaves_them_to_be_resumed_not_sent_again(
    tmp_path: Path, sim: SimFactory, pg_cluster: PostgresCluster
) -> None:
    """Replica A sends 60 lines to the provider's batch API as 3 jobs and is SIGKILLed while they run; replica B
    (started after) leases the lines once A's leases expire, finds each job recorded on its lines and polls it:
    the provider ran 3 jobs, each line once, and every ledger row in PostgreSQL is one line of them (the
    simulator's truth by request id)."""
    pg_url = pg_cluster.fresh_database(f"fleet_batch_jobs_{uuid.uuid4().hex[:8]}")
    provider = await sim("instant", models=("m",), faults={"batch_turnaround_s": 8.0})
    cfg = [
        batch_config(tmp_path, i, provider.url, pg_url, None, "x", 4, batch_api=True, job_lines=20) for i in range(2)
    ]
    a = Replica(cfg[0], tmp_path / "a.log", drain_timeout=5.0)
    b: Replica | None = None
    try:
        await a.ready()
        client = AsyncOpenAI(base_url=a.url + "/v1", api_key="sk-unused", max_retries=0, timeout=20)
        upload = await client.files.create(file=("in.jsonl", batch_jsonl(60)), purpose="batch")
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

        await until(all_sent, 15, "every line in a recorded provider job")
        await client.close()
        await asyncio.to_thread(a.stop, signal.SIGKILL)
        at_kill = await asyncio.to_thread(recorded)
        jobs = {r[0] for r in at_kill}
        assert len(jobs) == 3
        assert {(r[1], owner_pid(r[2])) for r in at_kill} == {("leased", a.proc.pid)}  # A died holding every line
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
        assert Counter(json.loads(x)["custom_id"] for x in out) == Counter(f"line-{i:05d}" for i in range(60))
        await client.close()
        owners = await asyncio.to_thread(done_by, pg_url, batch.id)
        assert {owner_pid(o) for o in owners} == {b.proc.pid}
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{provider.url}/batches?limit=100", headers={"Authorization": "Bearer sk-up-0123456789"}) as r,
        ):
            sent = {j["id"] for j in (await r.json())["data"]}
        assert sent == jobs  # B polled A's jobs: none sent again
        records = [rec for rec in await truth(provider.url) if rec["batch_id"] is not None]
        assert len(records) == 60
        billed, _ = await asyncio.to_thread(ledger, pg_url, batch.id)
        assert {r[6] for r in billed} == {"provider-batch"}
        by_id = {rec["id"]: rec for rec in records}
        assert {r[0] for r in billed} == set(by_id)  # one to one, by request id
        for rid, _line, _status, prompt, output, _cost, _lane in billed:
            assert (by_id[rid]["prompt_tokens"], by_id[rid]["output_tokens"]) == (prompt, output)
    finally:
        for replica in (a, *([b] if b is not None else [])):
            await asyncio.to_thread(replica.stop)
