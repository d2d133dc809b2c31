"""Answer quality wired into the gateway (docs/routing.md, promise 8 and "An answer that is not an answer"):
live signals per provider × model × signal from every chat answer, the non-answer retried on another route before
its first byte, the ledger and /metrics, and the adaptive policy moving share on quality — real simulated
providers with their faults, a real gateway, the official openai SDK as the client."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import closing
from typing import Any

import aiohttp
import openai
import pytest

from conftest import GatewayHandle, SimFactory, two_provider_config
from tailgate.ledger import open_db, read_rows
from tailgate.ledger.quality import read_rates
from tailgate.ledger.store import open_store
from tailgate.sim.faults import Faults

GwFactory = Callable[..., Awaitable[GatewayHandle]]
ALIAS = "deepseek-v3.2"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
                "required": ["path"],
            },
        },
    }
]


def _client(gw: GatewayHandle) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url, api_key="sk-unused", max_retries=0)


Answer = tuple[str | None, str, bool, str]


async def _ask(client: openai.AsyncOpenAI, stream: bool, max_tokens: int = 4, **extra: Any) -> Answer:
    """(finish_reason, content, tool call came, provider) of one chat request, stream or not."""
    messages: Any = [{"role": "user", "content": "hi"}]
    if not stream:
        raw = await client.chat.completions.with_raw_response.create(
            model=ALIAS, messages=messages, max_tokens=max_tokens, **extra
        )
        done = raw.parse()
        choice = done.choices[0]
        return (
            choice.finish_reason,
            choice.message.content or "",
            bool(choice.message.tool_calls),
            raw.headers["x-tailgate-provider"],
        )
    async with client.chat.completions.with_streaming_response.create(
        model=ALIAS, messages=messages, max_tokens=max_tokens, stream=True, **extra
    ) as resp:
        provider = resp.headers["x-tailgate-provider"]
        finish, text, tool = None, [], False
        async for chunk in await resp.parse():
            for c in chunk.choices:
                text.append(c.delta.content or "")
                tool = tool or bool(c.delta.tool_calls)
                finish = c.finish_reason or finish
        return finish, "".join(text), tool, provider


async def _many(client: openai.AsyncOpenAI, n: int, concurrency: int = 16, **extra: Any) -> list[Any]:
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> Any:
        async with sem:
            return await _ask(client, stream=i % 2 == 1, **extra)

    return await asyncio.gather(*(one(i) for i in range(n)))


async def _metrics(gw: GatewayHandle) -> str:
    async with aiohttp.ClientSession() as s, s.get(f"{gw.root_url}/metrics") as r:
        return await r.text()


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _weighted(a: str, b: str, **quality: Any) -> dict[str, Any]:
    config = two_provider_config(a, b, routing={"policy": "weighted", "probes": {"enabled": False}})
    config["models"][ALIAS]["routes"][1]["classes"] = []
    if quality:
        config["models"][ALIAS]["quality"] = quality
    return config


@pytest.mark.slow
async def test_content_filter_on_the_primary_never_reaches_a_client(sim: SimFactory, gateway: GwFactory) -> None:
    """Must-show: 5 % of the primary's answers are content-filter refusals with no output; with
    ``retry_filtered`` each is held before its first byte and answered by the secondary: 0 reach a client of
    400 (half streamed), and each retry is on the ledger (2 attempts, served by the secondary), in the store's
    ``quality_counts`` and on /metrics."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    a.set_faults(Faults(content_filter_rate=0.05))
    gw = await gateway(_weighted(a.url, b.url, retry_filtered=True))
    async with _client(gw) as client:
        answers = await _many(client, 400)
    filtered = [r for r in a.truth.records() if r.degraded == "content_filtered"]
    assert len(filtered) >= 5, len(filtered)  # ~0.05 x 320
    assert [x for x in answers if x[0] in ("content_filter", "sensitive") or not x[1]] == []
    text = await _metrics(gw)
    retried = _metric(text, "tailgate_quality_retries_total", provider="primary", reason="content_filtered")
    assert retried == len(filtered)
    assert _metric(text, "tailgate_quality_signals_total", provider="primary", signal="content_filtered") == len(
        filtered
    )
    assert _metric(text, "tailgate_quality_signals_total", provider="secondary", signal="content_filtered") == 0
    checked = _metric(text, "tailgate_quality_checked_total", provider="primary", signal="content_filtered")
    assert checked == len(a.truth.records())
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    assert len(rows) == 400
    again = [r for r in rows if r.attempts == 2]
    assert len(again) == len(filtered)
    assert {(r.provider, r.status, r.outcome) for r in again} == {("secondary", 200, "ok")}
    with closing(open_db(gw.gateway.ledger.path)) as conn:
        rates = read_rates(conn, since=0, until=1e12)
    assert rates[("primary", "up-primary")]["content_filtered"].hits == len(filtered)
    print(
        f"\ncontent_filter 5%: {len(filtered)} filtered of {len(a.truth.records())} primary answers, "
        f"{len(again)} retried (2 attempts on the ledger), 0 of 400 reached a client"
    )


