"""Every error class of a call, each produced by a real simulator fault."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from upstream_support import Clients, SimFactory, chat_body

from tailgate.upstream import CallResult, Chunk, call


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    """UpstreamClients closed after the test."""
    made = Clients()
    yield made
    await made.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def one(
    clients: Clients, url: str, *, stream: bool = True, tokens: int = 5, **timeouts: float | None
) -> CallResult:
    c = clients(url, (), **timeouts)
    result = await call(c, "chat/completions", chat_body(tokens, stream=stream), stream=stream).collect()
    assert c.in_flight == 0
    assert c.pool.in_use == 0
    return result


async def test_connect_refused_closed_port(clients: Clients) -> None:
    """Nothing listening: error class connect, no status, no timings of a response."""
    result = await one(clients, f"http://127.0.0.1:{closed_port()}/v1")
    assert result.error_class == "connect"
    assert result.status is None
    assert result.ttft_ms is None
    assert not result.ok


async def test_connect_refused_outage(sim: SimFactory, clients: Clients) -> None:
    """A provider in a refuse-mode outage is a connect failure."""
    p = await sim("instant", faults={"outage": True, "outage_mode": "refuse"})
    assert (await one(clients, p.url)).error_class == "connect"


async def test_stall_headers(sim: SimFactory, clients: Clients) -> None:
    """No headers within the headers timeout: timeout_headers, after about that long."""
    p = await sim("instant", faults={"stall_headers_s": 2})
    result = await one(clients, p.url, headers=0.2)
    assert result.error_class == "timeout_headers"
    assert result.e2e_ms is not None
    assert 190 <= result.e2e_ms < 1000


async def test_stall_first_token(sim: SimFactory, clients: Clients) -> None:
    """Headers and role chunk arrive, the first token does not: timeout_first_token."""
    p = await sim("instant", faults={"stall_first_token_s": 2})
    result = await one(clients, p.url, first_token=0.2)
    assert result.error_class == "timeout_first_token"
    assert result.status == 200
    assert result.ttft_ms is None


async def test_slow_drip_is_idle_timeout(sim: SimFactory, clients: Clients) -> None:
    """Tokens stop coming for longer than the idle timeout: timeout_idle, with the tokens so far."""
    p = await sim("instant", faults={"slow_drip_s": 1})
    result = await one(clients, p.url, idle=0.2)
    assert result.error_class == "timeout_idle"
    assert result.ttft_ms is not None
    assert result.token_chunks >= 1


async def test_total_timeout(sim: SimFactory, clients: Clients) -> None:
    """A stream that keeps going but overruns the total budget: timeout_total."""
    p = await sim("instant", faults={"slow_drip_s": 0.05})
    result = await one(clients, p.url, tokens=50, total=0.3, idle=1)
    assert result.error_class == "timeout_total"
    assert result.e2e_ms is not None
    assert 290 <= result.e2e_ms < 1000


async def test_disconnect_is_cut(sim: SimFactory, clients: Clients) -> None:
    """The connection drops after 3 tokens without [DONE]: cut, three tokens counted."""
    p = await sim("instant", faults={"disconnect_after_tokens": 3})
    result = await one(clients, p.url, tokens=10)
    assert result.error_class == "cut"
    assert result.token_chunks == 3
    assert result.tokens_estimated


@pytest.mark.parametrize("stream", [True, False])
async def test_malformed(sim: SimFactory, clients: Clients, stream: bool) -> None:
    """A broken JSON chunk (stream) or truncated body (non-stream): malformed."""
    p = await sim("instant", faults={"malformed_rate": 1})
    result = await one(clients, p.url, stream=stream, tokens=10)
    assert result.error_class == "malformed"
    assert result.status == 200


async def test_malformed_frame_is_not_forwarded(sim: SimFactory, clients: Clients) -> None:
    """Frames before the broken one are yielded; the broken one is not."""
    p = await sim("instant", faults={"malformed_rate": 1})
    c = clients(p.url)
    async with call(c, "chat/completions", chat_body(10), stream=True) as running:
        chunks = [e async for e in running if isinstance(e, Chunk)]
    assert all(b'"cont\n' not in ch.raw for ch in chunks)
    assert running.result is not None
    assert running.result.error_class == "malformed"


async def test_http_5xx_with_parsed_error(sim: SimFactory, clients: Clients) -> None:
    """An injected 503: http_5xx with the upstream's error body parsed."""
    p = await sim("instant", faults={"error_rate": 1, "error_statuses": [503]})
    result = await one(clients, p.url)
    assert result.error_class == "http_5xx"
    assert result.status == 503
    assert result.error is not None
    assert result.error.status == 503
    assert result.error.message == "Simulated upstream error 503."
    assert result.error.type == "server_error"


async def test_http_4xx(sim: SimFactory, clients: Clients) -> None:
    """An upstream 400 (max_tokens above the model's limit): http_4xx naming the param."""
    p = await sim("instant", engine={"max_output_tokens": 10})
    result = await one(clients, p.url, tokens=20)
    assert result.error_class == "http_4xx"
    assert result.error is not None
    assert result.error.param == "max_tokens"


async def test_rate_limited_with_retry_after(sim: SimFactory, clients: Clients) -> None:
    """Past the per-key rate: rate_limited, with the wait read from retry-after-ms."""
    p = await sim("instant", faults={"rate_limit_rps": 1})
    c = clients(p.url, keys=("sk-a",))
    first = await call(c, "chat/completions", chat_body(2), stream=True).collect()
    second = await call(c, "chat/completions", chat_body(2), stream=True).collect()
    assert first.ok
    assert second.error_class == "rate_limited"
    assert second.status == 429
    assert second.retry_after_s is not None
    assert 0 < second.retry_after_s <= 1.0


async def test_insufficient_quota(sim: SimFactory, clients: Clients) -> None:
    """Quota exhausted is a 429 told apart from a rate limit."""
    p = await sim("instant", faults={"quota_exhausted": True})
    result = await one(clients, p.url)
    assert result.error_class == "insufficient_quota"
    assert result.error is not None
    assert result.error.code == "insufficient_quota"


async def test_cancel_mid_stream_releases_everything(sim: SimFactory, clients: Clients) -> None:
    """Cancelling the consuming task closes the upstream response and frees the simulator's slot."""
    p = await sim("instant", faults={"slow_drip_s": 0.05})
    c = clients(p.url)
    running = call(c, "chat/completions", chat_body(200), stream=True)
    seen = asyncio.Event()

    async def consume() -> None:
        async with running:
            async for event in running:
                if isinstance(event, Chunk) and event.has_token:
                    seen.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(seen.wait(), 5)
    assert p.engine.active == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert running.result is not None
    assert running.result.error_class == "cancelled"
    assert c.in_flight == 0
    assert c.pool.in_use == 0
    for _ in range(200):
        if p.engine.active == 0:
            break
        await asyncio.sleep(0.01)
    assert p.engine.active == 0


async def test_break_out_of_iteration_closes(sim: SimFactory, clients: Clients) -> None:
    """Leaving the ``async with`` early closes the response at once; the result says cancelled."""
    p = await sim("instant", faults={"slow_drip_s": 0.05})
    c = clients(p.url)
    async with call(c, "chat/completions", chat_body(200), stream=True) as running:
        async for event in running:
            if isinstance(event, Chunk) and event.has_token:
                break
    assert running.result is not None
    assert running.result.error_class == "cancelled"
    assert c.in_flight == 0
    assert c.pool.in_use == 0
