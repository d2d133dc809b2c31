"""Rules every batch line obeys, whichever path runs it (docs/batch.md): what a provider job's lines carry, the
key's budgets and revocation, the upstream cap, and how live batch-class requests are sent and recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam
from test_gateway_batches import KEY_A, chat_lines, config, jsonl, read_file, wait_done

from conftest import GatewayHandle, SimFactory

Oai = Callable[..., AsyncOpenAI]


async def sim_files(url: str, key: str) -> dict[str, bytes]:
    """A simulated provider's stored files (filename → content), read through its own ``/v1/files``."""
    headers = {"Authorization": f"Bearer {key}"}
    out: dict[str, bytes] = {}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/files", headers=headers) as r:
            listed = await r.json()
        for f in listed["data"]:
            async with http.get(f"{url}/files/{f['id']}/content", headers=headers) as r:
                out[f["filename"]] = await r.read()
    return out


async def test_a_provider_jobs_lines_go_without_stream_fields(sim: SimFactory, gateway: Any, oai: Oai) -> None:
    """Lines that ask ``stream: true`` with ``stream_options`` are answered whole by a provider's batch job: the JSONL
    the gateway uploads carries neither field (a provider's batch API refuses streaming lines), nor a
    ``service_tier: "flex"`` the provider does not take."""
    p = await sim("instant", faults={"batch_turnaround_s": 0.1})
    gw: GatewayHandle = await gateway(config(p.url, batch_api=True))
    client = oai(gw.url, key=KEY_A)
    lines = chat_lines(3)
    for line in lines:
        line["body"] |= {"stream": True, "stream_options": {"include_usage": True}, "service_tier": "flex"}
    f = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = await wait_done(client, batch.id)
    assert done.status == "completed"
    assert len(await read_file(client, done.output_file_id)) == 3
    uploaded = (await sim_files(p.url, "sk-p-0123456789"))[f"{batch.id}.jsonl"]
    bodies = [json.loads(x)["body"] for x in uploaded.splitlines()]
    assert len(bodies) == 3
    for body in bodies:
        assert "stream" not in body
        assert "stream_options" not in body
        assert "service_tier" not in body  # the simulator's provider has no flex tier (providers.NAME.flex)
        assert body["model"] == "up-m"


async def capture_provider() -> tuple[aiohttp.web.AppRunner, str, list[dict[str, Any]]]:
    """A real HTTP provider on port 0 that answers every chat completion and keeps each body it received."""
    from aiohttp import web

    seen: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        return web.json_response(
            {
                "id": f"chatcmpl-{len(seen)}",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/v1", seen


async def test_flex_is_not_sent_to_a_provider_that_does_not_take_it(gateway: Any, oai: Oai) -> None:
    """``service_tier: "flex"`` marks a live request batch-class; it goes upstream only to a provider configured to
    take it (``providers.NAME.flex: true``, the ``openai`` preset's default): another provider gets the body
    without ``service_tier``, every other field as sent."""
    runner, url, seen = await capture_provider()
    try:
        cfg = {
            "providers": {
                "plain": {"base_url": url, "api_keys": ["sk-plain-0123456789"]},
                "flexy": {"base_url": url, "api_keys": ["sk-flexy-0123456789"], "flex": True},
            },
            "models": {
                "a": {"routes": [{"provider": "plain", "model": "up-plain"}]},
                "b": {"routes": [{"provider": "flexy", "model": "up-flexy"}]},
            },
            "routing": {"probes": {"enabled": False}},
        }
        gw: GatewayHandle = await gateway(cfg)
        client = oai(gw.url)
        for model in ("a", "b"):
            answer = await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=2,
                service_tier="flex",
                extra_body={"top_p": 0.5},
            )
            assert answer.choices[0].message.content == "ok"
    finally:
        await runner.cleanup()
    assert [s["model"] for s in seen] == ["up-plain", "up-flexy"]
    assert "service_tier" not in seen[0]
    assert seen[0]["top_p"] == 0.5
    assert seen[1]["service_tier"] == "flex"


def test_flex_defaults_to_the_presets(tmp_path: Any) -> None:
    """``providers.NAME.flex``: the ``openai`` preset takes flex, other presets and a bare provider do not, and the
    user's setting wins either way."""
    from tailgate.config.resolve import load_resolved

    path = tmp_path / "gateway.yaml"
    path.write_text(
        "providers:\n"
        "  oa: {preset: openai, api_keys: ['sk-oa-0123456789']}\n"
        "  oa_off: {preset: openai, api_keys: ['sk-oa-0123456789'], flex: false}\n"
        "  ds: {preset: deepseek, api_keys: ['sk-ds-0123456789']}\n"
        "  local: {base_url: 'http://127.0.0.1:8000/v1'}\n"
        "  local_on: {base_url: 'http://127.0.0.1:8000/v1', flex: true}\n"
        "models:\n  m: {routes: [{provider: local, model: x}]}\n",
        encoding="utf-8",
    )
    _, providers = load_resolved(path, env={})
    assert {n: p.flex for n, p in providers.items()} == {
        "oa": True,
        "oa_off": False,
        "ds": False,
        "local": False,
        "local_on": True,
    }


async def test_live_batch_class_requests_are_recorded_on_their_lane(sim: SimFactory, gateway: Any, oai: Oai) -> None:
    """A live request in the batch lane (``x-tailgate-class: batch`` or ``service_tier: "flex"``) is recorded with
    lane ``batch-live``, an interactive one ``interactive``, a Batch API line on the lane
    ``batch-lane``; ``tailgate usage --by lane`` splits them so."""
    from click.testing import CliRunner

    from tailgate.cli import main
    from tailgate.ledger import read_rows

    p = await sim("instant")
    gw: GatewayHandle = await gateway(config(p.url, batch_api=False))
    client = oai(gw.url, key=KEY_A)
    msg: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    await client.chat.completions.create(model="chat", messages=msg, max_tokens=2)
    await client.chat.completions.create(
        model="chat",
        messages=msg,
        max_tokens=2,
        extra_headers={"x-tailgate-class": "batch"},
    )
    await client.chat.completions.create(model="chat", messages=msg, max_tokens=2, service_tier="flex")
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(2))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert (await wait_done(client, batch.id)).status == "completed"
    assert gw.gateway.ledger is not None
    path = gw.gateway.ledger.path
    await gw.stop()
    lanes = sorted((r.lane, r.key_id or "-", r.traffic_class or "-") for r in read_rows(path))
    assert lanes == [
        ("batch-lane", "team-a", "batch"),
        ("batch-lane", "team-a", "batch"),
        ("batch-live", "team-a", "-"),  # flex: no class asked, the lane all the same
        ("batch-live", "team-a", "batch"),
        ("interactive", "team-a", "-"),
    ]
    out = CliRunner().invoke(main, ["usage", "--db", str(path), "--by", "lane", "--json"])
    assert out.exit_code == 0, out.output
    groups = {g["lane"]: g["requests"] for g in json.loads(out.stdout)}
    assert groups == {"batch-lane": 2, "batch-live": 2, "interactive": 1}


