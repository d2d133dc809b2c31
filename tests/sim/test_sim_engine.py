"""The engine model: slots, FIFO queueing, continuous batching, overflow, and presets under load."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from conftest import MockProcess, SimFactory
from loop_lateness import LoopLateness
from sim_truth import truth
from tailgate.sim.engine import Engine, QueueFull, Sequence
from tailgate.sim.presets import PRESETS, EngineParams
from tailgate.sim.text import token_at
from tailgate.sim.truth import TruthRecord
from tailgate.stats import LatencyHistogram


async def _run_sequences(engine: Engine, seqs: list[Sequence]) -> None:
    for seq in seqs:
        engine.submit(seq)
    while not all(s.done for s in seqs):
        await asyncio.gather(*(s.wait() for s in seqs if not s.done))


async def test_requests_beyond_slots_wait_in_fifo_order() -> None:
    """With 2 slots, the 3rd and 4th sequences queue, start only as slots free, and finish later."""
    engine = Engine(EngineParams(slots=2, step_ms=5, step_per_seq_ms=0, jitter=0, prefill_tps=1e9), token_fn=token_at)
    seqs = [Sequence(f"s{i}", prompt_tokens=1, target=4, seed=i) for i in range(4)]
    try:
        await _run_sequences(engine, seqs)
    finally:
        await engine.close()
    assert [s.finish_reason for s in seqs] == ["length"] * 4
    # The first two found a free slot: admitted before any sequence finished (event order, not "< 2 ms").
    first_end = min(s.finished_at for s in seqs)
    assert seqs[0].admitted_at < first_end
    assert seqs[1].admitted_at < first_end
    assert seqs[2].admitted_at >= seqs[0].finished_at - 1e-6  # waited for a slot
    assert seqs[3].admitted_at >= seqs[1].finished_at - 1e-6
    assert seqs[2].first_token_at - seqs[2].enqueued_at > 4 * 0.005  # TTFT includes the queue wait


async def test_queue_overflow_raises_queue_full() -> None:
    """Past slots + queue_limit the engine refuses instead of growing without bound."""
    engine = Engine(EngineParams(slots=1, queue_limit=1, step_ms=50, jitter=0), token_fn=token_at)
    try:
        engine.submit(Sequence("a", prompt_tokens=1, target=5, seed=0))
        engine.submit(Sequence("b", prompt_tokens=1, target=5, seed=0))
        with pytest.raises(QueueFull):
            engine.submit(Sequence("c", prompt_tokens=1, target=5, seed=0))
        assert (engine.active, engine.queued) == (1, 1)
    finally:
        await engine.close()


async def test_decode_step_slows_with_batch_size() -> None:
    """Continuous batching: per-token time grows with the number of sequences decoding together."""
    params = EngineParams(slots=64, step_ms=2, step_per_seq_ms=0.25, jitter=0, prefill_tps=1e9)

    async def gap_ms(n: int) -> tuple[float, float]:
        """The mean gap between a sequence's tokens, and how far the engine's own lateness can move it."""
        engine = Engine(params, token_fn=token_at)
        seqs = [Sequence(f"s{i}", prompt_tokens=1, target=10, seed=i) for i in range(n)]
        try:
            await _run_sequences(engine, seqs)
        finally:
            await engine.close()
        late = engine.lateness_ms.summary()
        # Steps keep an absolute schedule: a late first token is followed by shorter gaps, a late last one
        # lengthens them, and a restarted schedule (behind by > 50 ms) slips by what that step was late. So
        # the mean gap is off the plan by at most the summed lateness of the engine's own steps, over 9 gaps.
        slack = (late["mean"] or 0.0) * late["count"] / 9 + 0.5
        return (seqs[0].finished_at - seqs[0].first_token_at) / 9 * 1000, slack

    (one, one_slack), (many, many_slack) = await gap_ms(1), await gap_ms(40)
    # 2 ms alone; 2 + 0.25 * 39 = 11.75 ms with 40 in the batch; within what the engine measured itself late.
    assert abs(one - 2.0) <= one_slack, (one, one_slack)
    assert abs(many - 11.75) <= many_slack, (many, many_slack)
    assert many > one


async def test_cancel_frees_slot_for_the_next_in_queue() -> None:
    """Cancelling an active sequence admits the queued one at once."""
    engine = Engine(EngineParams(slots=1, step_ms=20, jitter=0, prefill_tps=1e9), token_fn=token_at)
    a = Sequence("a", prompt_tokens=1, target=100, seed=0)
    b = Sequence("b", prompt_tokens=1, target=2, seed=0)
    try:
        engine.submit(a)
        engine.submit(b)
        assert engine.queued == 1
        engine.cancel(a)
        assert (engine.active, engine.queued) == (1, 0)
        await _run_sequences(engine, [])
        while not b.done:
            await b.wait()
    finally:
        await engine.close()
    assert a.finish_reason == "cancelled"
    assert b.finish_reason == "length"


async def _load(url: str, concurrency: int, total: int, max_tokens: int = 16) -> list[int]:
    """Send ``total`` streamed requests, ``concurrency`` at a time; return the statuses."""
    sem = asyncio.Semaphore(concurrency)
    body: dict[str, Any] = {
        "model": "m",
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "load"}],
    }

    async def one(session: aiohttp.ClientSession) -> int:
        async with sem, session.post(f"{url}/chat/completions", json=body) as resp:
            await resp.read()
            return resp.status

    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as session:
        return await asyncio.gather(*(one(session) for _ in range(total)))


def _p90_ttft(records: list[Any]) -> float:
    hist = LatencyHistogram()
    for rec in records:
        if rec.status == 200 and rec.ttft_ms is not None:
            hist.record(rec.ttft_ms)
    assert hist.count > 0
    return hist.percentile(90)


@pytest.mark.timeout(60)
async def test_aggregator_collapses_under_load_where_provider_a_does_not(
    mock_process: Callable[..., MockProcess],
) -> None:
    """At 96 concurrent, aggregator's P90 TTFT grows several-fold over its 1-concurrent value; A's barely moves.

    Each simulator runs in its own process so the 96 client streams of this test do not share (and slow)
    the simulator's event loop; TTFT comes from the simulator's own truth.
    """
    ratios, queue_p90 = {}, {}
    for name in ("provider-a", "aggregator"):
        url = mock_process("--preset", name, "--port", "0", "--time-scale", "0.1").url
        await _load(url, 1, 20)
        alone = _p90_ttft(await _truth(url))
        statuses = await _load(url, 96, 192)
        assert statuses.count(200) == 192
        loaded = (await _truth(url))[20:]
        ratios[name] = _p90_ttft(loaded) / alone
        queue = LatencyHistogram()
        queue.record_many(r.queue_ms for r in loaded if r.queue_ms is not None)
        queue_p90[name] = queue.percentile(90)
    # The mechanism: A never queues (256 slots), the aggregator's 16 slots make most requests wait.
    assert queue_p90["provider-a"] < 1.0, queue_p90
    assert queue_p90["aggregator"] > 50.0, queue_p90
    # The effect on TTFT (the bands leave room for a busy CI machine slowing both alike).
    assert ratios["provider-a"] < 2.0, ratios
    assert ratios["aggregator"] > 3.0, ratios
    assert ratios["aggregator"] > 2.5 * ratios["provider-a"], ratios


async def _truth(url: str) -> list[Any]:
    return [TruthRecord(**r) for r in await truth(url)]


async def test_queue_overflow_answers_the_configured_status(sim: SimFactory) -> None:
    """A full queue answers 429 for aggregator (overflow_status 429), 503 for others, OpenAI-shaped."""
    agg = await sim("aggregator", time_scale=0.05, engine={"slots": 2, "queue_limit": 2})
    statuses = await _load(agg.url, 12, 12, max_tokens=40)
    assert statuses.count(200) >= 4
    assert statuses.count(429) >= 4
    assert set(statuses) <= {200, 429}
    other = await sim("provider-b", time_scale=0.02, engine={"slots": 1, "queue_limit": 0})
    statuses = await _load(other.url, 6, 6, max_tokens=20)
    assert 503 in statuses
    assert any(r.fault == "queue_full" for r in other.truth.records())


@pytest.mark.timing  # service intervals from wall-clock stamps: a late loop stamps an end after the slot was freed
async def test_naive_serves_one_sequence_at_a_time(sim: SimFactory) -> None:
    """naive has one slot: of 4 concurrent requests each is served only after the one before it ended."""
    p = await sim("naive", time_scale=0.02)
    async with LoopLateness() as late:  # the simulator runs on this loop: its stamps are late by as much
        await _load(p.url, 4, 4, max_tokens=20)
    last4 = p.truth.records()[-4:]
    # Event order from the simulator's truth (a ratio to one request's time failed when that request met a
    # stall): service = [received + queue, received + e2e]; with one slot these never overlap, so each starts
    # once the one before has ended (1 ms for the two clocks' rounding), and the last waited for three.
    served = sorted(
        (r.received_at + (r.queue_ms or 0.0) / 1000.0, r.received_at + (r.e2e_ms or 0.0) / 1000.0) for r in last4
    )
    # A request's end is stamped once its handler has written the last chunk, after the slot was freed: a late
    # loop stamps it late (4 ms seen beside three test workers), so the bound grows by the lateness measured here.
    for (_, end), (start, _) in itertools.pairwise(served):
        assert start >= end - 0.001 - late.max_s, (served, late.max_s)
    assert sorted(r.queue_ms or 0.0 for r in last4)[-1] >= 3 * min(e - s for s, e in served) * 1000.0 - 3.0


def test_every_preset_is_documented_in_docs() -> None:
    """docs/simulator.md lists every preset with its parameters (generated table matches the code)."""
    from pathlib import Path

    from tailgate.sim.presets import presets_markdown

    doc = (Path(__file__).parents[2] / "docs" / "simulator.md").read_text(encoding="utf-8")
    assert presets_markdown() in doc, "regenerate the table: python -m tailgate.sim.presets"
    assert set(PRESETS) >= {  # DESIGN.md's contract names; presets may be added, never renamed
        "instant",
        "provider-a",
        "provider-b",
        "provider-c",
        "provider-d",
        "provider-e",
        "aggregator",
        "naive",
    }
