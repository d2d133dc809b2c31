"""The simulator caches prompt prefixes like a provider: per provider and API key, in blocks, LRU and TTL."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from pydantic import ValidationError

from conftest import SimFactory
from sim_truth import truth
from tailgate.sim.config import EngineOverrides
from tailgate.sim.prefix_cache import PrefixCache, block_digests
from tailgate.sim.presets import PRESETS, preset
from tailgate.sim.provider import SimProvider

BLOCK = 64
WORDS = ("the", "writing", "assistant", "resends", "the", "whole", "document", "every", "turn")


def document(tokens: int, salt: str = "") -> str:
    """ASCII text of exactly ``tokens`` simulator tokens (4 characters each)."""
    text = (salt + " ".join(WORDS * (tokens // 4 + 2)))[: 4 * tokens]
    assert len(text) == 4 * tokens
    return text


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def chat(
    session: aiohttp.ClientSession,
    p: SimProvider,
    text: str,
    *,
    key: str = "sk-one",
    stream: bool = False,
    endpoint: str = "chat/completions",
) -> dict[str, Any]:
    """One request; the answer's usage (a stream's final usage chunk)."""
    body: dict[str, Any] = {"model": "m", "max_tokens": 2}
    if endpoint == "chat/completions":
        body["messages"] = [{"role": "user", "content": text}]
    elif endpoint == "completions":
        body["prompt"] = text
    else:
        body = {"model": "m", "input": text, "max_output_tokens": 2}
    if stream:
        body["stream"] = True
        if endpoint != "responses":
            body["stream_options"] = {"include_usage": True}
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(f"{p.url}/{endpoint}", json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        if not stream:
            data = await resp.json()
            return dict(data["usage"])
        raw = (await resp.read()).decode()
    frames = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    if endpoint == "responses":
        return dict(frames[-1]["response"]["usage"])
    assert frames[-1]["choices"] == []
    return dict(frames[-1]["usage"])


async def _served(session: aiohttp.ClientSession, p: SimProvider) -> list[dict[str, Any]]:
    return await truth(p.root_url, session=session)


# ---- the blocks ----------------------------------------------------------------------------------


def test_blocks_are_whole_token_blocks_chained_behind_their_prefix_and_key() -> None:
    """A prompt of 3.5 blocks has 3 digests; a longer prompt shares them; another key or prefix shares none."""
    text = document(3 * BLOCK + 32)
    digests = block_digests("k", text, BLOCK)
    assert len(digests) == 3
    longer = block_digests("k", text + document(2 * BLOCK), BLOCK)
    assert longer[:3] == digests
    assert len(longer) == 5
    assert not set(block_digests("other", text, BLOCK)) & set(digests)
    changed = block_digests("k", "X" + text[1:], BLOCK)
    assert not set(changed) & set(digests), "a block is named by everything before it"
    assert block_digests("k", document(BLOCK - 1), BLOCK) == [], "less than a block is not cached"


def test_non_ascii_blocks_follow_the_token_estimate() -> None:
    """CJK text (one token a character) is cut every block_tokens characters, as the estimate counts it."""
    text = "缓存命中价格降低" * 40  # 320 CJK characters = 320 tokens
    digests = block_digests("k", text, BLOCK)
    assert len(digests) == 5
    assert block_digests("k", text[: 2 * BLOCK], BLOCK) == digests[:2]


def _reference_blocks(text: str, block_tokens: int) -> list[bytes]:
    """The rule, one character at a time: a block ends where cjk + ceil(other bytes / 4) reaches a multiple."""
    out: list[bytes] = []
    start = cjk = other = 0
    goal = block_tokens
    for i, ch in enumerate(text):
        if ord(ch) >= 0x2E80:
            cjk += 1
        else:
            other += len(ch.encode())
        if cjk + (other + 3) // 4 >= goal:
            out.append(text[start : i + 1].encode())
            start, goal = i + 1, goal + block_tokens
    return out


@pytest.mark.parametrize("seed", range(40))
def test_mixed_text_is_cut_exactly_as_the_per_character_rule(seed: int) -> None:
    """Chinese, ASCII, accented and emoji runs mixed: the run-by-run cut equals the per-character walk."""
    from tailgate.sim.prefix_cache import _mixed_blocks
    from tailgate.sim.text import estimate_tokens

    rng = random.Random(seed)
    pieces = ["缓存命中", "价格降低，", "the cache ", "x", "café ", "naïve—", "🙂", "ab", "。", " "]
    text = "".join(rng.choice(pieces) * rng.randint(1, 30) for _ in range(rng.randint(1, 60))) + "中"
    for block in (1, 3, 16, 64):
        blocks = _mixed_blocks(text, block)
        assert blocks == _reference_blocks(text, block)
        # never more cached than the prompt's tokens (the estimate counts a 4-byte emoji one byte heavier)
        assert len(blocks) * block <= estimate_tokens(text)
    assert len(_mixed_blocks(text, 1)) >= estimate_tokens(text) - text.count("🙂")


# ---- the store: LRU and TTL on a fake clock ---------------------------------------------------------


def test_ttl_forgets_blocks_unused_for_ttl_and_use_renews_them() -> None:
    """A block unused for ttl_s is gone; each hit pushes its expiry out again."""
    clock = FakeClock()
    cache = PrefixCache(block_tokens=BLOCK, capacity=100, ttl_s=60.0, clock=clock)
    a = cache.digests("k", document(4 * BLOCK))
    b = cache.digests("k", document(2 * BLOCK, salt="b"))
    cache.store(a)
    cache.store(b)
    clock.now += 50
    assert cache.lookup(a) == 4 * BLOCK  # a used at +50: lives to +110; b (stored at 0) to +60
    clock.now += 20
    assert cache.lookup(b) == 0
    assert cache.lookup(a) == 4 * BLOCK
    clock.now += 60.5
    assert cache.lookup(a) == 0
    assert len(cache) == 0


def test_capacity_evicts_least_recently_used_and_a_prefix_loses_its_tail_first() -> None:
    """Past capacity the least recently used blocks go; a prompt's head outlives its own tail."""
    cache = PrefixCache(block_tokens=BLOCK, capacity=6, ttl_s=3600.0, clock=FakeClock())
    a = cache.digests("k", document(4 * BLOCK, salt="a"))
    b = cache.digests("k", document(4 * BLOCK, salt="b"))
    cache.store(a)
    cache.store(b)  # 8 blocks > 6: a's last two go
    assert len(cache) == 6
    assert cache.evicted == 2
    assert cache.lookup(a) == 2 * BLOCK, "a keeps its first two blocks"
    assert cache.lookup(b) == 4 * BLOCK
    c = cache.digests("k", document(3 * BLOCK, salt="c"))
    cache.store(c)  # b was used after a: a goes first
    assert cache.lookup(a) == 0
    assert cache.lookup(b) == 3 * BLOCK
    assert cache.lookup(c) == 3 * BLOCK