async def test_empty_answers_are_retried_by_default_and_filtered_ones_pass(sim: SimFactory, gateway: GwFactory) -> None:
    """``retry_empty`` is on by default: an empty answer (stop, no output) is answered by the other route. A
    content-filter refusal is not retried by default: it reaches the client as it came (``x-tailgate-retried``
    absent)."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    a.set_faults(Faults(empty_answer_rate=1.0))
    config = _weighted(a.url, b.url)
    config["models"][ALIAS]["routes"][1]["weight"] = 0  # the secondary: a fallback only
    gw = await gateway(config)
    async with _client(gw) as client:
        for stream in (False, True):
            finish, content, _, provider = await _ask(client, stream)
            assert provider == "secondary", (stream, finish, content, provider)
            assert finish in ("stop", "length")
            assert content
        a.set_faults(Faults(content_filter_rate=1.0))
        for stream in (False, True):
            finish, content, _, provider = await _ask(client, stream)
            assert (finish, content, provider) == ("content_filter", "", "primary"), stream
    text = await _metrics(gw)
    assert _metric(text, "tailgate_quality_retries_total", provider="primary", reason="empty_answer") == 2
    assert _metric(text, "tailgate_quality_signals_total", provider="primary", signal="empty_answer") == 2
    assert _metric(text, "tailgate_quality_signals_total", provider="primary", signal="content_filtered") == 2


async def test_no_other_route_passes_the_original_answer(sim: SimFactory, gateway: GwFactory) -> None:
    """The non-answer is held while the secondary is tried; the secondary fails (500): the client gets the held
    answer as it came, unary and stream, with ``x-tailgate-retried`` saying why."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    a.set_faults(Faults(content_filter_rate=1.0))
    b.set_faults(Faults(error_rate=1.0, error_statuses=[500]))
    config = _weighted(a.url, b.url, retry_filtered=True)
    config["models"][ALIAS]["routes"][1]["weight"] = 0
    gw = await gateway(config)
    async with _client(gw) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model=ALIAS, messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        finish, content, _, provider = await _ask(client, True)
    assert raw.headers["x-tailgate-retried"] == "content_filtered"
    assert raw.headers["x-tailgate-provider"] == "primary"
    assert raw.headers["x-tailgate-attempts"] == "2"
    assert raw.parse().choices[0].finish_reason == "content_filter"
    assert (finish, content, provider) == ("content_filter", "", "primary")
    await gw.stop()
    rows = read_rows(gw.gateway.ledger.path)
    assert [(r.provider, r.status, r.attempts) for r in rows] == [("primary", 200, 2)] * 2


