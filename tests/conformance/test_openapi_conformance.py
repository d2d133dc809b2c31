"""Every body the simulator and the gateway send, validated against OpenAI's published OpenAPI schema.

The schema is vendored (``openai_openapi_subset.json``: the response schemas and all they reference, from
https://github.com/openai/openai-openapi ``openapi.json`` at the commit recorded in the file; re-vendor with
``vendor_openapi.py``). Chat answers, stream chunks (plain, thinking, tool calls, usage on every chunk),
legacy completions, embeddings, models, error bodies and the Responses API, stream and not.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from conftest import GatewayHandle, SimFactory
from tailgate.sim.faults import Faults

GwFactory = Callable[..., Awaitable[GatewayHandle]]
SCHEMA_FILE = Path(__file__).with_name("openai_openapi_subset.json")


def _nullable(node: Any) -> Any:
    """A few schemas still carry OpenAPI 3.0's ``nullable: true``, which JSON Schema 2020-12 (OpenAPI 3.1)
    ignores; read it as the spec's generators do: ``null`` is also allowed."""
    if isinstance(node, list):
        return [_nullable(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items()}
    if out.pop("nullable", False) is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


_DOC = _nullable(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
_URI = "urn:openai-openapi"
# OpenAPI 3.1 schemas are JSON Schema 2020-12.
_REGISTRY: Registry[Any] = Registry().with_resource(_URI, DRAFT202012.create_resource(_DOC))
MSG = [{"role": "user", "content": "hello"}]
TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
}


def _event_schemas() -> dict[str, str]:
    """Responses stream event type → its component schema (ResponseStreamEvent is a union of them)."""
    schemas = _DOC["components"]["schemas"]
    union = schemas["ResponseStreamEvent"]
    out: dict[str, str] = {}
    for option in union.get("anyOf") or union.get("oneOf") or []:
        name = option["$ref"].rsplit("/", 1)[1]
        enum = schemas[name].get("properties", {}).get("type", {}).get("enum") or []
        for kind in enum:
            out[kind] = name
    return out


EVENT_SCHEMAS = _event_schemas()


def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"{_URI}#/components/schemas/{name}"}, registry=_REGISTRY)


