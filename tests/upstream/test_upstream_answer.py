"""The measurement core on thinking, tool-call and Responses API streams: TTFT is the first token of any
kind, ``ttft_answer_ms`` the first answer token, ``reasoning_tokens`` beside the output tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from upstream_support import Clients, SimFactory, chat_body

from tailgate.upstream import RESPONSES, Chunk, call


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    made = Clients()
    yield made
    await made.close()


async def test_thinking_stream_first_token_and_first_answer_token(sim: SimFactory, clients: Clients) -> None:
    """The thinking span agrees with the simulator's truth; reasoning tokens come from usage."""
    p = await sim("reasoner", time_scale=0.05, engine={"reasoning_median": 15, "reasoning_sigma": 0.0})
    client = clients(p.url)
    await call(client, "/chat/completions", chat_body(1), stream=True).collect()  # warm-up: opens the connection
    result = await call(client, "/chat/completions", chat_body(20), stream=True).collect()
    truth = p.truth.records()[-1]
    assert result.ok, result.detail
    assert (result.output_tokens, result.reasoning_tokens, result.token_chunks) == (20, 15, 20)
    assert result.ttft_ms is not None
    assert result.ttft_answer_ms is not None
    assert result.ttft_answer_ms > result.ttft_ms
    # The thinking span (first token → first answer token) as the client saw it and as the simulator wrote it;
    # a difference of two times, so the client's own send-to-handler delay (a busy machine) cancels out.
    assert truth.ttft_ms is not None
    assert truth.ttft_answer_ms is not None
    ours, theirs = result.ttft_answer_ms - result.ttft_ms, truth.ttft_answer_ms - truth.ttft_ms
    assert abs(ours - theirs) <= max(5.0, 0.2 * theirs), (ours, theirs)


async def test_without_usage_the_reasoning_chunks_are_counted(sim: SimFactory, clients: Clients) -> None:
    """A client that asked no usage still gets a reasoning count: the chunks before the first answer."""
    p = await sim("reasoner", time_scale=0.01, engine={"reasoning_median": 6, "reasoning_sigma": 0.0})
    body = chat_body(9)
    c = call(clients(p.url), "/chat/completions", body, stream=True, client_wants_usage=False)
    result = await c.collect()
    assert result.reasoning_tokens == 6  # usage was asked upstream on the client's behalf: exact


async def test_plain_and_tool_call_answers_are_answers(sim: SimFactory, clients: Clients) -> None:
    """Without thinking the first answer token is the first token; a tool-call delta is an answer."""
    p = await sim("instant")
    plain = await call(clients(p.url), "/chat/completions", chat_body(4), stream=True).collect()
    assert plain.ttft_answer_ms == plain.ttft_ms
    assert plain.reasoning_tokens is None
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    body = chat_body(50, tools=tools, tool_choice="required")
    called = await call(clients(p.url), "/chat/completions", body, stream=True).collect()
    assert called.ok
    assert called.ttft_answer_ms == called.ttft_ms
    assert called.output_tokens == called.token_chunks >= 1


async def test_responses_stream_is_measured_and_ends_at_completed(sim: SimFactory, clients: Clients) -> None:
    """/responses: the body goes out unchanged (no stream_options), the first output_text.delta is the first
    token, response.completed ends the call with its usage; non-stream answers are not 'malformed'."""
    p = await sim("instant")
    body = {"model": "m", "input": "hi", "max_output_tokens": 7, "stream": True}
    client = clients(p.url)
    await call(client, "/responses", body, stream=True, dialect=RESPONSES).collect()  # warm-up: opens the connection
    result = await call(client, "/responses", body, stream=True, dialect=RESPONSES).collect()
    assert result.ok, result.detail
    assert (result.output_tokens, result.token_chunks, result.tokens_estimated) == (7, 7, False)
    assert result.ttft_ms is not None
    assert result.e2e_ms is not None
    assert 0 < result.ttft_ms <= result.e2e_ms
    assert p.truth.records()[-1].output_tokens == 7
    unary = await call(client, "/responses", {**body, "stream": False}, stream=False, dialect=RESPONSES).collect()
    assert unary.ok, unary.detail
    assert (unary.output_tokens, unary.prompt_tokens) == (7, 1)


async def test_usage_on_every_chunk_only_when_the_client_asked_usage(sim: SimFactory, clients: Clients) -> None:
    """continuous_usage_stats without include_usage gets no usage at all (vLLM's rule), even though the core
    asks usage upstream on the client's behalf; with include_usage every token chunk carries it."""
    p = await sim("vllm", time_scale=0.01)
    body = chat_body(4, stream_options={"continuous_usage_stats": True})
    c = call(clients(p.url), "/chat/completions", body, stream=True)
    async with c:
        raw = b"".join([e.raw async for e in c if isinstance(e, Chunk)])
    assert b'"usage"' not in raw
    assert c.result is not None
    assert c.result.output_tokens == 4
    assert not c.result.tokens_estimated
    body = chat_body(4, stream_options={"include_usage": True, "continuous_usage_stats": True})
    c = call(clients(p.url), "/chat/completions", body, stream=True)
    async with c:
        chunks = [e async for e in c if isinstance(e, Chunk) and e.has_token]
    assert len(chunks) == 4
    assert all(b'"usage"' in ch.raw for ch in chunks)