async def test_tool_call_signals_counted_per_route(sim: SimFactory, gateway: GwFactory) -> None:
    """Every tool call is checked (arguments JSON, the declared name, the schema), unary and stream: the
    primary's broken ones (sim truth) are exactly its hits, the secondary's none, and the store has them."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    a.set_faults(Faults(tool_call_break_rate=0.3))
    gw = await gateway(_weighted(a.url, b.url))
    async with _client(gw) as client:
        answers = await _many(client, 60, tools=TOOLS, tool_choice="required", max_tokens=200)
    assert all(x[2] for x in answers)
    broken = Counter(r.degraded for r in a.truth.records() if r.degraded)
    assert sum(broken.values()) >= 3, broken
    text = await _metrics(gw)
    for signal in ("tool_args_invalid_json", "tool_args_schema_mismatch", "tool_unknown_name"):
        assert _metric(text, "tailgate_quality_signals_total", provider="primary", signal=signal) == broken[signal]
        assert _metric(text, "tailgate_quality_signals_total", provider="secondary", signal=signal) == 0
        assert _metric(text, "tailgate_quality_checked_total", provider="primary", signal=signal) == len(
            a.truth.records()
        )
    board = gw.gateway.quality.board.view([("primary", "up-primary")], gw.gateway.quality.clock())
    tool = board[("primary", "up-primary")]["tool_call"]
    assert (tool.trials, tool.trials - tool.successes) == (len(a.truth.records()), sum(broken.values()))
    await gw.gateway.quality_sync.tick()
    with closing(open_db(gw.gateway.ledger.path)) as conn:
        rates = read_rates(conn, since=0, until=1e12)
    assert rates[("primary", "up-primary")]["tool_args_invalid_json"].hits == broken["tool_args_invalid_json"]
    assert re.search(r"tailgate_quality_checked_total\{[^}]*signal=\"content_filtered\"", text)


ADMIN = {"Authorization": "Bearer admin-key-0123456789"}


async def _weights(session: aiohttp.ClientSession, gw: GatewayHandle) -> dict[str, Any]:
    async with session.get(f"{gw.root_url}/admin/providers", headers=ADMIN) as r:
        admin = await r.json()
    weights: dict[str, Any] = admin["routing"][ALIAS]["weights"]
    return weights


@pytest.mark.slow
async def test_adaptive_takes_share_from_broken_tool_calls_and_gives_it_back(
    sim: SimFactory, gateway: GwFactory
) -> None:
    """Promise 8 on live traffic, time-scaled (window 8 s, recent 4 s: the defaults' 10 min / 2 min ÷ 75): the
    primary breaks 10 % of its tool calls while the secondary breaks none. Held within seconds (the reason on
    /admin/providers), it gets no client request while held; the fault cleared, it is released after a window
    without evidence and takes its share again."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    config = two_provider_config(
        a.url,
        b.url,
        admin_key="admin-key-0123456789",
        routing={
            "probes": {"enabled": False},
            "slo": {"ttft_p90": "5s", "e2e_p90": "10s"},  # latency never moves anything here
            "adaptive": {"slow_start": "1s"},
            "quality": {"window": "8s", "recent": "4s", "signals": ["tool_call"]},
        },
    )
    for route in config["models"][ALIAS]["routes"]:
        route["weight"], route["classes"] = 50, []
    gw = await gateway(config)
    loop = asyncio.get_running_loop()
    a.set_faults(Faults(tool_call_break_rate=0.1))
    async with _client(gw) as client, aiohttp.ClientSession() as session:

        async def burst(n: int) -> Counter[str]:
            answers = await _many(client, n, tools=TOOLS, tool_choice="required", max_tokens=200)
            return Counter(x[3] for x in answers)

        t0 = loop.time()
        held_after = None
        while loop.time() - t0 < 30:
            await burst(40)
            weights = await _weights(session, gw)
            if weights["primary"]["promise"] == "quality":
                held_after = loop.time() - t0
                break
        assert held_after is not None, weights
        assert weights["primary"]["effective_weight"] == 0.0
        assert weights["primary"]["reason"].startswith("quality: tool_call"), weights["primary"]["reason"]
        assert weights["secondary"]["promise"] != "quality"  # never every route
        served = await burst(60)
        assert served["primary"] == 0, served
        a.set_faults(Faults())
        t1 = loop.time()
        back_after = None
        while loop.time() - t1 < 30:
            served = await burst(40)
            if served["primary"] >= 10:
                back_after = loop.time() - t1
                break
            await asyncio.sleep(0.2)
        assert back_after is not None
    print(
        f"\ntool calls 10% broken: held after {held_after:.1f}s, share back {back_after:.1f}s after the fault cleared"
    )


def _canaries(target: str, *right: bool, ago_s: float = 0.0) -> None:
    """Graded canaries as the monitor writes them (``samples.accuracy_ok``), on either backend."""
    with closing(open_store(target)) as conn, conn.transaction() as tx:
        for ok in right:
            tx.execute(
                "INSERT INTO samples (ts, provider, model, workload, status, accuracy_ok) VALUES (?, ?, ?, ?, ?, ?)",
                (time.time() - ago_s, "primary", "up-primary", "accuracy", 200, int(ok)),
            )


