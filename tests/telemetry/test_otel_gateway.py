"""The gateway's OpenTelemetry export received by a real OTLP/HTTP receiver (tests/otlp_receiver.py, decoding with
the official opentelemetry-proto messages): for chat, a stream, ``/v1/messages``, a fallback and a hedge, the span
tree (one server span, a client span per attempt with its role), the ``gen_ai.*`` attributes and the GenAI metric
points match each request's ledger row."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from conftest import GatewayHandle, SimFactory
from otlp_receiver import GotSpan, Receiver
from tailgate.ledger import LedgerRow, read_rows

GwFactory = Callable[..., Awaitable[GatewayHandle]]
MSG = [{"role": "user", "content": "hi"}]
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A live OTLP receiver (ask for it before ``gateway``: it must outlive the gateways' last export)."""
    r = await Receiver().start()
    yield r
    await r.stop()


def _telemetry(receiver: Receiver, **extra: Any) -> dict[str, Any]:
    return {"endpoint": receiver.endpoint, "schedule_delay": "50ms", "metric_interval": "60s", **extra}


async def _settle(gw: GatewayHandle) -> list[LedgerRow]:
    """Every request booked, its spans and metric points exported; the ledger's rows."""
    await gw.gateway.books.drain()
    assert gw.gateway.otel is not None
    await asyncio.to_thread(gw.gateway.otel.force_flush)
    assert gw.gateway.ledger is not None
    await gw.gateway.ledger.flush()
    return read_rows(Path(gw.gateway.ledger.path))


def _row(rows: list[LedgerRow], rid: str) -> LedgerRow:
    (row,) = [r for r in rows if r.request_id == rid]
    return row


def _matches_row(server: GotSpan, row: LedgerRow) -> None:
    """The server span says what the ledger row says."""
    a = server.attributes
    assert a["tailgate.request_id"] == row.request_id
    assert a["gen_ai.request.model"] == row.alias
    assert a["tailgate.provider"] == row.provider
    assert a["tailgate.outcome"] == row.outcome
    assert a["tailgate.attempts"] == row.attempts
    assert a["http.response.status_code"] == row.status
    assert a.get("gen_ai.usage.input_tokens") == row.prompt_tokens
    assert a.get("gen_ai.usage.output_tokens") == row.output_tokens
    assert a.get("gen_ai.usage.cache_read.input_tokens") == row.cached_tokens
    assert a["gen_ai.request.stream"] is row.stream
    assert row.e2e_ms is not None
    assert server.end_ns - server.start_ns == pytest.approx(row.e2e_ms * 1e6, rel=0.01, abs=1e5)


def _two(primary: str, secondary: str, **model: Any) -> dict[str, Any]:
    return {
        "providers": {
            "primary": {"base_url": primary, "api_keys": ["sk-primary-0123456789"], "preset": "deepseek"},
            "secondary": {"base_url": secondary, "api_keys": ["sk-secondary-0123456789"]},
        },
        "models": {
            "m": {
                "routes": [
                    {"provider": "primary", "model": "up-primary", "weight": 1},
                    {"provider": "secondary", "model": "up-secondary", "weight": 0},
                ],
                **model,
            }
        },
        "routing": {"probes": {"enabled": False}},
    }


