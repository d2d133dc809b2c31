"""The simulator sells batch: the official openai SDK, unchanged, runs a whole Batch API job against it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any, cast

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types import Batch

from conftest import SimFactory, ThreadedSim
from tailgate.sim.faults import Faults
from tailgate.sim.provider import SimProvider

Oai = Callable[..., AsyncOpenAI]


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def chat_lines(n: int, *, model: str = "deepseek-v3.2", max_tokens: int = 5) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"req-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": f"line {i}"}], "max_tokens": max_tokens},
        }
        for i in range(n)
    ]


async def wait_done(client: AsyncOpenAI, batch_id: str, within_s: float = 10.0) -> Batch:
    """Poll as a client does until the batch reaches a terminal status."""
    deadline = time.monotonic() + within_s
    while True:
        batch = await client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.status}"
        await asyncio.sleep(0.05)


async def read_lines(client: AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    content = await client.files.content(file_id)
    return [json.loads(line) for line in content.content.splitlines()]


async def start(sim: SimFactory, **faults: Any) -> SimProvider:
    return await sim("instant", faults={"batch_turnaround_s": 0.3, **faults})


async def test_sdk_runs_a_batch_every_custom_id_answered_once(sim: SimFactory, oai: Oai) -> None:
    """files.create(purpose=batch) → batches.create → polling → files.content: each custom_id answered once,
    the answers are chat completions, and request_counts and usage add up."""
    p = await start(sim, batch_turnaround_s=0.6)  # in_progress long enough for a poll to see it
    client = oai(p.url)
    uploaded = await client.files.create(file=("in.jsonl", jsonl(chat_lines(20))), purpose="batch")
    assert uploaded.object == "file"
    assert uploaded.purpose == "batch"
    assert uploaded.filename == "in.jsonl"
    assert uploaded.bytes == len(jsonl(chat_lines(20)))
    batch = await client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"job": "t1"}
    )
    assert str(batch.status) == "validating"  # str(): mypy would narrow the status for the loop below
    assert batch.object == "batch"
    assert batch.metadata == {"job": "t1"}
    assert batch.expires_at is not None
    assert batch.expires_at - batch.created_at == 24 * 3600
    seen: set[str] = set()
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        seen.add(batch.status)
        await asyncio.sleep(0.02)
        batch = await client.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    assert "in_progress" in seen
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (20, 20, 0)
    assert batch.in_progress_at is not None
    assert batch.finalizing_at is not None
    assert batch.completed_at is not None
    assert batch.error_file_id is None
    assert batch.output_file_id is not None
    assert batch.model == "deepseek-v3.2"
    out = await read_lines(client, batch.output_file_id)
    assert sorted(line["custom_id"] for line in out) == sorted(f"req-{i}" for i in range(20))
    for line in out:
        assert line["id"].startswith("batch_req_")
        assert line["error"] is None
        assert line["response"]["status_code"] == 200
        body = line["response"]["body"]
        assert body["object"] == "chat.completion"
        assert body["usage"]["completion_tokens"] == 5
        assert line["response"]["request_id"] == body["id"]
    assert batch.usage is not None
    assert batch.usage.output_tokens == 100
    assert batch.usage.input_tokens == sum(line["response"]["body"]["usage"]["prompt_tokens"] for line in out)
    meta = await client.files.retrieve(batch.output_file_id)
    assert meta.purpose == "batch_output"
    assert meta.filename == f"{batch.id}_output.jsonl"


async def test_batch_lines_are_in_the_truth_with_their_batch_price(sim: SimFactory, oai: Oai) -> None:
    """Each line leaves one truth row (batch_id, custom_id) whose cost is its tokens at half the live price."""
    p = await start(sim)
    client = oai(p.url)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(4, max_tokens=10))), purpose="batch")
    batch = await wait_done(
        client,
        (await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")).id,
    )
    out = {line["response"]["request_id"]: line for line in await read_lines(client, batch.output_file_id)}
    rows = [r for r in p.truth.records() if r.batch_id == batch.id]
    assert sorted(r.custom_id or "" for r in rows) == [f"req-{i}" for i in range(4)]
    params = p.spec.params
    assert params.batch_price_ratio == 0.5
    for row in rows:
        usage = out[row.id]["response"]["body"]["usage"]
        assert row.status == 200
        assert row.output_tokens == 10 == usage["completion_tokens"]
        assert row.prompt_tokens == usage["prompt_tokens"]
        live = (usage["prompt_tokens"] * params.price_input + 10 * params.price_output) / 1e6
        assert row.cost == pytest.approx(live * 0.5)


async def test_failed_lines_go_to_the_error_file_with_a_reason(sim: SimFactory, oai: Oai) -> None:
    """batch_fail_rate 0.5: about half the lines are 500s in the error file; an invalid body is a 400 there
    (checked first, as live), and failed lines cost nothing."""
    p = await start(sim, batch_fail_rate=0.5)
    client = oai(p.url)
    lines = chat_lines(30)
    lines[3]["body"]["max_tokens"] = -1  # the provider refuses it as it would live
    f = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    batch = await wait_done(
        client,
        (await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")).id,
    )
    assert batch.status == "completed"
    ok = await read_lines(client, batch.output_file_id)
    bad = await read_lines(client, batch.error_file_id)
    assert batch.request_counts is not None
    assert batch.request_counts.completed == len(ok)
    assert batch.request_counts.failed == len(bad)
    assert len(ok) + len(bad) == 30
    assert 0 < len(bad) < 30
    assert sorted(line["custom_id"] for line in ok + bad) == sorted(f"req-{i}" for i in range(30))
    for line in bad:
        status = line["response"]["status_code"]
        assert status in (400, 500)
        assert line["response"]["body"]["error"]["message"]
    assert any(line["custom_id"] == "req-3" and line["response"]["status_code"] == 400 for line in bad)
    failed_rows = [r for r in p.truth.records() if r.batch_id == batch.id and r.status != 200]
    assert len(failed_rows) == len(bad)
    assert all(r.cost == 0 for r in failed_rows)


async def test_cancel_stops_the_batch_and_reports_unrun_lines(sim: SimFactory, oai: Oai) -> None:
    """Cancelling mid-run: cancelling, then cancelled; lines answered stay in the output file, the rest are
    batch_cancelled in the error file; cancelling again is a 409."""
    p = await sim("instant", faults={"batch_turnaround_s": 3.0})
    client = oai(p.url)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(50))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    await asyncio.sleep(0.3)
    cancelling = await client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling"
    assert cancelling.cancelling_at is not None
    done = await wait_done(client, batch.id)
    assert done.status == "cancelled"
    assert done.cancelled_at is not None
    ok = await read_lines(client, done.output_file_id)
    bad = await read_lines(client, done.error_file_id)
    assert 0 < len(ok) < 50
    assert len(ok) + len(bad) == 50
    assert all(line["error"]["code"] == "batch_cancelled" and line["response"] is None for line in bad)
    assert done.request_counts is not None
    assert done.request_counts.failed == len(bad)
    with pytest.raises(openai.ConflictError):
        await client.batches.cancel(batch.id)


async def test_expiry_sends_unanswered_lines_to_the_error_file(sim: SimFactory, oai: Oai) -> None:
    """A batch whose expiry comes before its turnaround ends expired: batch_expired for the lines left."""
    p = await sim("instant", faults={"batch_turnaround_s": 5.0, "batch_expire_after_s": 0.4})
    client = oai(p.url)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(40))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = await wait_done(client, batch.id)
    assert done.status == "expired"
    assert done.expired_at is not None
    ok = await read_lines(client, done.output_file_id)
    bad = await read_lines(client, done.error_file_id)
    assert len(ok) + len(bad) == 40
    assert len(bad) > 20
    assert {line["error"]["code"] for line in bad} == {"batch_expired"}


async def test_an_invalid_input_file_fails_the_batch_naming_the_line(sim: SimFactory, oai: Oai) -> None:
    """Validation ends in failed with errors.data naming each bad line and field, as OpenAI reports it."""
    p = await start(sim)
    client = oai(p.url)
    lines = chat_lines(3)
    lines[2]["custom_id"] = "req-0"
    raw = jsonl(lines) + b"{not json\n"
    f = await client.files.create(file=("in.jsonl", raw), purpose="batch")
    batch = await wait_done(
        client,
        (await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")).id,
    )
    assert batch.status == "failed"
    assert batch.failed_at is not None
    assert batch.errors is not None
    errors = {(e.line, e.code, e.param) for e in batch.errors.data or []}
    assert errors == {(3, "duplicate_custom_id", "custom_id"), (4, "invalid_json_line", None)}


async def test_embeddings_and_responses_batches(sim: SimFactory, oai: Oai) -> None:
    """Lines may target embeddings and responses too; each answer is the live endpoint's object."""
    p = await start(sim)
    client = oai(p.url)
    for endpoint, body, obj in (
        ("/v1/embeddings", {"model": "e", "input": "hello", "dimensions": 8}, "list"),
        ("/v1/responses", {"model": "r", "input": "hello", "max_output_tokens": 4}, "response"),
    ):
        line = {"custom_id": "only", "method": "POST", "url": endpoint, "body": body}
        f = await client.files.create(file=("in.jsonl", jsonl([line])), purpose="batch")
        batch = await wait_done(
            client,
            (
                await client.batches.create(
                    input_file_id=f.id,
                    endpoint=cast(Any, endpoint),
                    completion_window="24h",
                )
            ).id,
        )
        [out] = await read_lines(client, batch.output_file_id)
        assert out["response"]["body"]["object"] == obj


