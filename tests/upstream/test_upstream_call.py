"""Successful calls against the simulator: timings match its ground truth, usage is handled."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest
from upstream_support import Clients, SimFactory, chat_body, near, run

from tailgate.upstream import Body, CallResult, Chunk, Done, Headers, Sent, call
from tailgate.wire.sse import SSEDecoder


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    """UpstreamClients closed after the test."""
    made = Clients()
    yield made
    await made.close()


async def test_stream_matches_truth(sim: SimFactory, clients: Clients) -> None:
    """A streamed call's status, usage, TTFT, E2E and ITL agree with the simulator's truth.

    The truth starts when the simulator's handler starts, ours when the request is handed to the
    pool; the request's transit (``received_at - started_at``, however long it was) is taken
    off ours before comparing, so the test holds on a loaded machine too.
    """
    p = await sim("provider-a", time_scale=0.2)
    c = clients(p.url)
    assert (await call(c, "chat/completions", chat_body(1), stream=True).collect()).ok  # warm the connection
    events = await run(call(c, "chat/completions", chat_body(12), stream=True))
    result = events[-1]
    assert isinstance(result, CallResult)
    assert [type(e) for e in events[:2]] == [Sent, Headers]
    assert isinstance(events[-2], Done)
    assert events[-2].raw == b"data: [DONE]\n\n"
    truth = p.truth.records()[-1]
    transit_ms = (truth.received_at - result.started_at) * 1000.0
    assert transit_ms >= -1.0  # it cannot arrive before it was sent (1 ms: two clocks read apart); no upper
    # bound: however long a busy machine takes to deliver it, the transit is taken off before comparing
    assert result.ok
    assert result.status == 200 == truth.status
    assert result.output_tokens == 12 == truth.output_tokens
    assert not result.tokens_estimated
    assert result.prompt_tokens == truth.prompt_tokens
    assert result.ttft_ms is not None
    assert result.e2e_ms is not None
    assert near(result.ttft_ms - transit_ms, truth.ttft_ms)
    assert near(result.e2e_ms - transit_ms, truth.e2e_ms)
    assert len(result.itl_ms) == 11
    assert truth.itl_ms is not None
    assert sum(result.itl_ms) == pytest.approx(sum(truth.itl_ms), abs=max(2.0, 0.05 * sum(truth.itl_ms)))
    assert result.tpot_ms is not None


async def test_non_stream_matches_truth(sim: SimFactory, clients: Clients) -> None:
    """A non-streamed call: TTFT = E2E = time to the whole body, usage read from the body."""
    p = await sim("provider-a", time_scale=0.2)
    c = clients(p.url)
    events = await run(call(c, "chat/completions", chat_body(7, stream=False), stream=False))
    result = events[-1]
    assert isinstance(result, CallResult)
    body = next(e for e in events if isinstance(e, Body))
    assert msgspec.json.decode(body.raw)["usage"]["completion_tokens"] == 7
    truth = p.truth.records()[-1]
    transit_ms = (truth.received_at - result.started_at) * 1000.0
    assert result.ok
    assert result.output_tokens == 7
    assert not result.tokens_estimated
    assert result.ttft_ms == result.e2e_ms
    assert result.e2e_ms is not None
    assert near(result.e2e_ms - transit_ms, truth.e2e_ms)
    assert result.itl_ms == []


async def test_usage_chunk_removed_when_client_did_not_ask(sim: SimFactory, clients: Clients) -> None:
    """Without include_usage the usage chunk is asked for, read, and not yielded for forwarding."""
    p = await sim("instant")
    c = clients(p.url)
    events = await run(call(c, "chat/completions", chat_body(4), stream=True))
    result = events[-1]
    assert isinstance(result, CallResult)
    assert result.output_tokens == 4
    assert not result.tokens_estimated
    assert not any(b'"usage"' in e.raw for e in events if isinstance(e, Chunk))


async def test_usage_chunk_kept_when_client_asked(sim: SimFactory, clients: Clients) -> None:
    """With include_usage in the client's body the usage chunk is forwarded and the body untouched."""
    p = await sim("instant")
    c = clients(p.url)
    body = msgspec.json.encode(chat_body(4, stream_options={"include_usage": True}))
    made = call(c, "chat/completions", body, stream=True)
    assert made.client_wants_usage
    events = await run(made)
    usage_chunks = [e for e in events if isinstance(e, Chunk) and b'"usage"' in e.raw]
    assert len(usage_chunks) == 1
    assert not usage_chunks[0].has_token
    result = events[-1]
    assert isinstance(result, CallResult)
    assert result.output_tokens == 4


async def test_explicit_override_drops_usage(sim: SimFactory, clients: Clients) -> None:
    """client_wants_usage=False wins over a bytes body without stream_options: injected and dropped."""
    p = await sim("instant")
    c = clients(p.url)
    events = await run(
        call(c, "chat/completions", msgspec.json.encode(chat_body(3)), stream=True, client_wants_usage=False)
    )
    result = events[-1]
    assert isinstance(result, CallResult)
    assert not result.tokens_estimated
    assert result.output_tokens == 3
    assert not any(b'"usage"' in e.raw for e in events if isinstance(e, Chunk))


async def test_role_chunk_is_not_the_first_token(sim: SimFactory, clients: Clients) -> None:
    """The role-only opening chunk is forwarded but TTFT waits for the first content delta."""
    p = await sim("instant", faults={"stall_first_token_s": 0.2})
    c = clients(p.url)
    events = await run(call(c, "chat/completions", chat_body(3), stream=True))
    chunks = [e for e in events if isinstance(e, Chunk)]
    assert b'"role":"assistant"' in chunks[0].raw.replace(b" ", b"")
    assert not chunks[0].has_token
    sent = events[0]
    assert isinstance(sent, Sent)
    first = next(e for e in chunks if e.has_token)
    result = events[-1]
    assert isinstance(result, CallResult)
    assert result.ttft_ms == pytest.approx((first.t - sent.t) * 1000.0)
    assert result.ttft_ms is not None
    assert result.ttft_ms >= 190
    assert result.ttft_ms > (chunks[0].t - sent.t) * 1000.0  # measured to the first token, after the role chunk


async def test_frames_are_whole_sse_events(sim: SimFactory, clients: Clients) -> None:
    """Each yielded frame is one complete SSE event; together they decode as a valid stream."""
    p = await sim("instant")
    c = clients(p.url)
    events = await run(call(c, "chat/completions", chat_body(6), stream=True))
    frames = [e.raw for e in events if isinstance(e, Chunk | Done)]
    assert all(f.startswith(b"data: ") and f.endswith(b"\n\n") and f.count(b"\n\n") == 1 for f in frames)
    decoded = SSEDecoder().feed(b"".join(frames))
    assert len(decoded) == len(frames) == 6 + 3  # role, 6 tokens, finish, [DONE]
    assert decoded[-1].is_done


async def test_connection_is_reused(sim: SimFactory, clients: Clients) -> None:
    """Sequential calls share one keep-alive connection and leave none acquired."""
    p = await sim("instant")
    c = clients(p.url)
    for _ in range(3):
        result = await call(c, "chat/completions", chat_body(2), stream=True).collect()
        assert result.ok
    assert c.pool.in_use == 0
    assert c.pool.idle == 1
    assert c.in_flight == 0