async def test_chat_and_stream_spans_and_metrics_match_the_ledger(
    receiver: Receiver, sim: SimFactory, gateway: GwFactory
) -> None:
    """A chat answer and a stream: one server span each (the caller's traceparent its parent), one client span
    (primary, served) under it; gen_ai.* attributes and the GenAI histograms' points equal the ledger rows."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    gw = await gateway({**_two(a.url, b.url), "telemetry": _telemetry(receiver)})
    caller = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    async with aiohttp.ClientSession() as session:
        for rid, stream in (("otel-chat", False), ("otel-stream", True)):
            body = {"model": "m", "messages": MSG, "max_tokens": 5, "stream": stream}
            if stream:
                body["stream_options"] = {"include_usage": True}
            headers = {"x-request-id": rid, "traceparent": caller}
            async with session.post(f"{gw.url}/chat/completions", json=body, headers=headers) as r:
                assert r.status == 200
                await r.read()
    rows = await _settle(gw)
    for rid, stream in (("otel-chat", False), ("otel-stream", True)):
        row = _row(rows, rid)
        server, kids = receiver.tree(rid)
        _matches_row(server, row)
        assert server.name == "chat m"
        assert server.trace_id == CALLER_TRACE
        assert server.parent_id == CALLER_SPAN
        assert server.attributes["gen_ai.operation.name"] == "chat"
        assert server.attributes["gen_ai.provider.name"] == "deepseek"  # the preset's well-known name
        assert server.attributes["gen_ai.response.model"] == "up-primary"
        assert str(server.attributes["gen_ai.response.id"]).startswith("chatcmpl-")
        if not stream:
            assert server.attributes["gen_ai.response.finish_reasons"] == ("length",)
        else:
            assert row.ttft_ms is not None
            assert server.attributes["gen_ai.response.time_to_first_chunk"] == pytest.approx(row.ttft_ms / 1000.0)
        assert server.resource["service.name"] == "tailgate-gateway"
        (client,) = kids
        assert client.kind == "client"
        assert client.name == "chat up-primary"
        ca = client.attributes
        assert ca["tailgate.attempt.role"] == "primary"
        assert ca["tailgate.route.reason"] == "policy"
        assert ca["tailgate.attempt.outcome"] == "served"
        assert ca["tailgate.route"] == "primary/up-primary"
        assert ca["tailgate.route.rank"] == 0
        assert server.attributes["tailgate.routing.policy"] == "adaptive"
        assert ca["gen_ai.usage.output_tokens"] == row.output_tokens
        assert ca["server.address"] == "127.0.0.1"
        assert server.start_ns <= client.start_ns <= client.end_ns <= server.end_ns
    points = receiver.points
    tokens = {(p.attributes["gen_ai.token.type"]): p for p in points["gen_ai.client.token.usage"]}
    assert tokens["input"].unit == "{token}"
    assert tokens["input"].count == 2
    assert tokens["input"].sum == sum(r.prompt_tokens or 0 for r in rows)
    assert tokens["output"].sum == sum(r.output_tokens or 0 for r in rows)
    assert tokens["output"].attributes["gen_ai.provider.name"] == "deepseek"
    (duration,) = points["gen_ai.client.operation.duration"]
    assert duration.unit == "s"
    assert duration.count == 2
    assert duration.sum == pytest.approx(sum(r.e2e_ms or 0 for r in rows) / 1000.0)
    (ttft,) = points["gen_ai.server.time_to_first_token"]
    assert ttft.count == 1
    assert ttft.sum == pytest.approx((_row(rows, "otel-stream").ttft_ms or -1.0) / 1000.0)
    streamed = _row(rows, "otel-stream")
    assert streamed.e2e_ms is not None
    assert streamed.ttft_ms is not None
    assert streamed.output_tokens is not None
    assert streamed.output_tokens >= 2
    (tpot,) = points["gen_ai.server.time_per_output_token"]
    per_token = (streamed.e2e_ms - streamed.ttft_ms) / 1000.0 / (streamed.output_tokens - 1)
    assert tpot.count == 1
    assert tpot.sum == pytest.approx(per_token)


async def test_fallback_and_hedge_span_trees(receiver: Receiver, sim: SimFactory, gateway: GwFactory) -> None:
    """A primary answering 500 then the secondary: two client spans, primary (http_5xx, an error) and fallback
    (served). A hedged request whose primary stalls: primary (cancelled) and hedge (served) under one server span."""
    a = await sim("instant", models=("up-primary",), faults={"error_rate": 1.0})
    b = await sim("instant", models=("up-secondary",))
    gw = await gateway({**_two(a.url, b.url), "telemetry": _telemetry(receiver)})
    async with aiohttp.ClientSession() as session:
        body = {"model": "m", "messages": MSG, "max_tokens": 3}
        async with session.post(f"{gw.url}/chat/completions", json=body, headers={"x-request-id": "otel-fb"}) as r:
            assert r.status == 200
            assert r.headers["x-tailgate-provider"] == "secondary"
    c = await sim("instant", models=("up-primary",), faults={"stall_first_token_s": 0.6})
    hedged = await gateway(
        {**_two(c.url, b.url, hedge={"after": "50ms", "budget": "100%"}), "telemetry": _telemetry(receiver)}
    )
    async with aiohttp.ClientSession() as session:
        body = {"model": "m", "messages": MSG, "max_tokens": 3, "stream": True}
        async with session.post(
            f"{hedged.url}/chat/completions", json=body, headers={"x-request-id": "otel-hedge"}
        ) as r:
            await r.read()
            assert r.headers.get("x-tailgate-hedged") == "1"
    rows = await _settle(gw) + await _settle(hedged)
    server, kids = receiver.tree("otel-fb")
    _matches_row(server, _row(rows, "otel-fb"))
    assert [k.attributes["tailgate.attempt.role"] for k in kids] == ["primary", "fallback"]
    assert kids[0].attributes["tailgate.attempt.outcome"] == "http_5xx"
    assert kids[0].attributes["error.type"] == "http_5xx"
    assert kids[0].status_code == 2
    assert kids[1].attributes["tailgate.attempt.outcome"] == "served"
    assert kids[1].attributes["tailgate.route.reason"] == "fallback"
    assert kids[1].attributes["tailgate.route.rank"] == 1
    assert server.attributes["gen_ai.response.model"] == "up-secondary"
    server, kids = receiver.tree("otel-hedge")
    _matches_row(server, _row(rows, "otel-hedge"))
    assert server.attributes["tailgate.hedged"] is True
    assert server.parent_id == ""  # no traceparent: the request started the trace
    roles = {k.attributes["tailgate.attempt.role"]: k.attributes["tailgate.attempt.outcome"] for k in kids}
    assert roles == {"primary": "cancelled", "hedge": "served"}
    assert all(k.status_code != 2 for k in kids)  # a lost race is no error


async def test_messages_spans_name_the_anthropic_answer(
    receiver: Receiver, sim: SimFactory, gateway: GwFactory
) -> None:
    """``/v1/messages`` translated to an OpenAI chat provider, whole and streamed: operation ``chat``, the response
    id the client got (the message's, the stream's ``message_start``), Anthropic's stop reason, the row's tokens."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    config = _two(a.url, b.url)
    del config["providers"]["primary"]["preset"]  # deepseek's preset would pass /v1/messages through to its own API
    gw = await gateway({**config, "telemetry": _telemetry(receiver)})
    got: dict[str, str] = {}
    async with aiohttp.ClientSession() as session:
        for rid, stream in (("otel-msg", False), ("otel-msg-stream", True)):
            body = {"model": "m", "max_tokens": 5, "messages": MSG, "stream": stream}
            headers = {"x-request-id": rid, "anthropic-version": "2023-06-01"}
            async with session.post(f"{gw.root_url}/v1/messages", json=body, headers=headers) as r:
                assert r.status == 200
                raw = await r.read()
            if stream:
                start = next(
                    line for line in raw.split(b"\n") if line.startswith(b"data:") and b"message_start" in line
                )
                got[rid] = json.loads(start[5:])["message"]["id"]
            else:
                got[rid] = json.loads(raw)["id"]
    rows = await _settle(gw)
    for rid in got:
        row = _row(rows, rid)
        assert row.api == "anthropic"
        server, kids = receiver.tree(rid)
        _matches_row(server, row)
        assert server.attributes["gen_ai.operation.name"] == "chat"
        assert server.attributes["gen_ai.response.id"] == got[rid]
        assert len(kids) == 1
        assert kids[0].attributes["tailgate.attempt.outcome"] == "served"
    whole, _ = receiver.tree("otel-msg")
    assert whole.attributes["gen_ai.response.finish_reasons"] == ("max_tokens",)