# ---- over HTTP ------------------------------------------------------------------------------------


async def test_hits_only_for_a_repeated_prefix_on_the_same_provider_and_key(
    sim: SimFactory, session: aiohttp.ClientSession
) -> None:
    """Same provider and key: the repeated prefix is cached; another key, provider or prefix misses."""
    p1 = await sim("instant", engine={"dialect": "maas", "cache_block_tokens": BLOCK})
    p2 = await sim("instant", engine={"dialect": "maas", "cache_block_tokens": BLOCK})
    doc = document(5 * BLOCK + 10)
    assert (await chat(session, p1, doc))["prompt_tokens_details"]["cached_tokens"] == 0
    again = await chat(session, p1, doc)
    assert again["prompt_tokens_details"]["cached_tokens"] == 5 * BLOCK
    turn2 = await chat(session, p1, doc + " and now shorten it " + document(2 * BLOCK))
    assert turn2["prompt_tokens_details"]["cached_tokens"] == 5 * BLOCK, "the next turn hits the document"
    assert (await chat(session, p1, doc, key="sk-two"))["prompt_tokens_details"]["cached_tokens"] == 0
    assert (await chat(session, p2, doc))["prompt_tokens_details"]["cached_tokens"] == 0
    assert (await chat(session, p1, "Y" + doc[1:]))["prompt_tokens_details"]["cached_tokens"] == 0
    rows = await _served(session, p1)
    assert [r["cached_tokens"] for r in rows] == [0, 5 * BLOCK, 5 * BLOCK, 0, 0]
    assert rows[0]["prompt_tokens"] == 5 * BLOCK + 10