@pytest.mark.parametrize("batch_api", [False, True], ids=["batch-lane", "provider-batch"])
async def test_a_lines_budget_is_reserved_when_it_runs_and_a_refused_line_says_why(
    sim: SimFactory, gateway: Any, oai: Oai, batch_api: bool
) -> None:
    """A key with a daily token budget of 300: each line reserves its prompt bound + ``max_tokens`` when it runs, on
    either path. The small line fits and is answered; the four asking ``max_tokens: 1000`` never fit and are in
    the error file at once — 429 ``budget_exceeded`` with the budget's words — instead of being retried; the batch
    completes, and no refused line reached the provider."""
    p = await sim("instant", faults={"batch_turnaround_s": 0.1})
    cfg = config(p.url, batch_api=batch_api)
    cfg["keys"][0]["budget"] = {"tokens_per_day": 300}
    gw: GatewayHandle = await gateway(cfg)
    client = oai(gw.url, key=KEY_A)
    lines = chat_lines(5)
    for line in lines[1:]:
        line["body"]["max_tokens"] = 1000
    f = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = await wait_done(client, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 4)
    assert [x["custom_id"] for x in await read_file(client, done.output_file_id)] == ["req-0"]
    errors = await read_file(client, done.error_file_id)
    assert sorted(x["custom_id"] for x in errors) == [f"req-{i}" for i in range(1, 5)]
    for x in errors:
        assert x["response"]["status_code"] == 429
        error = x["response"]["body"]["error"]
        assert error["code"] == "budget_exceeded"
        assert "daily budget" in error["message"]
    answered = [t for t in p.truth.records() if t.status == 200]
    assert len(answered) == 1  # only the line that fitted reached the provider
    # The budget now holds exactly what the answered line used: its reservation was settled to its ledger row and
    # the refused lines keep nothing. A live request reserving all that is left but one token fits; one more, not.
    from tailgate.gateway.request_path.estimate import prompt_bound
    from tailgate.ledger.store import open_store

    assert gw.gateway.ledger is not None
    await gw.gateway.ledger.flush()
    with open_store(gw.gateway.ledger.path) as conn:
        (used,) = conn.execute("SELECT prompt_tokens + output_tokens FROM requests WHERE status = 200").fetchone()
    left = 300 - used

    async def live(extra: int) -> int:
        head = b'{"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": '
        raw = head + b"000}"
        out = left - 1 - int(prompt_bound(raw)) + extra
        raw = head + f"{out:03d}".encode() + b"}"
        async with aiohttp.ClientSession() as http:
            headers = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}
            async with http.post(f"{gw.url}/chat/completions", data=raw, headers=headers) as r:
                await r.read()
                return r.status

    assert await live(2) == 429  # one token over what is left
    assert await live(0) == 200


