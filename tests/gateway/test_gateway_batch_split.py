"""A batch split between the batch lane and a provider's Batch API (``batch.lane_share``, docs/batch.md, "Paths"):
the primary has no Batch API, the secondary sells batch at half price. The first ``floor(lane_share × total)``
lines run on the batch lane (the gateway's request path, at the primary, live price), the rest in the secondary's
job (its batch price); each line once, its ledger row and the simulators' truth saying which path served it, and
the cost what the split makes it. The split is per batch, not per replica: two gateways on one store run it
together with the same lines on the lane."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_gateway_batches import KEY_A, PRICE, Oai, chat_lines, config, jsonl, read_file, wait_done

from conftest import GatewayHandle, SimFactory
from sim_truth import truth
from tailgate.ledger.store import open_store


def split_config(primary: str, secondary: str, lane_share: float, **extra: Any) -> dict[str, Any]:
    cfg = config(primary, batch_api=False, lane_share=lane_share, **extra)
    cfg["providers"]["q"] = {"base_url": secondary, "api_keys": ["sk-q-0123456789"], "price": PRICE, "batch_api": True}
    cfg["models"]["chat"] = {
        "routes": [{"provider": "p", "model": "up-m", "weight": 100}, {"provider": "q", "model": "up-m", "weight": 0}]
    }
    return cfg


def settled(path: Any, batch_id: str) -> list[tuple[int, str, str, str, str, float, int, int, str]]:
    """(line, custom_id, lane, provider, price tier, cost, prompt, output tokens, request id) of each line's row."""
    with open_store(path) as conn:
        rows = conn.execute(
            "SELECT l.line, l.custom_id, r.lane, r.provider, r.price_tier, r.cost, r.prompt_tokens, r.output_tokens, "
            "r.request_id FROM batch_lines l JOIN requests r ON r.request_id = l.request_id "
            "WHERE l.batch_id = ? AND l.state = 'done' ORDER BY l.line",
            (batch_id,),
        ).fetchall()
        # the batch is all the traffic: one ledger row per line, none besides (no line billed twice)
        assert conn.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == len(rows)
    return [tuple(r) for r in rows]


def live_cost(prompt: int, output: int) -> float:
    return (prompt * PRICE["input"] + output * PRICE["output"]) / 1e6  # type: ignore[operator]


@pytest.mark.parametrize(("lane_share", "on_lane"), [(0.1, 4), (0.0, 0)], ids=["lane_share-0.1", "lane_share-0"])
async def test_a_batch_is_split_between_the_lane_and_a_provider_job(
    sim: SimFactory, gateway: Any, oai: Oai, lane_share: float, on_lane: int
) -> None:
    """40 lines, ``lane_share`` 0.1: lines 0–3 on lane ``batch-lane`` at the primary (tier ``standard``, the live
    price, sent as ``x-tailgate-class: batch``), 36 in the secondary's job (tier ``batch``, half price); 0: all 40
    in the job, the primary sees none. Every custom_id answered once; the batch's cost is its rows' sum, and the
    cost ratio is 0.5 + 0.5 × the lane's share of the live cost."""
    p = await sim("instant", engine={"batch_api": False})
    q = await sim("instant", faults={"batch_turnaround_s": 0.3})
    gw: GatewayHandle = await gateway(split_config(p.url, q.url, lane_share))
    client = oai(gw.url, key=KEY_A)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(40))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = await wait_done(client, batch.id)
    assert done.status == "completed", done
    out = await read_file(client, done.output_file_id)
    assert sorted(x["custom_id"] for x in out) == sorted(f"req-{i}" for i in range(40))  # each once
    assert done.error_file_id is None
    assert gw.gateway.ledger is not None
    rows = settled(gw.gateway.ledger.path, batch.id)
    assert len(rows) == 40
    lane = [r for r in rows if r[2] == "batch-lane"]
    job = [r for r in rows if r[2] == "provider-batch"]
    assert [r[0] for r in lane] == list(range(on_lane))  # the first lines, by index
    assert {(r[3], r[4]) for r in lane} <= {("p", "standard")}
    assert len(job) == 40 - on_lane
    assert {(r[3], r[4]) for r in job} == {("q", "batch")}
    for r in lane:
        assert r[5] == pytest.approx(live_cost(r[6], r[7]))
    for r in job:
        assert r[5] == pytest.approx(0.5 * live_cost(r[6], r[7]))
    cost = sum(r[5] for r in rows)
    as_live = sum(live_cost(r[6], r[7]) for r in rows)
    assert (done.model_extra or {})["tailgate"]["cost"] == pytest.approx(cost, rel=1e-6)
    lane_live = sum(live_cost(r[6], r[7]) for r in lane)
    assert cost / as_live == pytest.approx(0.5 + 0.5 * lane_live / as_live)
    # the simulators' truth: the primary ran exactly the lane's lines, live and marked batch; q ran the job's
    at_p = await truth(p.url)
    assert sorted(x["client_request_id"] for x in at_p) == sorted(r[8] for r in lane)
    at_q = await truth(q.url)
    assert sorted(x["id"] for x in at_q if x["batch_id"] is not None) == sorted(r[8] for r in job)
    assert not [x for x in at_q if x["batch_id"] is None]  # nothing live on the secondary