async def test_traceparent_goes_upstream_only_where_the_provider_takes_it(
    receiver: Receiver, gateway: GwFactory
) -> None:
    """``propagate_trace: true``: the attempt carries a traceparent naming its own client span (the caller's trace);
    the default (false): no traceparent reaches the provider. Content stays off unless enabled, then redacted."""
    seen: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent"))
        await request.read()
        body = {
            "id": "chatcmpl-fixed",
            "object": "chat.completion",
            "created": 0,
            "model": "up-model-2025",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
        }
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    try:
        for propagate in (True, False):
            config = {
                "providers": {"p": {"base_url": url, "api_keys": ["sk-p-0123456789"], "propagate_trace": propagate}},
                "models": {"m": {"routes": [{"provider": "p", "model": "up-model"}]}},
                "routing": {"probes": {"enabled": False}},
                "telemetry": _telemetry(receiver, content={"enabled": propagate, "redact": ["hunter\\d"]}),
            }
            gw = await gateway(config)
            rid = f"otel-prop-{propagate}"
            headers = {"x-request-id": rid, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
            messages = [{"role": "user", "content": "password hunter2, key sk-abcdefabcdefabcdef0123"}]
            async with aiohttp.ClientSession() as session:
                body = {"model": "m", "messages": messages}
                async with session.post(f"{gw.url}/chat/completions", json=body, headers=headers) as r:
                    assert r.status == 200
            await _settle(gw)
            server, (client,) = receiver.tree(rid)
            assert server.attributes["gen_ai.response.model"] == "up-model-2025"  # what the provider said
            assert server.attributes["gen_ai.response.id"] == "chatcmpl-fixed"
            assert server.attributes["gen_ai.response.finish_reasons"] == ("stop",)
            assert server.attributes["gen_ai.usage.input_tokens"] == 7
            if propagate:
                assert seen[-1] == f"00-{CALLER_TRACE}-{client.span_id}-01"
                content = str(server.attributes["gen_ai.input.messages"])
                assert "hunter2" not in content
                assert "sk-abcdef" not in content
                assert content.count("[REDACTED]") == 2
                assert '"hello"' in str(server.attributes["gen_ai.output.messages"])
            else:
                assert seen[-1] is None
                assert not any(k.startswith(("gen_ai.input", "gen_ai.output")) for k in server.attributes)
    finally:
        await runner.cleanup()


async def test_off_by_default_and_an_unsampled_caller(receiver: Receiver, sim: SimFactory, gateway: GwFactory) -> None:
    """No telemetry section (and no OTEL_* variable in the test's environment): no exporter, no request traced.
    With it, a caller whose traceparent does not sample gets no span, while the metrics still count its requests
    (a refused one with its ``error.type``)."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    off = await gateway(_two(a.url, b.url))
    assert off.gateway.otel is None
    assert off.gateway.core.tracing is None
    on = await gateway({**_two(a.url, b.url), "telemetry": _telemetry(receiver)})
    async with aiohttp.ClientSession() as session:
        headers = {"x-request-id": "otel-unsampled", "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-00"}
        body = {"model": "m", "messages": MSG, "max_tokens": 3}
        async with session.post(f"{on.url}/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200
        body["model"] = "no-such-alias"
        async with session.post(f"{on.url}/chat/completions", json=body, headers=headers) as r:
            assert r.status == 404
    rows = await _settle(on)
    assert not receiver.spans
    points = {p.attributes.get("error.type"): p for p in receiver.points["gen_ai.client.operation.duration"]}
    assert set(points) == {None, "unknown_model"}  # a failed request's point names why (error.type)
    assert sum(p.count for p in points.values()) == len(rows) == 2
    assert points["unknown_model"].attributes["gen_ai.request.model"] == "_other"  # a client cannot grow the series


@pytest.mark.parametrize("collector", ["hang", "closed"])
async def test_a_dead_collector_under_load_fails_no_request(
    collector: str, receiver: Receiver, sim: SimFactory, gateway: GwFactory
) -> None:
    """The collector down for a bounded stretch of load (never answering, or its port closed): every request is
    answered 200 and booked, and the spans that could not be delivered are counted in
    ``tailgate_otel_spans_dropped_total`` (none exported). The 30 s version: benchmarks/otel_collector_down.py."""
    if collector == "hang":
        receiver.mode = "hang"
        endpoint = receiver.endpoint
    else:
        with socket.socket() as s:  # a port nobody listens on: connections are refused
            s.bind(("127.0.0.1", 0))
            endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    telemetry = {
        "endpoint": endpoint,
        "schedule_delay": "20ms",
        "export_timeout": "300ms",
        "max_queue_size": 16,
        "max_export_batch_size": 8,
        "metric_interval": "200ms",
    }
    gw = await gateway({**_two(a.url, b.url), "telemetry": telemetry})
    statuses: list[int] = []
    until = asyncio.get_running_loop().time() + 2.5

    async def client(session: aiohttp.ClientSession, n: int) -> None:
        i = 0
        while asyncio.get_running_loop().time() < until:
            body = {"model": "m", "messages": MSG, "max_tokens": 4, "stream": (n + i) % 2 == 0}
            async with session.post(f"{gw.url}/chat/completions", json=body) as r:
                await r.read()
                statuses.append(r.status)
            i += 1

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session, n) for n in range(8)))
        async with session.get(f"{gw.root_url}/metrics") as r:
            metrics = await r.text()
    assert len(statuses) > 50
    assert set(statuses) == {200}  # 0 failed requests
    assert gw.gateway.ledger is not None
    await gw.gateway.ledger.flush()
    rows = read_rows(Path(gw.gateway.ledger.path))
    assert len(rows) == len(statuses)
    assert {r.outcome for r in rows} == {"ok"}
    registry = gw.gateway.metrics.registry
    dropped = sum(
        registry.get_sample_value("tailgate_otel_spans_dropped_total", {"reason": r}) or 0.0
        for r in ("queue_full", "export_failed")
    )
    assert dropped > len(statuses)  # 2 spans a request; the queue holds 16
    assert (registry.get_sample_value("tailgate_otel_spans_exported_total") or 0.0) == 0
    assert 'tailgate_otel_spans_dropped_total{reason="queue_full"}' in metrics


async def test_the_otel_variables_alone_turn_it_on(
    receiver: Receiver, sim: SimFactory, gateway: GwFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``telemetry:`` section: ``OTEL_EXPORTER_OTLP_ENDPOINT`` and ``OTEL_SERVICE_NAME`` turn the export on;
    ``OTEL_SDK_DISABLED=true`` keeps it off beside them."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gw-from-env")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    gw = await gateway(_two(a.url, b.url))
    async with aiohttp.ClientSession() as session:
        body = {"model": "m", "messages": MSG, "max_tokens": 3}
        async with session.post(f"{gw.url}/chat/completions", json=body, headers={"x-request-id": "otel-env"}) as r:
            assert r.status == 200
    rows = await _settle(gw)
    server, _ = receiver.tree("otel-env")
    _matches_row(server, _row(rows, "otel-env"))
    assert server.resource["service.name"] == "gw-from-env"
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    off = await gateway(_two(a.url, b.url))
    assert off.gateway.otel is None


def test_serve_names_an_unusable_otel_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tailgate serve`` with an OTEL_* variable it cannot use stops at once with one message naming it."""
    from click.testing import CliRunner

    from tailgate.cli import main

    path = tmp_path / "gw.yaml"
    path.write_text(
        "providers: {p: {base_url: 'http://127.0.0.1:9/v1'}}\n"
        "models: {m: {routes: [{provider: p, model: up}]}}\n"
        "telemetry: {endpoint: 'http://127.0.0.1:4318'}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "lots")
    result = CliRunner().invoke(main, ["serve", "--config", str(path), "--port", "0"])
    assert result.exit_code == 2  # a usage / config error (the CLI's _fail)
    assert "error: telemetry: OTEL_BSP_MAX_QUEUE_SIZE='lots' is not a number" in result.output


async def test_an_affinity_request_names_its_key_source(
    receiver: Receiver, sim: SimFactory, gateway: GwFactory
) -> None:
    """A conversation kept on its route (promise 7): the attempt's reason is ``affinity`` and both spans name where
    the key came from — the session header, else the stable prefix."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    gw = await gateway({**_two(a.url, b.url), "telemetry": _telemetry(receiver)})
    long = [{"role": "system", "content": "You are a careful writing assistant. " * 40}, *MSG]
    async with aiohttp.ClientSession() as session:
        for rid, extra in (("otel-aff-header", {"x-session-id": "conv-1"}), ("otel-aff-prefix", {})):
            body = {"model": "m", "messages": long, "max_tokens": 3}
            async with session.post(
                f"{gw.url}/chat/completions", json=body, headers={"x-request-id": rid, **extra}
            ) as r:
                assert r.status == 200
    await _settle(gw)
    for rid, source in (("otel-aff-header", "header"), ("otel-aff-prefix", "prefix")):
        server, (client,) = receiver.tree(rid)
        assert server.attributes["tailgate.affinity.source"] == source
        assert client.attributes["tailgate.affinity.source"] == source
        assert client.attributes["tailgate.route.reason"] == "affinity"


async def test_a_stream_cut_after_its_first_token(receiver: Receiver, sim: SimFactory, gateway: GwFactory) -> None:
    """A provider that drops the connection after a few tokens: no fallback (output reached the client); the
    attempt's span says ``cut`` (an error), not ``served``, and the request's span carries the ledger's outcome."""
    a = await sim("instant", models=("up-primary",), faults={"disconnect_after_tokens": 2})
    b = await sim("instant", models=("up-secondary",))
    gw = await gateway({**_two(a.url, b.url), "telemetry": _telemetry(receiver)})
    async with aiohttp.ClientSession() as session:
        body = {"model": "m", "messages": MSG, "max_tokens": 20, "stream": True}
        async with session.post(f"{gw.url}/chat/completions", json=body, headers={"x-request-id": "otel-cut"}) as r:
            await r.read()
    rows = await _settle(gw)
    row = _row(rows, "otel-cut")
    server, (client,) = receiver.tree("otel-cut")
    _matches_row(server, row)
    assert row.outcome != "ok"
    assert server.attributes["error.type"] == row.outcome
    assert client.attributes["tailgate.attempt.outcome"] == row.outcome
    assert client.status_code == 2


async def test_responses_api_spans_name_the_response(receiver: Receiver, sim: SimFactory, gateway: GwFactory) -> None:
    """``/v1/responses``, whole and streamed: the request's span names the response id the client got (the object's,
    the stream's ``response.created``) and the row's tokens."""
    a = await sim("instant", models=("up-primary",))
    b = await sim("instant", models=("up-secondary",))
    gw = await gateway({**_two(a.url, b.url), "telemetry": _telemetry(receiver)})
    got: dict[str, str] = {}
    async with aiohttp.ClientSession() as session:
        for rid, stream in (("otel-resp", False), ("otel-resp-stream", True)):
            body = {"model": "m", "input": "hi", "max_output_tokens": 5, "stream": stream}
            async with session.post(f"{gw.url}/responses", json=body, headers={"x-request-id": rid}) as r:
                assert r.status == 200
                raw = await r.read()
            if stream:
                first = next(line for line in raw.split(b"\n") if line.startswith(b"data:"))
                got[rid] = json.loads(first[5:])["response"]["id"]
            else:
                got[rid] = json.loads(raw)["id"]
    rows = await _settle(gw)
    for rid, response_id in got.items():
        server, (client,) = receiver.tree(rid)
        _matches_row(server, _row(rows, rid))
        assert server.attributes["gen_ai.response.id"] == response_id
        assert client.attributes["tailgate.attempt.outcome"] == "served"