async def test_batch_jobs_leave_live_rate_limits_alone(sim: SimFactory, oai: Oai) -> None:
    """A 200-line batch takes no token from the live rate limit: live requests after it still get their rpm."""
    p = await sim("instant", faults={"batch_turnaround_s": 0.2, "rate_limit_rpm": 3})
    client = oai(p.url)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(200))), purpose="batch")
    batch = await wait_done(
        client,
        (await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")).id,
    )
    assert batch.status == "completed"
    for _ in range(3):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert p.engine.tokens_emitted == 3


async def test_files_are_listed_paged_deleted_and_scoped_to_their_key(sim: SimFactory, oai: Oai) -> None:
    """files.list pages with after=, delete removes, another API key sees nothing of them."""
    p = await start(sim)
    client, other = oai(p.url), oai(p.url, key="sk-other")
    ids = [(await client.files.create(file=(f"{i}.jsonl", b"{}\n"), purpose="batch")).id for i in range(3)]
    listed = [f.id async for f in client.files.list(limit=2)]
    assert listed == list(reversed(ids))
    assert [f.id async for f in other.files.list()] == []
    with pytest.raises(openai.NotFoundError):
        await other.files.retrieve(ids[0])
    deleted = await client.files.delete(ids[0])
    assert deleted.deleted
    assert deleted.id == ids[0]
    with pytest.raises(openai.NotFoundError):
        await client.files.content(ids[0])
    with pytest.raises(openai.BadRequestError) as err:
        await client.files.create(file=("x.jsonl", b"{}\n"), purpose="fine-tune")
    assert err.value.param == "purpose"


async def test_bad_create_requests_name_the_field(sim: SimFactory, oai: Oai) -> None:
    """An unknown file is a 404, a window outside 24h … 336h or an unknown endpoint a 400 naming the param."""
    p = await start(sim)
    client = oai(p.url)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(1))), purpose="batch")
    with pytest.raises(openai.NotFoundError):
        await client.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
    for kwargs, param in (
        ({"completion_window": "1h"}, "completion_window"),
        ({"endpoint": "/v1/moderations"}, "endpoint"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ):
        args: dict[str, Any] = {"input_file_id": f.id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        with pytest.raises(openai.BadRequestError) as err:
            await client.batches.create(**{**args, **kwargs})
        assert err.value.param == param


async def test_batch_faults_are_set_at_run_time_and_the_api_can_be_off(sim: SimFactory) -> None:
    """POST /sim/faults takes the batch fields (bad values name the field); batch_api false is a 404."""
    p = await sim("instant")
    async with aiohttp.ClientSession() as s:
        async with s.post(p.root_url + "/sim/faults", json={"batch_turnaround_s": 0.5, "batch_fail_rate": 0.1}) as r:
            assert r.status == 200
            assert (await r.json())["faults"]["batch_fail_rate"] == 0.1
        async with s.post(p.root_url + "/sim/faults", json={"batch_fail_rate": 2}) as r:
            assert r.status == 400
            assert (await r.json())["error"]["param"] == "batch_fail_rate"
        async with s.get(p.root_url + "/sim/state") as r:
            assert (await r.json())["batches"] == {"files": 0, "batches": {}}
    assert p.faults == Faults(batch_turnaround_s=0.5, batch_fail_rate=0.1)
    off = await sim("instant", engine={"batch_api": False})
    async with aiohttp.ClientSession() as s, s.get(off.url + "/batches") as r:
        assert r.status == 404


@pytest.mark.timing
async def test_turnaround_follows_the_time_scale(sim: SimFactory, oai: Oai) -> None:
    """Without the fault, the preset's turnaround × time_scale decides how long a batch runs."""
    p = await sim("instant", engine={"batch_turnaround_s": 40.0}, time_scale=0.01)  # 0.4 s
    client = oai(p.url)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(4))), purpose="batch")
    t0 = time.monotonic()
    batch = await wait_done(
        client,
        (await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")).id,
    )
    took = time.monotonic() - t0
    assert batch.status == "completed"
    assert 0.35 <= took < 3.0
    assert batch.expires_at is not None
    assert batch.expires_at - batch.created_at == int(24 * 3600 * 0.01)


def test_the_sync_sdk_runs_a_batch_too(threaded_sim: Callable[..., ThreadedSim]) -> None:
    """The blocking openai.OpenAI client: upload, create, poll, read the output — every custom_id once."""
    ts = threaded_sim("instant", faults={"batch_turnaround_s": 0.2})
    with OpenAI(base_url=ts.url, api_key="sk-test", max_retries=0, timeout=10) as client:
        f = client.files.create(file=("in.jsonl", jsonl(chat_lines(10))), purpose="batch")
        batch = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        deadline = time.monotonic() + 10
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
            batch = client.batches.retrieve(batch.id)
        assert batch.status == "completed"
        assert batch.output_file_id is not None
        out = [json.loads(x) for x in client.files.content(batch.output_file_id).content.splitlines()]
        assert sorted(x["custom_id"] for x in out) == sorted(f"req-{i}" for i in range(10))
        assert [b.id for b in client.batches.list()] == [batch.id]


@pytest.mark.timing
async def test_a_running_batch_does_not_hold_live_requests(sim: SimFactory, oai: Oai) -> None:
    """While 2,000 lines (≈ 0.7 s of CPU) are computed on the simulator's loop, live requests on the same loop keep
    being answered, none held for long: the runner works in 1 ms slices and rests as long. A runner that never
    yielded holds the loop for the whole batch (2 live requests got through, one of them waiting it out)."""
    engine = {"pre_median_s": 0.0, "step_ms": 0.1, "jitter": 0.0}
    p = await sim("provider-a", engine=engine, faults={"batch_turnaround_s": 0.5})
    client = oai(p.url)

    async def live() -> float:
        t0 = time.perf_counter()
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
        return time.perf_counter() - t0

    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(2000, max_tokens=200))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    during: list[float] = []
    while (await client.batches.retrieve(batch.id)).status in ("validating", "in_progress"):
        during.append(await live())
    done = await wait_done(client, batch.id)
    assert done.request_counts is not None
    assert done.request_counts.completed == 2000
    assert len(during) >= 10, during
    assert max(during) < 0.5, sorted(during)[-5:]