def check(name: str, body: Any, where: str) -> None:
    """Validate ``body`` against component schema ``name``; the failure names the body and the path."""
    errors = sorted(_validator(name).iter_errors(body), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        path = "/".join(map(str, first.absolute_path))
        raise AssertionError(f"{where}: not a valid {name} at /{path}: {first.message[:300]}\n{json.dumps(body)[:600]}")


def _frames(raw: bytes) -> list[tuple[str | None, Any]]:
    """(event name, JSON data) of every SSE event except [DONE]."""
    out: list[tuple[str | None, Any]] = []
    for block in raw.decode().split("\n\n"):
        event, data = None, []
        for line in block.splitlines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data and data != ["[DONE]"]:
            out.append((event, json.loads("\n".join(data))))
    return out


async def _post(s: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with s.post(url, json=body) as r:
        return r.status, await r.read()


REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("chat", "/chat/completions", {"messages": MSG, "max_tokens": 5}),
    ("chat", "/chat/completions", {"messages": MSG, "max_tokens": 9, "enable_thinking": True, "thinking_budget": 4}),
    ("chat", "/chat/completions", {"messages": MSG, "tools": [TOOL], "tool_choice": "required"}),
    ("completion", "/completions", {"prompt": "hello", "max_tokens": 4}),
    ("responses", "/responses", {"input": "hello", "max_output_tokens": 6}),
    ("responses", "/responses", {"input": [{"role": "user", "content": "What is 2 + 3?"}]}),
]
STREAM_OPTIONS: dict[str, Any] = {"include_usage": True}


async def _check_all(base: str, model: str, where: str) -> int:
    """Send every kind of request to ``base`` and validate every body and frame; returns how many were checked."""
    checked = 0
    async with aiohttp.ClientSession() as s:
        for kind, path, extra in REQUESTS:
            for stream in (False, True):
                body: dict[str, Any] = {"model": model, **extra, "stream": stream}
                if stream and kind != "responses":
                    body["stream_options"] = STREAM_OPTIONS
                status, raw = await _post(s, base + path, body)
                assert status == 200, (where, path, raw[:300])
                label = f"{where} {path} stream={stream} {sorted(extra)}"
                if not stream:
                    name = {
                        "chat": "CreateChatCompletionResponse",
                        "completion": "CreateCompletionResponse",
                        "responses": "Response",
                    }[kind]
                    check(name, json.loads(raw), label)
                    checked += 1
                    continue
                for event, data in _frames(raw):
                    name = {
                        "chat": "CreateChatCompletionStreamResponse",
                        "completion": "CreateCompletionResponse",
                        "responses": "ResponseStreamEvent",
                    }[kind]
                    if kind == "responses":
                        assert event == data["type"], label
                        check(EVENT_SCHEMAS[data["type"]], data, label)  # the precise member first
                    if kind == "completion":
                        # OpenAI publishes no schema for legacy completion *chunks*; its own stream sends
                        # finish_reason null until the last one, which CreateCompletionResponse does not allow.
                        data = {
                            **data,
                            "choices": [
                                {**c, "finish_reason": c["finish_reason"] or "length"} for c in data["choices"]
                            ],
                        }
                    check(name, data, label)
                    checked += 1
        status, raw = await _post(s, base + "/embeddings", {"model": model, "input": ["a", "b"]})
        assert status == 200
        check("CreateEmbeddingResponse", json.loads(raw), f"{where} /embeddings")
        async with s.get(base + "/models") as r:
            check("ListModelsResponse", await r.json(), f"{where} /models")
        for bad, status_want in (({"model": model}, 400), ({"model": model, "messages": [], "n": 1}, 400)):
            status, raw = await _post(s, base + "/chat/completions", bad)
            assert status == status_want
            check("ErrorResponse", json.loads(raw), f"{where} 400")
        checked += 4
    return checked


async def test_simulator_bodies_conform(sim: SimFactory) -> None:
    """Every simulator body and stream frame is valid against OpenAI's schema, and so are its error bodies
    (404 model, 401 key, 429 rate limit, 500 injected)."""
    p = await sim("provider-a", time_scale=0.001, models=("m",), api_keys=("sk-good",))
    headers = {"Authorization": "Bearer sk-good"}
    # api_keys are enforced: send the good key on every request of the sweep
    p.spec.api_keys  # noqa: B018 - documents why the session below carries a header
    async with aiohttp.ClientSession(headers=headers) as s:
        status, raw = await _post(s, p.url + "/chat/completions", {"model": "other", "messages": MSG})
        assert status == 404
        check("ErrorResponse", json.loads(raw), "sim 404")
    async with aiohttp.ClientSession() as s:
        status, raw = await _post(s, p.url + "/chat/completions", {"model": "m", "messages": MSG})
        assert status == 401
        check("ErrorResponse", json.loads(raw), "sim 401")
    q = await sim("vllm", time_scale=0.001)
    n = await _check_all(q.url, "m", "sim")
    assert n > 40
    q.set_faults(Faults(rate_limit_rpm=1))
    async with aiohttp.ClientSession() as s:
        statuses = [(await _post(s, q.url + "/chat/completions", {"model": "m", "messages": MSG}))[0] for _ in range(2)]
        status, raw = await _post(s, q.url + "/chat/completions", {"model": "m", "messages": MSG})
    assert status == 429
    assert statuses[-1] == 429
    check("ErrorResponse", json.loads(raw), "sim 429")
    q.set_faults(Faults(rate_limit_rpm=None, error_rate=1.0, error_statuses=[500]))
    async with aiohttp.ClientSession() as s:
        status, raw = await _post(s, q.url + "/chat/completions", {"model": "m", "messages": MSG})
    assert status == 500
    check("ErrorResponse", json.loads(raw), "sim 500")


async def test_gateway_bodies_conform(sim: SimFactory, gateway: GwFactory) -> None:
    """The same sweep through the gateway, plus its own errors: unknown alias, every route failing, and the
    SSE error event after output began."""
    p = await sim("vllm", time_scale=0.001, models=("up",))
    config = {
        "providers": {"p": {"base_url": p.url, "api_keys": ["sk-p-0123456789"]}},
        "models": {"m": {"routes": [{"provider": "p", "model": "up"}]}},
    }
    gw = await gateway(config)
    assert await _check_all(gw.url, "m", "gateway") > 40
    async with aiohttp.ClientSession() as s:
        status, raw = await _post(s, gw.url + "/chat/completions", {"model": "nope", "messages": MSG})
        assert status == 404
        check("ErrorResponse", json.loads(raw), "gateway 404")
        p.set_faults(Faults(error_rate=1.0, error_statuses=[503]))
        status, raw = await _post(s, gw.url + "/chat/completions", {"model": "m", "messages": MSG})
        assert status >= 500
        check("ErrorResponse", json.loads(raw), "gateway 5xx")
        p.set_faults(Faults(error_rate=0.0, disconnect_after_tokens=2))
        body = {"model": "m", "messages": MSG, "max_tokens": 6, "stream": True}
        status, raw = await _post(s, gw.url + "/chat/completions", body)
        frames = _frames(raw)
        assert status == 200
        assert frames[-1][0] == "error"
        check("ErrorResponse", frames[-1][1], "gateway mid-stream error event")
        for _, data in frames[:-1]:
            check("CreateChatCompletionStreamResponse", data, "gateway chunks before the cut")


@pytest.mark.parametrize("name", ["CreateChatCompletionResponse", "ResponseStreamEvent", "ErrorResponse"])
def test_the_vendored_schema_refuses_what_openai_would_not_send(name: str) -> None:
    """The validator is not vacuous: a body missing a required field fails."""
    with pytest.raises(AssertionError):
        check(name, {"object": "chat.completion"}, "negative control")
    assert _DOC["source"]["commit"] == "f85dbe223d40e1a31cba812ab2d755c7e98a92a3"