async def test_two_replicas_split_one_batch_by_line_not_each_its_own_share(
    sim: SimFactory, gateway: Any, oai: Oai, tmp_path: Any
) -> None:
    """Two gateways on one store run a 60-line batch with ``lane_share`` 0.1 together: the lane gets lines 0–5
    (the share of the batch, not 10 % per replica), the secondary's jobs the other 54, each line once — whichever
    replica leased it, and although a dead replica held lines 0–2 and 30–32 (leases expired) when they started."""
    p = await sim("instant", engine={"batch_api": False})
    q = await sim("instant", faults={"batch_turnaround_s": 0.3})
    cfg = split_config(p.url, q.url, 0.1, concurrency=2, provider_job_lines=20, poll_interval=3600.0)
    cfg["ledger"] = {"enabled": True, "path": str(tmp_path / "shared.db")}
    a: GatewayHandle = await gateway(cfg)
    b: GatewayHandle = await gateway(cfg)
    await asyncio.sleep(0.2)  # their loops' first rounds (no batch yet) are behind them: the test runs the rounds
    client = oai(a.url, key=KEY_A)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(60))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    db = tmp_path / "shared.db"
    with open_store(db) as conn:
        conn.execute(
            "UPDATE batch_lines SET state = 'leased', lease_owner = 'dead-replica', lease_expires = 1 "
            "WHERE batch_id = ? AND line IN (0, 1, 2, 30, 31, 32)",
            (batch.id,),
        )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20.0
    while (now := await client.batches.retrieve(batch.id)).status == "in_progress":
        assert loop.time() < deadline, now.request_counts
        await asyncio.gather(a.gateway.batch_exec.tick(), b.gateway.batch_exec.tick())
        await asyncio.sleep(0.05)
    done = await wait_done(client, batch.id, within_s=5.0)
    assert done.status == "completed", done
    out = await read_file(client, done.output_file_id)
    assert sorted(x["custom_id"] for x in out) == sorted(f"req-{i}" for i in range(60))
    rows = settled(db, batch.id)
    assert [r[0] for r in rows if r[2] == "batch-lane"] == list(range(6))
    assert [r[0] for r in rows if r[2] == "provider-batch"] == list(range(6, 60))
    with open_store(db) as conn:
        by = {
            owner
            for (owner,) in conn.execute("SELECT DISTINCT done_by FROM batch_lines WHERE batch_id = ?", (batch.id,))
        }
    assert len(by) == 2  # both replicas settled lines
    jobs = [x for x in await truth(q.url) if x["batch_id"] is not None]
    assert len(jobs) == 54  # no line sent twice
    assert len(await truth(p.url)) == 6


async def test_a_closing_window_runs_the_lanes_lines_interactive_too(sim: SimFactory, gateway: Any, oai: Oai) -> None:
    """A split batch whose window is already closing (``close_margin`` 3,599 s of a ``1h`` window; a provider job
    allowed with a minute left): no line on the batch lane nor in a job — all ten, the lane's share included, run
    as live requests on lane ``interactive`` at the live price, and the secondary is sent no job."""
    p = await sim("instant", engine={"batch_api": False})
    q = await sim("instant", faults={"batch_turnaround_s": 0.3})
    cfg = split_config(p.url, q.url, 0.5, provider_min_left=60.0, close_margin=3599.0)
    gw: GatewayHandle = await gateway(cfg)
    client = oai(gw.url, key=KEY_A)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(10))), purpose="batch")
    batch = await client.batches.create(
        input_file_id=f.id,
        endpoint="/v1/chat/completions",
        completion_window="1h",  # type: ignore[arg-type]  # the SDK types 24h only
    )
    done = await wait_done(client, batch.id)
    assert done.status == "completed", done
    assert gw.gateway.ledger is not None
    rows = settled(gw.gateway.ledger.path, batch.id)
    assert [r[0] for r in rows] == list(range(10))
    assert {(r[2], r[3], r[4]) for r in rows} == {("interactive", "p", "standard")}
    assert not [x for x in await truth(q.url) if x["batch_id"] is not None]


async def test_a_lane_line_already_sent_in_a_provider_job_stays_with_the_job(
    sim: SimFactory, gateway: Any, oai: Oai
) -> None:
    """A line in the lane's range that carries a recorded provider job (sent while ``lane_share`` was lower, by a
    replica that died) goes back to the provider's path, never onto the lane: here its file is recorded without a
    job, none was made from it, so it is uploaded afresh to the secondary; the rest of the lane's range runs on the
    lane."""
    p = await sim("instant", engine={"batch_api": False})
    q = await sim("instant", faults={"batch_turnaround_s": 0.2})
    gw: GatewayHandle = await gateway(split_config(p.url, q.url, 0.1, poll_interval=3600.0))
    await asyncio.sleep(0.2)  # the loop's first round (no batch yet) is behind it: the test runs the rounds
    client = oai(gw.url, key=KEY_A)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(40))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert gw.gateway.ledger is not None
    db = gw.gateway.ledger.path
    with open_store(db) as conn:  # line 1: sent by a replica that died after the upload, its lease expired
        conn.execute(
            "UPDATE batch_lines SET state = 'leased', lease_owner = 'dead-replica', lease_expires = 1, "
            "job_provider = 'q', job_file = 'file-gone' WHERE batch_id = ? AND line = 1",
            (batch.id,),
        )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15.0
    while (now := await client.batches.retrieve(batch.id)).status == "in_progress":
        assert loop.time() < deadline, now.request_counts
        await gw.gateway.batch_exec.tick()
        await asyncio.sleep(0.05)
    assert (await wait_done(client, batch.id, within_s=5.0)).status == "completed"
    rows = settled(db, batch.id)
    assert [r[0] for r in rows if r[2] == "batch-lane"] == [0, 2, 3]
    assert [r[0] for r in rows if r[2] == "provider-batch"] == [1, *range(4, 40)]
    assert len(await truth(p.url)) == 3
