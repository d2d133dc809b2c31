"""The simulator speaks OpenAI: the official SDK, sync and async, streams and errors."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from conftest import SimFactory, ThreadedSim

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


Oai = Callable[..., AsyncOpenAI]


async def test_async_chat_non_stream_returns_usage_and_honours_max_tokens(sim: SimFactory, oai: Oai) -> None:
    """A non-stream chat answer has max_tokens tokens, finish_reason length and exact usage."""
    p = await sim("instant")
    resp = await oai(p.url).chat.completions.create(
        model="deepseek-v3.2", messages=[{"role": "user", "content": "hello there"}], max_tokens=12
    )
    assert resp.object == "chat.completion"
    assert resp.model == "deepseek-v3.2"
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage is not None
    assert resp.usage.completion_tokens == 12
    assert resp.usage.prompt_tokens >= 1
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 12
    assert len((resp.choices[0].message.content or "").split()) == 12


async def test_async_chat_stream_with_usage_chunk(sim: SimFactory, oai: Oai) -> None:
    """A stream opens with a role chunk, carries one token per chunk and ends with a usage chunk."""
    p = await sim("instant")
    stream = await oai(p.url).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=7,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) == 7
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 7


async def test_stream_without_include_usage_has_no_usage_chunk(sim: SimFactory, oai: Oai) -> None:
    """Without stream_options.include_usage no chunk carries usage."""
    p = await sim("instant")
    stream = await oai(p.url).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
    )
    assert all(c.usage is None for c in [c async for c in stream])


async def test_same_seed_same_text_and_natural_length_without_max_tokens(sim: SimFactory, oai: Oai) -> None:
    """Text is deterministic for a request seed; without max_tokens the answer ends with 'stop'."""
    p = await sim("instant")
    client = oai(p.url)
    msgs: list[dict[str, str]] = [{"role": "user", "content": "tell me"}]
    a = await client.chat.completions.create(model="m", messages=msgs, seed=42)  # type: ignore[arg-type]
    b = await client.chat.completions.create(model="m", messages=msgs, seed=42)  # type: ignore[arg-type]
    c = await client.chat.completions.create(model="m", messages=msgs, seed=43)  # type: ignore[arg-type]
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.choices[0].message.content != c.choices[0].message.content
    assert a.choices[0].finish_reason == "stop"


async def test_stop_sequence_ends_generation_early(sim: SimFactory, oai: Oai) -> None:
    """A stop string that the pseudo-text produces ends the answer before it, finish_reason stop."""
    p = await sim("instant")
    client = oai(p.url)
    full = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], max_tokens=40, seed=5
    )
    words = (full.choices[0].message.content or "").split()
    stop_word = words[10]
    first = words.index(stop_word)
    cut = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], max_tokens=40, seed=5, stop=[" " + stop_word]
    )
    assert cut.choices[0].finish_reason == "stop"
    assert (cut.choices[0].message.content or "").split() == words[:first]


async def test_legacy_completions_and_embeddings_and_models(sim: SimFactory, oai: Oai) -> None:
    """/v1/completions, /v1/embeddings (float and base64) and /v1/models work through the SDK."""
    p = await sim("instant", models=("deepseek-v3.2", "qwen3"))
    client = oai(p.url)
    comp = await client.completions.create(model="qwen3", prompt="Once upon", max_tokens=4)
    assert comp.object == "text_completion"
    assert comp.usage is not None
    assert comp.usage.completion_tokens == 4
    stream = await client.completions.create(model="qwen3", prompt="Once", max_tokens=3, stream=True)
    texts = [c.choices[0].text async for c in stream if c.choices and c.choices[0].text]
    assert len(texts) == 3
    emb = await client.embeddings.create(model="qwen3", input=["a", "b", "a"], dimensions=64)
    assert [len(d.embedding) for d in emb.data] == [64, 64, 64]
    assert emb.data[0].embedding == emb.data[2].embedding != emb.data[1].embedding
    assert abs(sum(v * v for v in emb.data[0].embedding) - 1.0) < 1e-6
    b64 = await client.embeddings.create(model="qwen3", input="a", dimensions=64, encoding_format="base64")
    assert isinstance(b64.data[0].embedding, str | list)
    models = await client.models.list()
    assert sorted(m.id for m in models.data) == ["deepseek-v3.2", "qwen3"]


async def test_unknown_model_is_404_when_models_are_listed(sim: SimFactory, oai: Oai) -> None:
    """With a model list configured, another model name is openai.NotFoundError (model_not_found)."""
    p = await sim("instant", models=("deepseek-v3.2",))
    with pytest.raises(openai.NotFoundError) as exc:
        await oai(p.url).chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "x"}])
    assert exc.value.code == "model_not_found"


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": 3}, "temperature"),
        ({"messages": []}, "messages"),
        ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
        ({"max_tokens": 10_000_000}, "max_tokens"),
        ({"n": 2}, "n"),
    ],
)
async def test_invalid_requests_are_bad_request_naming_the_field(
    sim: SimFactory, oai: Oai, kwargs: dict[str, object], param: str
) -> None:
    """Invalid or unknown fields give openai.BadRequestError whose param names the field."""
    p = await sim("provider-a", time_scale=0.01)
    args: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": "x"}], **kwargs}
    with pytest.raises(openai.BadRequestError) as exc:
        await oai(p.url).chat.completions.create(**args)  # type: ignore[call-overload]
    assert isinstance(exc.value.body, dict)
    assert exc.value.body.get("param") == param
    assert exc.value.body.get("type") == "invalid_request_error"


async def test_malformed_json_body_is_400_in_openai_shape(sim: SimFactory, oai: Oai) -> None:
    """A body that is not JSON gets a 400 with an OpenAI error object, not a 500."""
    import aiohttp

    p = await sim("instant")
    async with aiohttp.ClientSession() as s, s.post(f"{p.url}/chat/completions", data=b'{"model": "m",') as r:
        body = await r.json()
    assert r.status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert "JSON" in body["error"]["message"]


async def test_api_keys_enforced_when_configured(sim: SimFactory, oai: Oai) -> None:
    """A provider with api_keys refuses others with openai.AuthenticationError and accepts its own."""
    p = await sim("instant", api_keys=("sk-good",))
    with pytest.raises(openai.AuthenticationError):
        await oai(p.url, "sk-bad").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], max_tokens=1
        )
    ok = await oai(p.url, "sk-good").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], max_tokens=1
    )
    assert ok.usage is not None


def test_sync_client_stream_and_error_mapping(threaded_sim: Callable[..., ThreadedSim]) -> None:
    """The blocking SDK client streams, and 429/500 map to RateLimitError/InternalServerError."""
    ts = threaded_sim("instant")
    client = OpenAI(base_url=ts.url, api_key="k", max_retries=0, timeout=10)
    try:
        _sync_checks(ts, client)
    finally:
        client.close()


def _sync_checks(ts: ThreadedSim, client: OpenAI) -> None:
    resp = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=5)
    assert resp.usage is not None
    assert resp.usage.completion_tokens == 5
    tokens = [
        c.choices[0].delta.content
        for c in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], max_tokens=4, stream=True
        )
        if c.choices and c.choices[0].delta.content
    ]
    assert len(tokens) == 4
    ts.set_faults(error_rate=1.0, error_statuses=[500])
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=1)
    ts.set_faults(error_rate=0.0, rate_limit_rps=1)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=1)
    with pytest.raises(openai.RateLimitError) as exc:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=1)
    assert exc.value.response.headers.get("retry-after") == "1"


async def test_unknown_route_and_method_are_openai_shaped(sim: SimFactory) -> None:
    """404 for an unknown path and 405 for a wrong method carry an OpenAI error object."""
    import aiohttp

    p = await sim("instant")
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{p.url}/chat/complete", json={}) as r:
            assert r.status == 404
            assert (await r.json())["error"]["message"] == "Invalid URL (POST /v1/chat/complete)"
        async with s.get(f"{p.url}/chat/completions") as r:
            assert r.status == 405
            assert (await r.json())["error"]["type"] == "invalid_request_error"
