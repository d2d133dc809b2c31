"""The OpenAI Batch API on the gateway (issue 41): the official ``openai`` SDK, unchanged, uploads a file,
creates a batch, polls it and reads its output and error files; the executor runs the lines on the batch lane
(the gateway's own request path) or as a provider's batch job, by config; each line is answered and billed
once, its ledger row naming the lane and the price tier, and the batch's cost is on the batch object."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from openai.types import Batch

from conftest import GatewayHandle, SimFactory
from tailgate.ledger.store import open_store

Oai = Callable[..., AsyncOpenAI]
KEY_A = "sk-team-a-0123456789"
KEY_B = "sk-team-b-0123456789"
ADMIN = "sk-admin-0123456789"
PRICE = {"input": 2.0, "output": 4.0, "batch": {"ratio": 0.5}}
FAST = {"poll_interval": 0.05, "provider_poll_interval": 0.05, "concurrency": 8}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def chat_lines(n: int, model: str = "chat") -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"req-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": f"line {i}"}], "max_tokens": 5},
        }
        for i in range(n)
    ]


async def wait_done(client: AsyncOpenAI, batch_id: str, within_s: float = 12.0) -> Batch:
    deadline = time.monotonic() + within_s
    while True:
        batch = await client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.status}: {batch.request_counts}"
        await asyncio.sleep(0.05)


async def read_file(client: AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    content = await client.files.content(file_id)
    return [json.loads(line) for line in content.content.splitlines()]


def config(p_url: str, *, batch_api: bool, **extra: Any) -> dict[str, Any]:
    return {
        "keys": [
            {"id": "team-a", "key": KEY_A},
            {"id": "team-b", "key": KEY_B, "models": ["other"]},
        ],
        "admin_key": ADMIN,
        "providers": {
            "p": {"base_url": p_url, "api_keys": ["sk-p-0123456789"], "price": PRICE, "batch_api": batch_api},
        },
        "models": {
            "chat": {"routes": [{"provider": "p", "model": "up-m"}]},
            "other": {"routes": [{"provider": "p", "model": "up-m"}]},
        },
        "routing": {"probes": {"enabled": False}},
        "batch": {**FAST, **extra},
    }


def ledger_rows(gw: GatewayHandle) -> list[tuple[str, str | None, str | None, float | None]]:
    assert gw.gateway.ledger is not None
    with open_store(gw.gateway.ledger.path) as conn:
        rows = conn.execute(
            "SELECT request_id, lane, price_tier, cost FROM requests WHERE lane != 'interactive' ORDER BY request_id"
        ).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


@pytest.mark.parametrize("batch_api", [False, True], ids=["batch-lane", "provider-batch"])
async def test_sdk_runs_a_batch_through_the_gateway(sim: SimFactory, gateway: Any, oai: Oai, batch_api: bool) -> None:
    """Every custom_id answered once in the output file; the path chosen by config; the ledger rows carry the
    lane and the price tier; the batch's cost (the ``tailgate`` field) is the sum of its lines' rows."""
    p = await sim("instant", faults={"batch_turnaround_s": 0.2})
    # lane_share 0: the whole batch on one path (the split between the two: test_gateway_batch_split.py)
    gw: GatewayHandle = await gateway(config(p.url, batch_api=batch_api, lane_share=0.0))
    client = oai(gw.url, key=KEY_A)
    uploaded = await client.files.create(file=("in.jsonl", jsonl(chat_lines(12))), purpose="batch")
    assert (uploaded.purpose, uploaded.filename) == ("batch", "in.jsonl")
    batch = await client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"job": "t"}
    )
    assert batch.status == "in_progress"
    assert batch.metadata == {"job": "t"}
    done = await wait_done(client, batch.id)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (12, 12, 0)
    assert done.error_file_id is None
    out = await read_file(client, done.output_file_id)
    assert sorted(x["custom_id"] for x in out) == sorted(f"req-{i}" for i in range(12))
    for x in out:
        assert x["response"]["status_code"] == 200
        assert x["response"]["body"]["object"] == "chat.completion"
        assert x["response"]["body"]["model"] == "up-m"  # as a live request answers it
    lane = "provider-batch" if batch_api else "batch-lane"
    tier = "batch" if batch_api else "standard"
    rows = ledger_rows(gw)
    assert len(rows) == 12
    assert {(r[1], r[2]) for r in rows} == {(lane, tier)}
    cost = sum(r[3] or 0.0 for r in rows)
    assert cost > 0
    extra = done.model_extra or {}
    assert extra["tailgate"]["cost"] == pytest.approx(cost, rel=1e-6)
    assert extra["tailgate"]["currency"] == "CNY"
    if batch_api:  # the provider's job ran them at its batch price: half the live price of the same tokens
        assert gw.gateway.ledger is not None
        with open_store(gw.gateway.ledger.path) as conn:
            tokens = conn.execute("SELECT SUM(prompt_tokens), SUM(output_tokens) FROM requests").fetchone()
        assert cost == pytest.approx((tokens[0] * 2.0 + tokens[1] * 4.0) * 0.5 / 1e6)


@pytest.mark.parametrize("batch_api", [False, True], ids=["batch-lane", "provider-batch"])
async def test_keys_see_only_their_own_and_refused_lines_go_to_the_error_file(
    sim: SimFactory, gateway: Any, oai: Oai, batch_api: bool
) -> None:
    """Key B cannot see key A's batch or file; the admin key sees all. A batch of key B naming a model B may
    not use: each of those lines lands in the error file with the reason, the allowed ones in the output."""
    p = await sim("instant", faults={"batch_turnaround_s": 0.1})
    gw: GatewayHandle = await gateway(config(p.url, batch_api=batch_api))
    a, b, admin = oai(gw.url, key=KEY_A), oai(gw.url, key=KEY_B), oai(gw.url, key=ADMIN)
    f = await a.files.create(file=("a.jsonl", jsonl(chat_lines(2))), purpose="batch")
    batch = await a.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    with pytest.raises(openai.NotFoundError):
        await b.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        await b.files.retrieve(f.id)
    with pytest.raises(openai.NotFoundError):
        await b.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert [x.id async for x in b.batches.list()] == []
    assert (await admin.batches.retrieve(batch.id)).id == batch.id
    await wait_done(a, batch.id)

    fb = await b.files.create(file=("b.jsonl", jsonl(chat_lines(4, model="chat"))), purpose="batch")  # B: "other"
    bb = await b.batches.create(input_file_id=fb.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = await wait_done(b, bb.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert done.request_counts.failed == 4
    errors = await read_file(b, done.error_file_id)
    assert sorted(x["custom_id"] for x in errors) == [f"req-{i}" for i in range(4)]
    for x in errors:
        assert x["response"]["status_code"] == 403
        assert "chat" in x["response"]["body"]["error"]["message"]
    assert done.output_file_id is None


async def test_a_bad_upload_names_its_line_and_cancel_is_honoured(sim: SimFactory, gateway: Any, oai: Oai) -> None:
    p = await sim("instant", engine={"step_ms": 50.0})  # slow lines: the batch is still running when cancelled
    gw: GatewayHandle = await gateway(config(p.url, batch_api=False, concurrency=1))
    client = oai(gw.url, key=KEY_A)
    bad = jsonl(chat_lines(2)) + b'{"custom_id": "x", "method": "GET"}\n'
    with pytest.raises(openai.BadRequestError) as caught:
        await client.files.create(file=("bad.jsonl", bad), purpose="batch")
    assert "line 3" in str(caught.value)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(40))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="1h")  # type: ignore[arg-type]  # the SDK types 24h only
    await asyncio.sleep(0.3)
    cancelled = await client.batches.cancel(batch.id)
    assert cancelled.status in ("cancelling", "cancelled")
    done = await wait_done(client, batch.id)
    assert done.status == "cancelled"
    assert done.request_counts is not None
    answered = await read_file(client, done.output_file_id)
    errors = await read_file(client, done.error_file_id)
    assert sorted(x["custom_id"] for x in answered + errors) == sorted(f"req-{i}" for i in range(40))
    assert any(x["error"] and x["error"]["code"] == "batch_cancelled" for x in errors)
    deleted = await client.files.delete(f.id)
    assert deleted.deleted


async def test_an_overdue_batch_expires_with_its_unrun_lines_in_the_error_file(
    sim: SimFactory, gateway: Any, oai: Oai
) -> None:
    """The window closes with lines left: the batch moves to ``expired``, the lines answered so far are in the
    output file and the rest in the error file, code ``batch_expired``."""
    p = await sim("instant", engine={"step_ms": 50.0})
    gw: GatewayHandle = await gateway(config(p.url, batch_api=False, concurrency=1))
    client = oai(gw.url, key=KEY_A)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(30))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    await asyncio.sleep(0.3)
    assert gw.gateway.ledger is not None
    with open_store(gw.gateway.ledger.path) as conn:  # its window closes now
        conn.execute("UPDATE batches SET expires_at = ? WHERE id = ?", (time.time() - 1, batch.id))
    done = await wait_done(client, batch.id)
    assert done.status == "expired"
    answered = await read_file(client, done.output_file_id)
    errors = await read_file(client, done.error_file_id)
    assert sorted(x["custom_id"] for x in answered + errors) == sorted(f"req-{i}" for i in range(30))
    assert errors
    assert {x["error"]["code"] for x in errors if x["error"]} == {"batch_expired"}


async def test_a_restarted_gateway_resumes_the_batch_and_bills_each_line_once(
    sim: SimFactory, gateway: Any, oai: Oai, tmp_path: Any
) -> None:
    """A gateway stops mid-batch (its leased lines go back); another on the same store finishes the batch:
    every custom_id once in the output file, one ledger row per line."""
    p = await sim("instant", engine={"step_ms": 20.0})
    cfg = config(p.url, batch_api=False, concurrency=2)
    cfg["ledger"] = {"enabled": True, "path": str(tmp_path / "shared.db")}
    first: GatewayHandle = await gateway(cfg)
    client = oai(first.url, key=KEY_A)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(24))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    await asyncio.sleep(0.4)
    await first.stop()
    with open_store(tmp_path / "shared.db") as conn:
        done_before, leased = conn.execute(
            "SELECT SUM(state = 'done'), SUM(state = 'leased') FROM batch_lines WHERE batch_id = ?", (batch.id,)
        ).fetchone()
    assert 0 < done_before < 24, "the first gateway stopped mid-batch"
    assert leased == 0, "a stopping gateway gives its leased lines back"
    second: GatewayHandle = await gateway(cfg)
    client2 = oai(second.url, key=KEY_A)
    done = await wait_done(client2, batch.id, within_s=15)
    assert done.status == "completed"
    out = await read_file(client2, done.output_file_id)
    assert sorted(x["custom_id"] for x in out) == sorted(f"req-{i}" for i in range(24))
    await second.stop()
    with open_store(tmp_path / "shared.db") as conn:
        served, billed = conn.execute(
            "SELECT COUNT(*), SUM(cost) FROM requests WHERE lane = 'batch-lane' AND status = 200"
        ).fetchone()
        (unbilled,) = conn.execute(  # calls cut by the first gateway's stop: on the lane, billed nothing
            "SELECT COUNT(*) FROM requests WHERE lane = 'batch-lane' AND status != 200 AND cost IS NOT NULL"
        ).fetchone()
    assert served == 24
    assert unbilled == 0
    extra = done.model_extra or {}
    assert extra["tailgate"]["cost"] == pytest.approx(billed, rel=1e-6)


async def test_operators_cli_lists_shows_waits_and_cancels(sim: SimFactory, gateway: Any, oai: Oai) -> None:
    from click.testing import CliRunner

    from tailgate.cli import main

    p = await sim("instant")
    gw: GatewayHandle = await gateway(config(p.url, batch_api=False))
    client = oai(gw.url, key=KEY_A)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(5))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    env = {"TAILGATE_URL": gw.root_url, "TAILGATE_ADMIN_KEY": ADMIN}

    def cli(*args: str) -> Any:
        return CliRunner().invoke(main, ["batches", *args], env=env)

    shown = await asyncio.to_thread(cli, "show", batch.id, "--wait", "--interval", "0.05", "--json")
    assert shown.exit_code == 0, shown.output
    got = json.loads(shown.output[shown.output.index("{") :])
    assert got["status"] == "completed"
    assert got["request_counts"] == {"total": 5, "completed": 5, "failed": 0}
    listed = await asyncio.to_thread(cli, "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert [b["id"] for b in json.loads(listed.output)] == [batch.id]
    refused = await asyncio.to_thread(cli, "cancel", batch.id)
    assert refused.exit_code == 2
    assert "completed" in refused.output
    other = await asyncio.to_thread(  # another key's view: not this batch
        CliRunner().invoke, main, ["batches", "list", "--json"], env={**env, "TAILGATE_ADMIN_KEY": KEY_B}
    )
    assert other.exit_code == 0, other.output
    assert json.loads(other.output) == []
    nobody = await asyncio.to_thread(
        CliRunner().invoke, main, ["batches", "list"], env={**env, "TAILGATE_ADMIN_KEY": "sk-wrong-0123456789"}
    )
    assert nobody.exit_code == 2
    assert "401" in nobody.output


async def test_two_replicas_on_postgresql_share_one_batch(
    sim: SimFactory, gateway: Any, oai: Oai, pg_url: str, tmp_path: Any
) -> None:
    """A fleet: two gateways on one PostgreSQL store. A batch created through one is run by both (each leases
    lines the other does not hold); every line is done once, by one replica, and billed once in the store."""
    p = await sim("instant", engine={"step_ms": 10.0})  # lines take long enough for both replicas to lease some
    replicas = []
    for i in range(2):
        cfg = config(p.url, batch_api=False, concurrency=2)
        cfg["ledger"] = {"enabled": True, "path": str(tmp_path / f"spool{i}.db"), "url": pg_url}
        replicas.append(await gateway(cfg))
    client = oai(replicas[0].url, key=KEY_A)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(40))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = await wait_done(oai(replicas[1].url, key=KEY_A), batch.id, within_s=15)  # any replica answers
    assert done.status == "completed"
    out = await read_file(client, done.output_file_id)
    assert sorted(x["custom_id"] for x in out) == sorted(f"req-{i}" for i in range(40))
    with open_store(pg_url) as conn:
        owners = dict(
            conn.execute("SELECT done_by, COUNT(*) FROM batch_lines WHERE batch_id = ? GROUP BY done_by", (batch.id,))
        )
        billed, ids = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT origin_id) FROM requests WHERE origin = ?", (f"batch:{batch.id}",)
        ).fetchone()
    assert len(owners) == 2, owners  # both replicas ran lines
    assert sum(owners.values()) == 40
    assert (billed, ids) == (40, 40)


async def test_placement_keeps_a_batch_on_the_lane_when_a_provider_job_is_no_cheaper_or_too_slow(
    sim: SimFactory, gateway: Any, oai: Oai
) -> None:
    """A provider with a batch API gets a batch only when its batch price is the cheapest path and the batch has
    ``batch.provider_min_left`` of its window left: a ``1h`` batch, and a batch of an alias whose provider sells
    batch at its live price, run on the batch lane."""
    p = await sim("instant", faults={"batch_turnaround_s": 0.1})
    q = await sim("instant", faults={"batch_turnaround_s": 0.1})
    cfg = config(p.url, batch_api=True)
    cfg["providers"]["q"] = {
        "base_url": q.url,
        "api_keys": ["sk-q-0123456789"],
        "price": {"input": 2.0, "output": 4.0, "batch": {"ratio": 1.0}},
        "batch_api": True,
    }
    cfg["models"]["other"] = {"routes": [{"provider": "q", "model": "up-q"}]}
    gw: GatewayHandle = await gateway(cfg)
    client = oai(gw.url, key=KEY_A)
    lanes = {}
    for model, window in (("chat", "1h"), ("other", "24h"), ("chat", "24h")):
        f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(2, model=model))), purpose="batch")
        b = await client.batches.create(
            input_file_id=f.id,
            endpoint="/v1/chat/completions",
            completion_window=window,  # type: ignore[arg-type]  # the SDK types 24h only
        )
        assert (await wait_done(client, b.id)).status == "completed"
        assert gw.gateway.ledger is not None
        with open_store(gw.gateway.ledger.path) as conn:
            lanes[(model, window)] = {
                lane
                for (lane,) in conn.execute(
                    "SELECT lane FROM batch_lines WHERE batch_id = ? AND state = 'done'", (b.id,)
                ).fetchall()
            }
    assert lanes == {
        ("chat", "1h"): {"batch-lane"},  # too little window left for a provider job
        ("other", "24h"): {"batch-lane"},  # q's batch price is its live price: no saving
        ("chat", "24h"): {"provider-batch"},  # p's batch price is half
    }


async def test_uploads_are_held_to_the_batch_limits_not_the_request_body_limit(
    sim: SimFactory, gateway: Any, oai: Oai
) -> None:
    """An input file larger than ``max_body_bytes`` (8 MiB) uploads through the front door; one larger than
    ``batch.max_file_bytes`` is a 413 naming the limit; more lines than ``batch.max_lines`` a 400 naming the line."""
    p = await sim("instant")
    gw: GatewayHandle = await gateway(config(p.url, batch_api=False, max_file_bytes=12 * 1024 * 1024, max_lines=9000))
    client = oai(gw.url, key=KEY_A, timeout=30)
    line = chat_lines(1)[0]
    line["body"]["messages"][0]["content"] = "x" * 1100
    big = jsonl([{**line, "custom_id": f"c{i}"} for i in range(8500)])
    assert 8 * 1024 * 1024 < len(big) < 12 * 1024 * 1024
    uploaded = await client.files.create(file=("big.jsonl", big), purpose="batch")
    assert uploaded.bytes == len(big)
    with pytest.raises(openai.APIStatusError) as too_big:
        await client.files.create(file=("huge.jsonl", big + big[: 4 * 1024 * 1024]), purpose="batch")
    assert too_big.value.status_code == 413
    assert "batch.max_file_bytes" in str(too_big.value)
    many = jsonl([{**chat_lines(1)[0], "custom_id": f"c{i}"} for i in range(9001)])
    with pytest.raises(openai.BadRequestError) as too_many:
        await client.files.create(file=("many.jsonl", many), purpose="batch")
    assert "line 9001" in str(too_many.value)


async def test_a_dead_replicas_expired_leases_are_taken_over_on_the_provider_batch_path(
    sim: SimFactory, gateway: Any, oai: Oai
) -> None:
    """Every line of a provider-batch batch leased by a replica that died (its leases expired, no line pending):
    the executor leases them again and the batch completes, each line once (counting only pending lines as work
    left, the batch stalled in ``in_progress`` for ever). The executor's loop polls once an hour here: the test
    runs its rounds."""
    p = await sim("instant", faults={"batch_turnaround_s": 0.1})
    gw: GatewayHandle = await gateway(config(p.url, batch_api=True, poll_interval=3600.0))
    await asyncio.sleep(0.2)  # the loop's first round (no batch yet) is behind it
    client = oai(gw.url, key=KEY_A)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(6))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert gw.gateway.ledger is not None
    with open_store(gw.gateway.ledger.path) as conn:  # a dead replica's leases, expired
        conn.execute(
            "UPDATE batch_lines SET state = 'leased', lease_owner = 'dead-replica', lease_expires = ? "
            "WHERE batch_id = ?",
            (time.time() - 1, batch.id),
        )
    deadline = time.monotonic() + 10.0
    while (now := await client.batches.retrieve(batch.id)).status == "in_progress" and time.monotonic() < deadline:
        await gw.gateway.batch_exec.tick()
        await asyncio.sleep(0.05)
    done = await wait_done(client, batch.id, within_s=2.0)
    assert done.status == "completed", now
    out = await read_file(client, done.output_file_id)
    assert sorted(x["custom_id"] for x in out) == sorted(f"req-{i}" for i in range(6))
    assert len(ledger_rows(gw)) == 6


async def test_a_live_request_with_a_lines_request_id_is_still_billed(sim: SimFactory, gateway: Any, oai: Oai) -> None:
    """A batch's owner can work out a running line's request id (``batch_req_`` + its digest + attempt) and send a
    live request carrying it as ``x-request-id``. The books divert only the executor's own requests to the batch:
    the live request keeps its own ledger row (it is billed), and the line's row is the batch's."""
    p = await sim("instant", engine={"step_ms": 10.0})
    gw: GatewayHandle = await gateway(config(p.url, batch_api=False))
    client = oai(gw.url, key=KEY_A)
    lines = chat_lines(1)
    lines[0]["body"]["max_tokens"] = 300  # ~3 s of decode: the line is running while the live request comes
    f = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert gw.gateway.ledger is not None
    leased = None
    deadline = time.monotonic() + 5.0
    while leased is None and time.monotonic() < deadline:
        with open_store(gw.gateway.ledger.path) as conn:
            leased = conn.execute(
                "SELECT line, attempts FROM batch_lines WHERE batch_id = ? AND state = 'leased'", (batch.id,)
            ).fetchone()
        await asyncio.sleep(0.02)
    assert leased is not None
    digest = hashlib.sha256(f"{batch.id}:{leased[0]}".encode()).hexdigest()[:20]
    rid = f"batch_req_{digest}-{leased[1]}"
    live = await client.chat.completions.create(
        model="other",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=1,
        extra_headers={"x-request-id": rid},
    )
    assert live.choices
    done = await wait_done(client, batch.id)
    assert done.status == "completed"
    gw.gateway.core.books.flush()
    with open_store(gw.gateway.ledger.path) as conn:
        rows = conn.execute("SELECT alias, lane, status FROM requests WHERE request_id = ?", (rid,)).fetchall()
    assert sorted((r[0], r[1], r[2]) for r in rows) == [("chat", "batch-lane", 200), ("other", "interactive", 200)]