async def test_a_hit_skips_the_prefill_of_the_cached_tokens(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """Prefill covers only the uncached tokens (the engine model, to the microsecond) and TTFT falls with it."""
    tps, scale = 4000.0, 0.5
    p = await sim(
        "provider-a",
        engine={"prefill_tps": tps, "pre_median_s": 0.0, "jitter": 0.0, "step_ms": 5.0},
        time_scale=scale,
    )
    prompt = 128 * BLOCK + 25  # 8,217 tokens: 1.027 s of prefill at 4,000 tok/s × 0.5
    doc = document(prompt)
    await chat(session, p, doc, stream=True)
    second = await chat(session, p, doc, stream=True)
    assert second["prompt_cache_hit_tokens"] == 128 * BLOCK
    cold, warm = await _served(session, p)
    assert cold["prefill_ms"] == round(prompt / tps * scale * 1000, 3)
    assert warm["prefill_ms"] == round(25 / tps * scale * 1000, 3)
    assert cold["ttft_ms"] >= cold["prefill_ms"]
    saved = cold["prefill_ms"] - warm["prefill_ms"]
    assert cold["ttft_ms"] - warm["ttft_ms"] > saved / 2, (cold, warm)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("endpoint", ["chat/completions", "completions"])
async def test_deepseek_shaped_presets_report_both_usage_shapes(
    sim: SimFactory, session: aiohttp.ClientSession, stream: bool, endpoint: str
) -> None:
    """maas presets: prompt_tokens_details.cached_tokens and prompt_cache_hit/miss_tokens that add up."""
    p = await sim("provider-a", engine={"pre_median_s": 0.0, "prefill_tps": 1e9}, time_scale=0.05)
    doc = document(3 * BLOCK + 7)
    first = await chat(session, p, doc, stream=stream, endpoint=endpoint)
    usage = await chat(session, p, doc, stream=stream, endpoint=endpoint)
    assert first["prompt_cache_hit_tokens"] == 0
    assert first["prompt_cache_miss_tokens"] == 3 * BLOCK + 7
    assert usage["prompt_tokens"] == 3 * BLOCK + 7
    assert usage["prompt_tokens_details"] == {"cached_tokens": 3 * BLOCK}
    assert usage["prompt_cache_hit_tokens"] == 3 * BLOCK
    assert usage["prompt_cache_miss_tokens"] == 7


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_shaped_presets_report_cached_tokens_only(
    sim: SimFactory, session: aiohttp.ClientSession, stream: bool
) -> None:
    """openai dialect: prompt_tokens_details.cached_tokens (128-token blocks), no DeepSeek fields."""
    p = await sim("instant")
    assert p.spec.params.cache_block_tokens == 128
    doc = document(2 * 128 + 100)
    await chat(session, p, doc, stream=stream)
    usage = await chat(session, p, doc, stream=stream)
    assert usage["prompt_tokens_details"]["cached_tokens"] == 256
    assert "prompt_cache_hit_tokens" not in usage
    assert "prompt_cache_miss_tokens" not in usage


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_api_reports_cached_input_tokens(
    sim: SimFactory, session: aiohttp.ClientSession, stream: bool
) -> None:
    """/v1/responses: usage.input_tokens_details.cached_tokens."""
    p = await sim("instant")
    doc = document(3 * 128)
    await chat(session, p, doc, stream=stream, endpoint="responses")
    usage = await chat(session, p, doc, stream=stream, endpoint="responses")
    assert usage["input_tokens_details"]["cached_tokens"] == 3 * 128


async def test_continuous_usage_stats_carry_the_cached_tokens(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """vLLM's usage on every chunk reports the same cached tokens on each."""
    p = await sim("vllm", engine={"prefill_tps": 1e9}, time_scale=0.05)
    doc = document(4 * 16 + 3)
    body = {
        "model": "m",
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "messages": [{"role": "user", "content": doc}],
    }
    for _ in range(2):
        async with session.post(f"{p.url}/chat/completions", json=body) as resp:
            raw = (await resp.read()).decode()
    frames = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    cached = {f["usage"]["prompt_tokens_details"]["cached_tokens"] for f in frames if f.get("usage")}
    assert cached == {64}


async def test_prefix_cache_false_is_the_old_behaviour(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """engine: {prefix_cache: false}: no cache fields in usage, truth cached_tokens null, full prefill again."""
    p = await sim("provider-a", engine={"prefix_cache": False, "pre_median_s": 0.0}, time_scale=0.05)
    assert p.prefix_cache is None
    doc = document(3 * BLOCK)
    await chat(session, p, doc)
    usage = await chat(session, p, doc, stream=True)
    assert set(usage) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    rows = await _served(session, p)
    assert [r["cached_tokens"] for r in rows] == [None, None]
    assert rows[0]["prefill_ms"] == rows[1]["prefill_ms"] > 0


async def test_sim_state_shows_the_cache_and_delete_empties_it(sim: SimFactory, session: aiohttp.ClientSession) -> None:
    """/sim/state counts blocks and hits; DELETE /sim/cache makes the next request cold."""
    p = await sim("instant")
    doc = document(2 * 128)
    await chat(session, p, doc)
    await chat(session, p, doc)
    async with session.get(f"{p.root_url}/sim/state") as resp:
        state = (await resp.json())["prefix_cache"]
    assert state == {"blocks": 2, "hits": 2, "misses": 1, "evicted": 0}
    async with session.delete(f"{p.root_url}/sim/cache") as resp:
        assert (await resp.json()) == {"cleared": True}
    assert (await chat(session, p, doc))["prompt_tokens_details"]["cached_tokens"] == 0


async def test_the_ttl_is_a_preset_time_scaled_like_the_others(sim: SimFactory) -> None:
    """time_scale shortens the TTL as it shortens every preset time."""
    p = await sim("provider-a", time_scale=0.01)
    assert p.prefix_cache is not None
    assert p.prefix_cache.ttl_s == pytest.approx(preset("provider-a").cache_ttl_s * 0.01)


def test_deepseek_shaped_presets_default_to_64_token_blocks() -> None:
    """Every maas preset caches 64-token blocks (DeepSeek's unit); naive has no cache (no KV reuse)."""
    maas = [name for name, (p, _) in PRESETS.items() if p.dialect == "maas"]
    assert maas
    assert all(preset(n).prefix_cache and preset(n).cache_block_tokens == 64 for n in maas)
    assert not preset("naive").prefix_cache


def test_engine_overrides_validate_the_cache_fields() -> None:
    """The sim YAML accepts the cache fields and refuses a zero block or TTL, naming the field."""
    over = EngineOverrides.model_validate({"prefix_cache": False, "cache_block_tokens": 32, "cache_ttl_s": 5})
    params = over.apply(preset("provider-a"))
    assert (params.prefix_cache, params.cache_block_tokens, params.cache_ttl_s) == (False, 32, 5.0)
    for field in ("cache_block_tokens", "cache_blocks", "cache_ttl_s"):
        with pytest.raises(ValidationError, match=field):
            EngineOverrides.model_validate({field: 0})
