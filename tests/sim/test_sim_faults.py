"""Every fault kind of the simulated provider, seen by real clients over real HTTP on a loopback port.

Each test starts an in-process :class:`SimProvider` on port 0 (the ``sim`` fixture) and talks to it
with aiohttp (where the raw bytes and timing matter) or the official openai SDK with ``max_retries=0``
(where the exception a client sees is the point). Timing bands are generous because this machine is
small and noisy, but each one would fail if the fault did nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from conftest import eventually
from loop_lateness import LoopLateness
from tailgate.sim.faults import Faults, RateLimiter, TimelineEntry
from tailgate.sim.provider import SimProvider

SimFactory = Callable[..., Awaitable[SimProvider]]
JSON = dict[str, Any]

# A long stream for slot-freeing checks: 10 ms steps (instead of instant's 0.1 ms) × 500 tokens ≈ 5 s.
SLOW_STEPS = {"step_ms": 10.0}


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """One aiohttp client session per test."""
    async with aiohttp.ClientSession() as s:
        yield s


def chat_body(max_tokens: int = 10, *, stream: bool = False) -> JSON:
    return {
        "model": "sim",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


def sdk(provider: SimProvider, api_key: str = "sk-test") -> openai.AsyncOpenAI:
    """The official client, no retries, so each fault maps to exactly one exception."""
    return openai.AsyncOpenAI(api_key=api_key, base_url=provider.url, max_retries=0, timeout=10.0)


async def post_chat(
    session: aiohttp.ClientSession, provider: SimProvider, body: JSON | None = None, key: str = "sk-test"
) -> tuple[int, dict[str, str], bytes]:
    """POST a chat request; status, headers (lower-cased names) and the full body."""
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(f"{provider.url}/chat/completions", json=body or chat_body(), headers=headers) as r:
        raw = await r.read()
        return r.status, {k.lower(): v for k, v in r.headers.items()}, raw


async def control(
    session: aiohttp.ClientSession, provider: SimProvider, method: str, path: str, body: Any = None
) -> tuple[int, JSON]:
    async with session.request(method, f"{provider.root_url}/sim/{path}", json=body) as r:
        data: JSON = await r.json()
        return r.status, data


async def truth(session: aiohttp.ClientSession, provider: SimProvider) -> list[JSON]:
    _, data = await control(session, provider, "GET", "truth")
    records: list[JSON] = data["requests"]
    return records


def assert_openai_error(raw: bytes, *, type_: str | None = None, code: str | None = None) -> JSON:
    """The body is exactly OpenAI's error shape: one ``error`` object with its four keys."""
    data = json.loads(raw)
    assert set(data) == {"error"}
    err: JSON = data["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str)
    assert err["message"]
    if type_ is not None:
        assert err["type"] == type_
    if code is not None:
        assert err["code"] == code
    return err


class SSE:
    """Every ``data:`` payload of a stream with the time it arrived, and how the stream ended."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str]] = []
        self.error: BaseException | None = None
        self.headers_at = 0.0

    @property
    def payloads(self) -> list[str]:
        return [data for _, data in self.events]

    @property
    def done(self) -> bool:
        return "[DONE]" in self.payloads

    def content_times(self) -> list[float]:
        """Arrival times of chunks that carry text (not the role chunk, not the finish chunk)."""
        out = []
        for t, data in self.events:
            if data == "[DONE]":
                continue
            choices = json.loads(data)["choices"]
            if choices and choices[0]["delta"].get("content"):
                out.append(t)
        return out


async def read_stream(
    session: aiohttp.ClientSession, provider: SimProvider, body: JSON, *, limit: int | None = None
) -> SSE:
    """Stream a chat request, timing from just before the POST; stop early after ``limit`` events."""
    sse = SSE()
    t0 = time.perf_counter()
    async with session.post(f"{provider.url}/chat/completions", json=body) as r:
        sse.headers_at = time.perf_counter() - t0
        assert r.status == 200
        try:
            async for line in r.content:
                if line.startswith(b"data: "):
                    sse.events.append((time.perf_counter() - t0, line[6:].strip().decode()))
                    if limit is not None and len(sse.events) >= limit:
                        break
        except aiohttp.ClientError as exc:
            sse.error = exc
    return sse


async def wait_until(predicate: Callable[[], bool], within: float = 2.0) -> float:
    """Poll ``predicate`` every 5 ms; seconds it took to become true (fails the test on timeout)."""
    t0 = time.perf_counter()
    while not predicate():
        if time.perf_counter() - t0 > within:
            pytest.fail(f"condition not reached within {within} s")
        await asyncio.sleep(0.005)
    return time.perf_counter() - t0


# -- injected errors ------------------------------------------------------------------------------


async def test_error_rate_one_answers_every_request_with_the_status(
    sim: SimFactory, session: aiohttp.ClientSession
) -> None:
    """error_rate=1 with [502]: every request, stream or not, is a 502 in OpenAI's error shape."""
    p = await sim(faults={"error_rate": 1.0, "error_statuses": [502]})
    for i in range(20):
        status, headers, raw = await post_chat(session, p, chat_body(stream=i % 2 == 1))
        assert status == 502
        assert headers["content-type"].startswith("application/json")
        assert_openai_error(raw, type_="server_error")
    async with sdk(p) as client:
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 502
    assert p.engine.tokens_emitted == 0  # errors are answered before the engine sees the request


async def test_error_rate_share_is_close_to_the_setting(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """error_rate=0.3 over 300 requests fails roughly 30% of them (band 20–40%, > 4 sigma wide)."""
    p = await sim(faults={"error_rate": 0.3, "error_statuses": [500]})
    statuses: list[int] = []
    for _ in range(10):
        batch = await asyncio.gather(*(post_chat(session, p, chat_body(1)) for _ in range(30)))
        statuses.extend(status for status, _, _ in batch)
    assert set(statuses) == {200, 500}
    share = statuses.count(500) / len(statuses)
    assert 0.2 <= share <= 0.4, share


async def test_error_statuses_mix_all_appear(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """With several error_statuses every one of them is drawn, and nothing else is."""
    statuses = [429, 500, 503, 504]
    p = await sim(faults={"error_rate": 1.0, "error_statuses": statuses})
    seen = []
    for _ in range(60):
        status, _, raw = await post_chat(session, p)
        assert_openai_error(raw, type_="server_error" if status >= 500 else "invalid_request_error")
        seen.append(status)
    assert set(seen) == set(statuses)


# -- outages --------------------------------------------------------------------------------------


async def test_outage_503_answers_503_and_health_is_down(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """outage (mode 503): requests get 503 in error shape, /health says 503, clearing restores both."""
    p = await sim()
    async with session.get(f"{p.root_url}/health") as r:
        assert r.status == 200
    p.set_faults(Faults(outage=True))
    status, _, raw = await post_chat(session, p)
    assert status == 503
    assert_openai_error(raw)
    async with session.get(f"{p.root_url}/health") as r:
        assert r.status == 503
        assert (await r.json())["status"] == "unavailable"
    async with sdk(p) as client:
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 503
    p.clear_faults()
    assert (await post_chat(session, p))[0] == 200
    async with session.get(f"{p.root_url}/health") as r:
        assert r.status == 200


async def test_outage_reset_drops_the_connection_without_a_response(
    sim: SimFactory, session: aiohttp.ClientSession
) -> None:
    """outage_mode=reset: the client gets a connection error and never an HTTP status."""
    p = await sim(faults={"outage": True, "outage_mode": "reset"})
    for stream in (False, True):
        with pytest.raises(aiohttp.ClientConnectionError):
            await post_chat(session, p, chat_body(stream=stream))
    async with sdk(p) as client:
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])
    records = await truth(session, p)
    assert [(r["status"], r["fault"]) for r in records] == [(0, "outage")] * 3


async def test_outage_refuse_closes_the_listener_and_clearing_reopens_the_same_port(
    sim: SimFactory,
) -> None:
    """outage_mode=refuse: new connects are refused; clear_faults() listens again on the same port."""
    p = await sim()
    port = p.port
    async with aiohttp.ClientSession() as s:
        status, _ = await control(s, p, "POST", "faults", {"outage": True, "outage_mode": "refuse"})
        assert status == 200
    # A fresh connector each time: a pooled keep-alive connection would outlive the listener.
    with pytest.raises(aiohttp.ClientConnectorError) as info:
        await wait_refused(p)
    assert isinstance(info.value.os_error, ConnectionRefusedError)
    async with sdk(p) as client:
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])

    p.clear_faults()  # the listener comes back on a task: poll until a fresh connect works
    await wait_until(lambda: p._listening)
    assert p.port == port
    async with aiohttp.ClientSession() as s:
        status, _, _ = await post_chat(s, p)
        assert status == 200
    async with sdk(p) as client:
        done = await client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])
    assert done.choices[0].message.content


