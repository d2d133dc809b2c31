"""Every token on the bill (issue 37, defects 2–4): a passthrough ``/v1/messages`` stream that ends early is billed
what it delivered; a reservation multiplies the output by ``n`` (and ``best_of``); the prompt reservation is an
upper bound for any script, so concurrent CJK prompts cannot spend a daily budget past its end."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from aiohttp import web

from _require import require
from conftest import GatewayHandle, SimFactory, eventually
from sim_truth import truth as sim_truth
from tailgate.bench.tokens import available, load
from tailgate.gateway.request_path.estimate import prompt_bound, token_estimate
from tailgate.ledger import read_rows
from tailgate.sim.text import estimate_tokens

GwFactory = Callable[..., Awaitable[GatewayHandle]]
KEY = "tg-every-token-key-0123456789"
ANT = {"anthropic-version": "2023-06-01", "x-api-key": KEY}
CJK = "".join(chr(0x4E00 + (i * 37) % 20000) for i in range(1991))
TEXTS = {
    "cjk": CJK,
    "emoji": "🙂🚀👩‍💻🎉" * 200,
    "code": "def f(x):\n    return {'a': [x, x + 1]}\n" * 50,
    "mixed": "Réponse: 東京は晴れ 😀 — ok\n" * 80,
    "english": "the quick brown fox jumps over the lazy dog " * 40,
}


async def _upstream(handler: Callable[[web.Request], Awaitable[web.StreamResponse]], path: str) -> tuple[Any, str]:
    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def _frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


@pytest.fixture
async def held_stream() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """A native Anthropic upstream that sends ``message_start`` (usage: 12 in, the placeholder 1 out), then 25 text
    deltas, then holds the stream open until the test's event is set (the client has left by then)."""
    release = asyncio.Event()

    async def messages(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start: dict[str, Any] = {
            "id": "msg_held",
            "type": "message",
            "role": "assistant",
            "model": "up",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 1},
        }
        frames = [_frame({"type": "message_start", "message": start})]
        frames.append(
            _frame({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        )
        for i in range(25):
            delta = {"type": "text_delta", "text": f" w{i}"}
            frames.append(_frame({"type": "content_block_delta", "index": 0, "delta": delta}))
        await resp.write(b"".join(frames))
        await release.wait()
        return resp

    runner, url = await _upstream(messages, "/v1/messages")
    yield url, release
    release.set()
    await runner.cleanup()


async def test_a_passthrough_stream_left_by_its_client_is_billed_what_it_delivered(
    gateway: GwFactory, held_stream: tuple[str, asyncio.Event]
) -> None:
    """Defect 2 (client): the client reads 25 deltas of a passthrough stream and leaves before ``message_delta``:
    the row says 25 output tokens, estimated — not ``message_start``'s placeholder 1."""
    url, release = held_stream
    gw = await gateway(
        {
            "providers": {"nat": {"base_url": url + "/v1", "anthropic_base_url": url, "api_keys": ["sk-n-0123456789"]}},
            "models": {"claude": {"routes": [{"provider": "nat", "model": "up"}]}},
            "keys": [{"id": "agent", "key": KEY}],
        }
    )
    body = {"model": "claude", "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    seen = 0
    async with (
        httpx2.AsyncClient(timeout=10) as http,
        http.stream("POST", gw.root_url + "/v1/messages", json=body, headers=ANT) as resp,
    ):
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            seen += line == "event: content_block_delta"
            if seen == 25:
                break
    release.set()  # the upstream then ends its body without message_delta: the same early end, whichever came first
    await gw.stop()
    (row,) = read_rows(gw.gateway.ledger.path)
    assert (row.api, row.prompt_tokens, row.output_tokens, row.tokens_estimated) == ("anthropic", 12, 25, True)


async def test_a_passthrough_stream_the_provider_cuts_is_billed_what_it_delivered(
    sim: SimFactory, gateway: GwFactory
) -> None:
    """Defect 2 (provider): the provider cuts a passthrough stream after 40 tokens: the row says 40 output tokens
    (the simulator's truth), estimated, and its prompt the provider's ``message_start`` count."""
    engine = {"pre_median_s": 0.0, "step_ms": 1.0, "jitter": 0.0, "default_output_tokens": 200}
    p = await sim("instant", models=("up",), engine=engine, faults={"disconnect_after_tokens": 40})
    root = p.url.removesuffix("/v1")
    gw = await gateway(
        {
            "providers": {"nat": {"base_url": p.url, "anthropic_base_url": root, "api_keys": ["sk-n-0123456789"]}},
            "models": {"claude": {"routes": [{"provider": "nat", "model": "up"}]}},
            "keys": [{"id": "agent", "key": KEY}],
        }
    )
    body = {"model": "claude", "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx2.AsyncClient(timeout=10) as http:
        resp = await http.post(gw.root_url + "/v1/messages", json=body, headers=ANT)
    assert resp.status_code == 200
    assert resp.text.count("event: content_block_delta") == 40
    await gw.stop()
    (truth,) = await sim_truth(root)
    (row,) = read_rows(gw.gateway.ledger.path)
    assert truth["output_tokens"] == 40
    assert (row.outcome, row.output_tokens, row.tokens_estimated) == ("cut", 40, True)
    assert row.prompt_tokens == truth["prompt_tokens"]


async def test_n_is_reserved_n_times(sim: SimFactory, gateway: GwFactory) -> None:
    """Defect 3: tpm 2,000 and 1,000 tokens a day; ``max_tokens: 100, n: 40`` may produce 4,000 tokens, more than the
    whole tpm: refused (a 400, nothing taken: no window could ever admit it), where one answer's reservation admitted
    it; ``n: 11`` at 100 fits the tpm but not the day's budget (a 429)."""
    p = await sim("instant", models=("m",))
    gw = await gateway(
        {
            "providers": {"p": {"base_url": p.url, "api_keys": ["sk-p-0123456789"]}},
            "models": {"chat": {"routes": [{"provider": "p", "model": "m"}]}},
            "keys": [{"id": "t", "key": KEY, "tpm": 2000, "budget": {"tokens_per_day": 1000}}],
        }
    )
    auth = {"Authorization": f"Bearer {KEY}"}
    msgs = [{"role": "user", "content": "hi"}]
    async with httpx2.AsyncClient(timeout=10) as http:
        answers = [
            await http.post(
                gw.url + "/chat/completions",
                json={"model": "chat", "messages": msgs, "max_tokens": 100, "n": n},
                headers=auth,
            )
            for n in (40, 11)
        ]
    assert [(r.status_code, r.json()["error"]["code"]) for r in answers] == [
        (400, "max_tokens_too_large"),  # 40 × 100 > the whole tpm
        (429, "budget_exceeded"),  # 11 × 100 > the day's 1,000
    ]
    used = re.search(r"may use (\d+) tokens", answers[0].json()["error"]["message"])
    assert used is not None
    assert 4000 < int(used.group(1)) < 4100  # 40 answers of 100 and the prompt


@pytest.mark.parametrize(
    ("fields", "output"),
    [
        ({"max_tokens": 100}, 100.0),
        ({"max_tokens": 100, "n": 40}, 4000.0),
        ({"max_tokens": 10, "n": 2, "best_of": 5}, 50.0),
        ({"n": 3}, 3 * 256.0),
    ],
)
def test_the_output_reservation_multiplies_by_the_answers_asked_for(fields: dict[str, Any], output: float) -> None:
    """Defect 3: ``n`` (chat, completions) and ``best_of`` (completions, where larger) multiply the output budget."""
    body = json.dumps({"model": "m", "prompt": "x", **fields}).encode()
    assert token_estimate(json.loads(body), body, 256)[1] == output


@pytest.mark.parametrize("name", sorted(TEXTS))
@pytest.mark.parametrize("ensure_ascii", [False, True])
def test_the_prompt_reservation_bounds_every_script(name: str, ensure_ascii: bool) -> None:
    """Defect 4: for CJK, emoji, code, mixed and English prompts, raw UTF-8 or ``\\u``-escaped, the reservation is
    at least the simulator's count and the byte-level worst case of every non-ASCII character (3 for CJK), and never
    more than the body's bytes (a byte-level tokenizer's own ceiling)."""
    text = TEXTS[name]
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": text}]}, ensure_ascii=ensure_ascii
    ).encode()
    bound = prompt_bound(body)
    assert bound >= estimate_tokens(text), (name, bound, estimate_tokens(text))
    assert bound >= len(text.encode()) - len(text.encode().translate(None, bytes(range(0x80, 0x100))))
    assert bound <= len(body)


@pytest.mark.parametrize("family", ["deepseek", "qwen"])
def test_the_prompt_reservation_bounds_real_tokenizers(family: str) -> None:
    """Defect 4, against the tokenizers the project ships (``tailgate[tokenizers]``): prose, this repository's code
    and TOML, common and rare CJK, Hangul, emoji, digits, punctuation and whitespace never tokenize to more than the
    reservation."""
    require(
        available(family), f"the {family} tokenizer", "tailgate[tokenizers] (requirements-dev.lock)", name="tokenizers"
    )
    tok = load(family)
    rng = random.Random(37)
    root = Path(__file__).parents[2]
    texts = {
        **TEXTS,
        "readme": (root / "README.md").read_text()[:6000],
        "source": (root / "src/tailgate/gateway/request_path/admission.py").read_text()[:8000],
        "toml": (root / "pyproject.toml").read_text()[:6000],
        "zh-common": "我们今天讨论一下这个系统的设计，以及它在高负载下的表现。" * 60,
        "cjk-ext-a": "".join(chr(rng.randint(0x3400, 0x4DBF)) for _ in range(1500)),
        "hangul": "".join(chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(1500)),
        "digits": "".join(rng.choice("0123456789") for _ in range(3000)),
        "punctuation": "".join(rng.choice("!#$%&()*+,-./:;<=>?@[]^_`{|}~") for _ in range(3000)),
        "whitespace": " \n\t " * 800,
    }
    for name, text in texts.items():
        for ensure_ascii in (False, True):
            msgs = [{"role": "user", "content": text}]
            body = json.dumps({"model": "m", "messages": msgs}, ensure_ascii=ensure_ascii).encode()
            assert prompt_bound(body) >= tok.count(text), (family, name, ensure_ascii)


async def test_concurrent_cjk_prompts_never_spend_past_the_daily_budget(gateway: GwFactory) -> None:
    """Defect 4: four concurrent requests of 1,991 Chinese characters (the provider counts 1 token each) against
    7,000 tokens a day: the key's spend stays ≤ 7,000 (one admitted: ~6,000 reserved). With bytes / 4 (≈ 1,500
    reserved each) all four were admitted and ~8,000 spent. The upstream holds every request it gets until all
    four are answered or held."""
    arrived = 0
    release = asyncio.Event()

    async def chat(request: web.Request) -> web.StreamResponse:
        nonlocal arrived
        body = await request.json()
        arrived += 1
        await release.wait()
        prompt = estimate_tokens(body["messages"][0]["content"])
        usage = {"prompt_tokens": prompt, "completion_tokens": 8, "total_tokens": prompt + 8}
        answer = {
            "id": "chatcmpl-x",
            "object": "chat.completion",
            "created": 0,
            "model": "up",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": usage,
        }
        return web.json_response(answer)

    runner, url = await _upstream(chat, "/v1/chat/completions")
    try:
        gw = await gateway(
            {
                "providers": {"up": {"base_url": url + "/v1", "api_keys": ["sk-u-0123456789"]}},
                "models": {"chat": {"routes": [{"provider": "up", "model": "up"}]}},
                "keys": [{"id": "zh", "key": KEY, "budget": {"tokens_per_day": 7000}}],
            }
        )
        body = {"model": "chat", "messages": [{"role": "user", "content": CJK}], "max_tokens": 8}
        async with httpx2.AsyncClient(timeout=10) as http:
            tasks = [
                asyncio.create_task(
                    http.post(
                        gw.url + "/chat/completions",
                        content=json.dumps(body, ensure_ascii=False).encode(),
                        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
                    )
                )
                for _ in range(4)
            ]
            await eventually(lambda: arrived + sum(t.done() for t in tasks) == 4, within_s=5.0)
            release.set()
            statuses = sorted(r.status_code for r in await asyncio.gather(*tasks))
        await gw.stop()
        rows = read_rows(gw.gateway.ledger.path)
        spent = sum((r.prompt_tokens or 0) + (r.output_tokens or 0) for r in rows)
        assert statuses.count(200) >= 1
        assert spent <= 7000, (statuses, spent)
    finally:
        release.set()
        await runner.cleanup()