async def test_the_board_is_shared_through_the_store_with_the_monitors_canaries(store_target: str) -> None:
    """Two replicas' boards over one store (a real SQLite file, a real PostgreSQL database): each one's counts
    reach the other within a tick, never counted twice, and the monitor's graded canaries
    (``samples.accuracy_ok``) reach both — those graded before a replica started too."""
    from tailgate.config.loader import validate_data
    from tailgate.config.schema import GatewayConfig
    from tailgate.gateway.health.quality_sync import QualitySync
    from tailgate.gateway.metrics.gateway_metrics import GatewayMetrics
    from tailgate.gateway.request_path.answer_quality import AnswerQuality
    from tailgate.quality.signals import Observation

    cfg = validate_data(two_provider_config("http://a.invalid", "http://b.invalid"), GatewayConfig, "t")
    replicas = []
    for _ in range(2):
        m = GatewayMetrics()
        q = AnswerQuality.of(cfg, m.quality, m.quality_retries)
        replicas.append((q, QualitySync(q, store_target, window_s=600)))
    (qa, sa), (qb, sb) = replicas
    _canaries(store_target, False, ago_s=5)  # graded before either replica started: read at start
    await sa.tick()
    await sb.tick()
    key = ("primary", "up-primary")

    def counts(q: AnswerQuality, signal: str) -> tuple[int, int]:
        c = q.board.view([key], q.clock()).get(key, {}).get(signal)
        return (0, 0) if c is None else (c.successes, c.trials)

    assert counts(qa, "canary") == counts(qb, "canary") == (0, 1)
    for i in range(30):  # replica a: 30 answers, 3 filtered
        qa.count("primary", "up-primary", [Observation("content_filtered", i % 10 == 0)])
    qb.count("primary", "up-primary", [Observation("content_filtered", False)])
    _canaries(store_target, True, True)
    await sa.tick()
    await sb.tick()
    await sa.tick()
    assert counts(qa, "content_filter") == counts(qb, "content_filter") == (28, 31)
    assert counts(qa, "canary") == counts(qb, "canary") == (2, 3)
    await sa.tick()
    await sb.tick()
    assert counts(qa, "content_filter") == counts(qb, "content_filter") == (28, 31)  # never twice
    with closing(open_store(store_target)) as conn:
        rates = read_rates(conn, since=0, until=1e12)
    assert (rates[key]["content_filtered"].checked, rates[key]["content_filtered"].hits) == (31, 3)


async def test_json_mode_and_thinking_are_judged_on_what_the_client_got(sim: SimFactory, gateway: GwFactory) -> None:
    """``response_format: json_object`` answers that do not parse and thinking requests answered without reasoning
    are counted exactly as the client's own reading of each answer says, unary and streamed; a request that asked
    for neither is never checked on them."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    config = _weighted(a.url, b.url)
    config["models"][ALIAS]["routes"][1]["weight"] = 0
    gw = await gateway(config)
    expected = Counter[str]()

    async def one(session: aiohttp.ClientSession, stream: bool, **extra: Any) -> None:
        body = {"model": ALIAS, "messages": [{"role": "user", "content": "hi"}], "stream": stream, **extra}
        if stream:
            body["stream_options"] = {"include_usage": True}
        async with session.post(f"{gw.url}/chat/completions", json=body) as r:
            raw = await r.read()
            assert r.status == 200, raw
        if stream:
            chunks = [json.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: {")]
            content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
            reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content") or "" for c in chunks if c["choices"])
            finish = next(
                c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]
            )
            usage: dict[str, Any] = next((c["usage"] for c in chunks if c.get("usage")), {})
        else:
            usage = json.loads(raw).get("usage") or {}
            choice = json.loads(raw)["choices"][0]
            content, finish = choice["message"].get("content") or "", choice["finish_reason"]
            reasoning = choice["message"].get("reasoning_content") or ""
        thought = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if "response_format" in extra and finish == "stop":
            expected["json checked"] += 1
            try:
                json.loads(content)
            except ValueError:
                expected["json hits"] += 1
        if "reasoning_effort" in extra:
            expected["reasoning checked"] += 1
            expected["reasoning hits"] += not (reasoning or thought)

    async with aiohttp.ClientSession() as session:
        for i in range(12):
            await one(session, i % 2 == 1, response_format={"type": "json_object"})
            await one(session, i % 2 == 1, reasoning_effort="low")
    text = await _metrics(gw)

    def m(kind: str, signal: str) -> float:
        return _metric(text, f"tailgate_quality_{kind}_total", provider="primary", signal=signal)

    assert expected["json checked"] >= 6, expected
    assert (m("checked", "json_invalid"), m("signals", "json_invalid")) == (
        expected["json checked"],
        expected["json hits"],
    )
    assert (m("checked", "reasoning_missing"), m("signals", "reasoning_missing")) == (
        expected["reasoning checked"],
        expected["reasoning hits"],
    )