async def wait_refused(provider: SimProvider) -> None:
    """Request until the listener is gone (it closes on a task after the fault change)."""
    for _ in range(200):
        async with aiohttp.ClientSession() as fresh:
            await post_chat(fresh, provider)
        await asyncio.sleep(0.005)
    pytest.fail("the listener never closed")


async def test_outage_refuse_from_the_start_refuses_connects(sim: SimFactory) -> None:
    """A provider configured with a refuse outage never accepts a connection while it lasts."""
    p = await sim(faults={"outage": True, "outage_mode": "refuse"})
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientConnectorError):
            await post_chat(s, p)


# -- latency shapes -------------------------------------------------------------------------------


async def timed_stream(session: aiohttp.ClientSession, provider: SimProvider, n: int) -> tuple[float, float]:
    """(TTFT, E2E) in seconds of a stream of exactly ``n`` tokens, as the client sees them."""
    sse = await read_stream(session, provider, chat_body(n, stream=True))
    times = sse.content_times()
    assert len(times) == n
    assert sse.done
    return times[0], sse.events[-1][0]


async def test_latency_multiplier_slows_ttft_and_e2e_fivefold(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """latency_multiplier=5 plans the pre-queue wait and every engine step exactly 5× as long, and the
    simulator's own truth of each 20-token stream is at least that long (no wall-clock upper bound: the
    plan is checked as numbers, the run only from below, which a busy machine cannot break)."""
    scale = 0.03
    p = await sim("provider-a", time_scale=scale, engine={"pre_sigma": 0.0, "jitter": 0.0})
    params = p.spec.params
    pre_s = params.pre_median_s * scale  # 21.6 ms: no lognormal spread, no jitter, so the plan is exact
    step_s = params.step_ms / 1000.0 * scale  # one sequence in the batch: step_ms alone
    now = time.perf_counter()
    assert p.multiplier(now) == 1.0
    assert p.pre_queue_delay(now) == pytest.approx(pre_s)
    p.set_faults(Faults(latency_multiplier=5.0))
    assert p.multiplier(now) == 5.0
    assert p.pre_queue_delay(now) == pytest.approx(5 * pre_s)
    for _ in range(3):
        await timed_stream(session, p, 20)
    records = await truth(session, p)
    assert len(records) == 3
    for r in records:
        # sleeps end no sooner than planned (0.5 ms of slack for the event loop's millisecond timers)
        assert r["ttft_ms"] >= 1000 * 5 * (pre_s + step_s) - 0.5, r
        assert r["e2e_ms"] >= 1000 * 5 * (pre_s + 20 * step_s) - 0.5, r
        assert r["output_tokens"] == 20


async def test_spike_adds_at_least_spike_s(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """spike_rate=1, spike_s=0.3: every request takes ≥ 0.3 s more; the truth log says "spike" for those
    and nothing for the one before (the simulator's truth, not a wall-clock bound, says it was not held)."""
    p = await sim()
    assert (await post_chat(session, p))[0] == 200
    p.set_faults(Faults(spike_rate=1.0, spike_s=0.3))
    for _ in range(2):
        t0 = time.perf_counter()
        status, _, _ = await post_chat(session, p)
        assert status == 200
        assert time.perf_counter() - t0 >= 0.3
    records = await truth(session, p)
    assert [r.get("fault") for r in records] == [None, "spike", "spike"]
    assert all(r["e2e_ms"] >= 300 for r in records[1:])


async def test_stall_headers_holds_back_the_response_headers(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """stall_headers_s=0.3: the status line and headers of a stream arrive only after the stall; the
    stream before it had no fault in the truth log."""
    p = await sim()
    assert (await read_stream(session, p, chat_body(5, stream=True))).done
    p.set_faults(Faults(stall_headers_s=0.3))
    stalled = await read_stream(session, p, chat_body(5, stream=True))
    assert stalled.headers_at >= 0.3
    assert stalled.done
    assert [r["fault"] for r in await truth(session, p)] == [None, "stall_headers"]


async def test_hold_keeps_requests_in_flight_until_released(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """hold: requests wait before their headers (counted in /sim/state's ``held``) until ``hold`` is set false,
    then all complete; DELETE /sim/faults releases too, a held client that leaves is no longer held, and
    stopping the provider drops the connections it holds."""
    p = await sim()
    assert (await control(session, p, "POST", "faults", {"hold": True}))[0] == 200
    held = [asyncio.ensure_future(post_chat(session, p, chat_body(5, stream=s))) for s in (False, True)]
    await eventually(lambda: p.held == 2, 10.0)
    assert (await control(session, p, "GET", "state"))[1]["held"] == 2
    assert not any(t.done() for t in held)
    assert p.engine.tokens_emitted == 0
    assert (await control(session, p, "POST", "faults", {"hold": False}))[0] == 200
    assert [(await t)[0] for t in held] == [200, 200]
    assert p.held == 0
    assert [r["fault"] for r in await truth(session, p)] == ["hold", "hold"]

    p.set_faults(Faults(hold=True))
    leaver = asyncio.ensure_future(post_chat(session, p))
    await eventually(lambda: p.held == 1, 10.0)
    leaver.cancel()
    await eventually(lambda: p.held == 0, 10.0)
    cleared = asyncio.ensure_future(post_chat(session, p))
    await eventually(lambda: p.held == 1, 10.0)
    assert (await control(session, p, "DELETE", "faults"))[0] == 200
    assert (await cleared)[0] == 200

    p.set_faults(Faults(hold=True))
    dropped = asyncio.ensure_future(post_chat(session, p))
    await eventually(lambda: p.held == 1, 10.0)
    await asyncio.wait_for(p.stop(), 10.0)  # stopping drops what it holds instead of waiting on it
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await dropped


async def test_stall_first_token_sends_headers_early_and_content_late(
    sim: SimFactory, session: aiohttp.ClientSession
) -> None:
    """stall_first_token_s=0.4: headers and the role chunk reach the client while the engine has produced
    no token yet (event order, not a wall clock), the first text only after ≥ 0.4 s."""
    p = await sim(faults={"stall_first_token_s": 0.4})
    async with session.post(f"{p.url}/chat/completions", json=chat_body(5, stream=True)) as r:
        assert r.status == 200
        emitted_at_headers = p.engine.tokens_emitted
        role = (await r.content.readline()).strip()
        emitted_at_role = p.engine.tokens_emitted
        assert json.loads(role.removeprefix(b"data: "))["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        await r.read()
    assert (emitted_at_headers, emitted_at_role, p.engine.tokens_emitted) == (0, 0, 5)
    sse = await read_stream(session, p, chat_body(5, stream=True))
    content = sse.content_times()
    assert len(content) == 5
    assert content[0] >= 0.4
    assert sse.done


async def test_slow_drip_spaces_tokens(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """slow_drip_s=0.05: every gap between text chunks is ≥ 50 ms at the server, ≈ 50 ms at the client."""
    p = await sim(faults={"slow_drip_s": 0.05})
    async with LoopLateness() as late:
        sse = await read_stream(session, p, chat_body(6, stream=True))
    times = sse.content_times()
    assert len(times) == 6
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # At the client a chunk is seen late by up to how late this loop woke (measured beside the read), never early:
    # a gap (and the total) shrinks by at most that much. On an idle machine that is a few ms.
    slack = late.max_s
    assert statistics.median(gaps) >= 0.045 - slack, (gaps, slack)
    assert times[-1] - times[0] >= 5 * 0.05 * 0.95 - slack, (times, slack)
    record = (await truth(session, p))[-1]
    assert record["fault"] == "slow_drip"
    assert len(record["itl_ms"]) == 5
    # The simulator runs on this loop: a write lands late by up to its lateness, so a gap after a late write is
    # shorter by that much (48.2 ms was seen under two burners). Idle, writes land µs after their step.
    assert min(record["itl_ms"]) >= 49.5 - 1000.0 * slack, (record["itl_ms"], slack)


# -- broken streams -------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 3])
async def test_disconnect_after_tokens_cuts_a_stream_after_k_chunks(
    sim: SimFactory, session: aiohttp.ClientSession, k: int
) -> None:
    """disconnect_after_tokens=k: exactly k text chunks, then EOF without [DONE]; the slot is freed."""
    p = await sim(faults={"disconnect_after_tokens": k}, engine=SLOW_STEPS)
    sse = await read_stream(session, p, chat_body(500, stream=True))
    assert isinstance(sse.error, aiohttp.ClientPayloadError)
    assert len(sse.content_times()) == k
    assert not sse.done
    assert not any('"finish_reason":"' in data for data in sse.payloads)
    assert p.engine.active == 0  # released before the socket was dropped
    assert p.engine.tokens_emitted <= k + 1  # the engine stopped at the cut, far short of the 500 planned
    record = (await truth(session, p))[-1]
    assert (record["fault"], record.get("output_tokens", 0)) == ("disconnect", k)  # 0 is omitted


async def collect_text(stream: openai.AsyncStream[ChatCompletionChunk], texts: list[str]) -> None:
    """Append the text of each SDK chunk to ``texts`` until the stream ends (or raises)."""
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            texts.append(chunk.choices[0].delta.content)


async def test_disconnect_after_tokens_raises_in_the_sdk(sim: SimFactory) -> None:
    """The SDK yields the k chunks, then raises an APIError (connection) instead of ending cleanly."""
    p = await sim(faults={"disconnect_after_tokens": 3}, engine=SLOW_STEPS)
    texts: list[str] = []
    async with sdk(p) as client:
        stream = await client.chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "x"}], max_tokens=500, stream=True
        )
        with pytest.raises(openai.APIError):
            await collect_text(stream, texts)
    assert len(texts) == 3
    assert p.engine.active == 0


async def test_disconnect_after_tokens_drops_a_non_stream_request(
    sim: SimFactory, session: aiohttp.ClientSession
) -> None:
    """A non-stream request under disconnect_after_tokens gets no response at all, only a closed socket."""
    p = await sim(faults={"disconnect_after_tokens": 2}, engine=SLOW_STEPS)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await post_chat(session, p, chat_body(500))
    assert p.engine.active == 0
    assert p.engine.tokens_emitted <= 3  # dropped at the cut, not after the 500 tokens (5 s) it asked for
    async with sdk(p) as client:
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(
                model="sim", messages=[{"role": "user", "content": "x"}], max_tokens=500
            )
    assert p.engine.active == 0
    records = await truth(session, p)
    assert [(r["status"], r["fault"], r["output_tokens"]) for r in records] == [(0, "disconnect", 2)] * 2


async def test_client_leaving_mid_stream_frees_its_slot_at_once(
    sim: SimFactory, session: aiohttp.ClientSession
) -> None:
    """A client that closes a 5 s stream after 3 chunks frees the engine slot at once: the engine emits only
    a handful of tokens more (the engine's own count, which a slow machine slows down as much as the close)."""
    p = await sim(engine=SLOW_STEPS)
    async with session.post(f"{p.url}/chat/completions", json=chat_body(500, stream=True)) as r:
        seen = 0
        async for line in r.content:
            if line.startswith(b"data: ") and b'"content":"' in line and b'"content":""' not in line:
                seen += 1
                if seen == 3:
                    break
        assert p.engine.active == 1
        r.close()  # drop the connection, as a client that gives up does
    await wait_until(lambda: p.engine.active == 0, within=10.0)
    assert p.engine.snapshot()["tokens_emitted"] < 3 + 20
    assert [r.status for r in p.truth.records()] == [499]  # the truth says the client closed it


async def test_malformed_stream_has_one_chunk_that_is_not_json(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """malformed_rate=1: one data event of the stream is broken JSON; the SDK cannot parse the stream."""
    p = await sim(faults={"malformed_rate": 1.0})
    sse = await read_stream(session, p, chat_body(10, stream=True))
    broken = []
    for data in sse.payloads:
        if data == "[DONE]":
            continue
        try:
            json.loads(data)
        except ValueError:
            broken.append(data)
    assert len(broken) == 1
    assert (await truth(session, p))[-1]["fault"] == "malformed"
    async with sdk(p) as client:
        stream = await client.chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "x"}], max_tokens=10, stream=True
        )
        with pytest.raises(ValueError, match="Unterminated string"):
            await collect_text(stream, [])


async def test_malformed_non_stream_body_is_not_json(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """malformed_rate=1: a non-stream 200 body is truncated JSON, which the SDK fails to decode."""
    p = await sim(faults={"malformed_rate": 1.0})
    status, headers, raw = await post_chat(session, p)
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    with pytest.raises(ValueError, match=r"Unterminated string|Expecting"):
        json.loads(raw)
    async with sdk(p) as client:
        with pytest.raises(ValueError, match=r"Unterminated string|Expecting"):
            await client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])