async def until_key_works(client: AsyncOpenAI) -> None:
    """A store key is loaded by the gateway within its key directory's poll."""
    for _ in range(200):
        try:
            await client.files.list()
            return
        except openai.AuthenticationError:
            await asyncio.sleep(0.02)
    raise AssertionError("the store key never worked")


@pytest.mark.parametrize("batch_api", [False, True], ids=["batch-lane", "provider-batch"])
async def test_a_key_revoked_after_its_batch_was_submitted_gets_no_line_run(
    sim: SimFactory, gateway: Any, oai: Oai, batch_api: bool
) -> None:
    """A store key submits a batch and is revoked before any line runs: every line is refused when it comes to run
    — in the error file as a 401 naming the revocation — on the batch lane (the gateway's own calls for the key) and
    for a provider job alike, and the provider receives nothing. The executor's loop polls once an hour here: the
    test runs its rounds."""
    from tailgate.ledger.keys import create_key, revoke_key
    from tailgate.ledger.store import open_store

    p = await sim("instant", faults={"batch_turnaround_s": 0.1})
    gw: GatewayHandle = await gateway(config(p.url, batch_api=batch_api, poll_interval=3600.0))
    assert gw.gateway.ledger is not None
    path = gw.gateway.ledger.path
    with open_store(path) as conn:
        _, secret = create_key(conn, "nightly")
    client = oai(gw.url, key=secret)
    await until_key_works(client)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(3))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    with open_store(path) as conn:
        revoke_key(conn, "nightly")
    await gw.gateway.core.key_directory.reload()
    for _ in range(100):
        await gw.gateway.batch_exec.tick()
        with open_store(path) as conn:
            (status,) = conn.execute("SELECT status FROM batches WHERE id = ?", (batch.id,)).fetchone()
        if status == "completed":
            break
        await asyncio.sleep(0.05)
    assert status == "completed"
    with open_store(path) as conn:
        rows = conn.execute(
            "SELECT custom_id, response_status, result FROM batch_lines WHERE batch_id = ? ORDER BY line", (batch.id,)
        ).fetchall()
    assert [(r[0], r[1]) for r in rows] == [(f"req-{i}", 401) for i in range(3)]
    for r in rows:
        assert "revoked" in json.loads(r[2])["error"]["message"]
    assert not p.truth.records()


async def test_lane_lines_count_toward_the_upstream_cap(sim: SimFactory, gateway: Any, oai: Oai) -> None:
    """``server.max_upstream_in_flight: 2`` with 4 lane lines at once (``batch.concurrency: 4``) on a provider that
    stalls: never more than 2 attempts out, lane lines included — a live request meanwhile gets the cap's 503 — and
    the lines refused by the cap go back to the queue (a 503 is retried), so the batch completes, every line once."""
    p = await sim("instant", faults={"stall_headers_s": 1.5})  # long enough for the live request to meet them
    cfg = config(p.url, batch_api=False, concurrency=4)
    cfg["server"] = {"max_upstream_in_flight": 2}
    gw: GatewayHandle = await gateway(cfg)
    client = oai(gw.url, key=KEY_A)
    f = await client.files.create(file=("in.jsonl", jsonl(chat_lines(4))), purpose="batch")
    batch = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    providers = gw.gateway.core.providers
    peak = 0
    for _ in range(500):  # until the lines fill the cap
        peak = max(peak, sum(x.in_flight for x in providers.values()))
        if peak >= 2:
            break
        await asyncio.sleep(0.005)
    assert peak == 2
    with pytest.raises(openai.InternalServerError) as refused:  # the cap is full of batch lines
        await client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert refused.value.status_code == 503
    assert "max_upstream_in_flight" in str(refused.value)
    assert sum(x.in_flight for x in providers.values()) == 2  # the lines it met are still out (not yet answered)
    done = await wait_done(client, batch.id, within_s=25.0)
    assert done.status == "completed"
    assert sorted(x["custom_id"] for x in await read_file(client, done.output_file_id)) == [
        f"req-{i}" for i in range(4)
    ]
    starts = sorted((t.received_at, t.received_at + (t.e2e_ms or 0.0) / 1000.0) for t in p.truth.records())
    assert len(starts) == 4
    for i, (t0, _) in enumerate(starts):  # at the provider: at most 2 at any moment
        assert sum(1 for s, e in starts[:i] if e > t0) <= 1