# -- rate limits and quota ------------------------------------------------------------------------

RESET_FORMAT = re.compile(r"^(\d+m\d+s|\d+s|\d+ms)$")


async def test_rate_limit_rps_per_key_with_headers_and_refill(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """rate_limit_rps=5: a burst of 10 on key A gets 5 OKs then 429s with headers; key B has its own; a second
    later (on the limiter's clock, a fake one here, so a slow machine's burst earns no refill) A has 5 again."""
    p = await sim(faults={"rate_limit_rps": 5})
    now = [1000.0]
    p.limiter = RateLimiter(clock=lambda: now[0])

    async def burst(key: str) -> list[tuple[int, dict[str, str], bytes]]:
        return [await post_chat(session, p, chat_body(1), key=key) for _ in range(10)]

    for key in ("key-A", "key-B"):
        results = await burst(key)
        assert [status for status, _, _ in results] == [200] * 5 + [429] * 5
        assert results[0][1]["x-ratelimit-limit-requests"] == "5"
        assert results[0][1]["x-ratelimit-remaining-requests"] == "4"
        for status, headers, raw in results:
            assert RESET_FORMAT.match(headers["x-ratelimit-reset-requests"])
            if status == 429:
                assert_openai_error(raw, type_="requests", code="rate_limit_exceeded")
                assert headers["x-ratelimit-limit-requests"] == "5"
                assert headers["x-ratelimit-remaining-requests"] == "0"
                assert headers["retry-after"] == "1"
                assert headers["retry-after-ms"] == "200"  # one request's worth of a 5/s bucket

    async with sdk(p, api_key="key-A") as client:
        with pytest.raises(openai.RateLimitError) as info:
            await client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "rate_limit_exceeded"
    assert "retry-after" in info.value.response.headers

    now[0] += 0.2  # a fifth of a second refills one request
    assert [status for status, _, _ in await burst("key-A")] == [200] + [429] * 9
    now[0] += 1.0  # a full second refills the whole bucket, no more
    assert [status for status, _, _ in await burst("key-A")] == [200] * 5 + [429] * 5


async def test_rate_limit_rpm_burst_and_headers(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """rate_limit_rpm=3: 3 OKs, then 429 with a retry-after of ~20 s and per-minute headers."""
    p = await sim(faults={"rate_limit_rpm": 3})
    results = [await post_chat(session, p, chat_body(1), key="key-C") for _ in range(5)]
    assert [status for status, _, _ in results] == [200, 200, 200, 429, 429]
    _, headers, raw = results[3]
    assert_openai_error(raw, code="rate_limit_exceeded")
    assert headers["x-ratelimit-limit-requests"] == "3"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert 15 <= int(headers["retry-after"]) <= 20  # one request per 20 s refills
    assert RESET_FORMAT.match(headers["x-ratelimit-reset-requests"])
    assert (await post_chat(session, p, chat_body(1), key="key-D"))[0] == 200


async def test_quota_exhausted_is_a_429_insufficient_quota(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """quota_exhausted: every request is 429 insufficient_quota; the SDK raises RateLimitError with it."""
    p = await sim(faults={"quota_exhausted": True})
    status, _, raw = await post_chat(session, p)
    assert status == 429
    assert_openai_error(raw, type_="insufficient_quota", code="insufficient_quota")
    async with sdk(p) as client:
        with pytest.raises(openai.RateLimitError) as info:
            await client.chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "insufficient_quota"
    assert p.engine.tokens_emitted == 0


# -- run-time control, timeline, ground truth -----------------------------------------------------


async def test_control_api_get_post_merge_delete(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """GET shows defaults; two POSTs of different fields both stay active; DELETE clears everything."""
    p = await sim()
    status, data = await control(session, p, "GET", "faults")
    assert status == 200
    assert data == {"faults": Faults().model_dump(), "active": False}

    status, _ = await control(session, p, "POST", "faults", {"error_rate": 1.0, "error_statuses": [418]})
    assert status == 200
    status, data = await control(session, p, "POST", "faults", {"latency_multiplier": 2.5})
    assert status == 200
    assert data["active"] is True
    assert data["faults"]["error_rate"] == 1.0
    assert data["faults"]["error_statuses"] == [418]
    assert data["faults"]["latency_multiplier"] == 2.5
    assert (await post_chat(session, p))[0] == 418  # the first POST still acts after the second

    status, data = await control(session, p, "DELETE", "faults")
    assert status == 200
    assert data == {"faults": Faults().model_dump(), "active": False}
    assert p.faults == Faults()
    assert (await post_chat(session, p))[0] == 200


@pytest.mark.parametrize(
    ("update", "param"),
    [
        ({"bogus": 1}, "bogus"),
        ({"error_rate": 2}, "error_rate"),
        ({"outage_mode": "explode"}, "outage_mode"),
        ({"latency_multiplier": 0}, "latency_multiplier"),
        ({"error_statuses": [200]}, "error_statuses[0]"),
    ],
)
async def test_control_api_rejects_bad_updates_naming_the_field(
    sim: SimFactory, session: aiohttp.ClientSession, update: JSON, param: str
) -> None:
    """An unknown field or an invalid value is a 400 in OpenAI error shape whose param names it."""
    p = await sim(faults={"spike_s": 0.01})
    async with session.post(f"{p.root_url}/sim/faults", json=update) as r:
        assert r.status == 400
        err = assert_openai_error(await r.read(), type_="invalid_request_error")
    assert err["param"] == param
    assert param.split("[")[0] in err["message"]
    assert p.faults == Faults(spike_s=0.01)  # nothing was applied


async def test_sim_state_reports_live_engine_numbers(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """/sim/state shows the engine: one active slot during a stream, tokens and steps after it."""
    p = await sim(engine=SLOW_STEPS, faults={"spike_s": 0.5})
    _, state = await control(session, p, "GET", "state")
    assert state["engine"]["active"] == 0
    assert state["faults"] == {"spike_s": 0.5}
    async with session.post(f"{p.url}/chat/completions", json=chat_body(20, stream=True)) as r:
        await r.content.readline()  # the role chunk: the sequence is in the engine now
        _, state = await control(session, p, "GET", "state")
        assert state["engine"]["active"] == 1
        await r.read()
    _, state = await control(session, p, "GET", "state")
    engine = state["engine"]
    assert engine["active"] == 0
    assert engine["queued"] == 0
    assert engine["tokens_emitted"] == 20
    assert engine["steps"] >= 20
    assert state["requests"] == 1


async def test_timeline_outage_then_recovery(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """A timeline outage at 0.2 s cleared at 0.5 s shows as OK, then 503, then OK: never before those times,
    and each answer sampled before a switch is still the old phase's (a late machine only delays a switch)."""
    timeline = (TimelineEntry(at=0.2, set=Faults(outage=True)), TimelineEntry(at=0.5, clear=True))
    p = await sim(timeline=timeline)
    samples: list[tuple[float, int]] = []
    phases = [200]
    changes: list[float] = []
    # Sample until the third phase shows (bounded: 500 samples, far more than a slow machine needs).
    for _ in range(500):
        now = time.perf_counter() - p.started_at
        status = (await post_chat(session, p, chat_body(1)))[0]
        samples.append((now, status))
        if status != phases[-1]:
            phases.append(status)
            changes.append(now)
        if len(phases) == 3:
            break
        await asyncio.sleep(0.01)
    assert phases == [200, 503, 200], samples
    # A sample's time is taken before its request is sent, so the first sample of a new phase may start a
    # hair before the switch (the request itself arrives after it): 10 ms of slack below.
    assert changes[0] >= 0.19
    assert changes[1] >= 0.49
    assert len(samples) >= 5  # the phases were sampled, not jumped over


async def test_truth_records_the_fault_and_status(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """/sim/truth names the fault that shaped each request, next to the status the client got."""
    p = await sim()
    steps: list[tuple[Faults | None, int]] = [
        (None, 1),
        (Faults(error_rate=1.0, error_statuses=[502]), 1),
        (Faults(quota_exhausted=True), 1),
        (Faults(rate_limit_rps=1), 2),
        (Faults(outage=True), 1),
    ]
    for faults, n in steps:
        p.clear_faults()
        if faults is not None:
            p.set_faults(faults)
        for _ in range(n):
            await post_chat(session, p, chat_body(2))
    records = await truth(session, p)
    assert [(r["status"], r.get("fault")) for r in records] == [
        (200, None),
        (502, "error_rate"),
        (429, "quota_exhausted"),
        (200, None),
        (429, "rate_limit"),
        (503, "outage"),
    ]
    assert records[0]["output_tokens"] == 2
