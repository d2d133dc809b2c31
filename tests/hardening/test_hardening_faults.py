"""The fault matrix of docs/reliability.md: one row per fault kind, each stream and non-stream.

Every case runs a real gateway with two providers under the ``weighted`` policy: ``primary`` (weight
100, the faulty one) and ``fallback`` (weight 0: only ever a fallback). Faults come from a real
simulator (its fault API), a closed port, a full accept queue, a self-signed TLS server, or a small
"rogue" upstream for what the simulator does not do (idle after tokens, huge answers, 403, a 429 with
its own Retry-After). Each case checks what the client sees, the ledger row, and the metric that moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from conftest import GatewayHandle, SimFactory
from tailgate.ledger import read_rows

GwFactory = Callable[..., Awaitable[GatewayHandle]]
ALIAS = "deepseek-v3.2"
MSG = [{"role": "user", "content": "hello"}]
TIMEOUTS = {"connect": 0.5, "headers": 0.6, "first_token": 0.6, "idle": 0.5, "total": 20}


# ---- odd upstreams ---------------------------------------------------------------------------------


@dataclass
class Rogue:
    """A tiny upstream that misbehaves on purpose (``mode``); records how many requests it saw."""

    mode: str
    url: str = ""
    seen: int = 0
    runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen += 1
        body = json.loads(await request.read())
        stream = bool(body.get("stream"))
        if self.mode == "429_retry_after":
            return web.json_response(
                {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}},
                status=429,
                headers={"Retry-After": "7"},
            )
        if self.mode == "403":
            return web.json_response({"error": {"message": "forbidden model", "type": "permission_error"}}, status=403)
        if self.mode == "400":
            return web.json_response({"error": {"message": "bad thing", "type": "invalid_request_error"}}, status=400)
        if self.mode == "huge":
            if stream:  # one SSE event of 2 MiB: over the frame limit
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                await resp.write(b'data: {"choices":[{"delta":{"content":"' + b"x" * (2 << 20))
                await resp.write(b'"}}]}\n\n')
                return resp
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            block = b" " * (1 << 20)
            for _ in range(65):  # 65 MiB of whitespace: valid JSON padding, over the 64 MiB cap
                await resp.write(block)
            await resp.write(b"{}")
            return resp
        if self.mode == "cut":
            if stream:
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
                chunk["choices"] = [{"index": 0, "delta": {"content": "one"}, "finish_reason": None}]
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            else:
                resp = web.StreamResponse(headers={"Content-Type": "application/json"})
                await resp.prepare(request)
                await resp.write(b'{"id": "x", "choices": [')
            assert request.transport is not None
            request.transport.abort()  # the connection breaks mid-response
            return resp
        if self.mode == "idle_after_tokens":
            if stream:
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                for word in ("one", " two"):
                    chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
                    chunk["choices"] = [{"index": 0, "delta": {"content": word}, "finish_reason": None}]
                    await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                await asyncio.sleep(5)
                return resp
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            await resp.write(b'{"id": "x", "choices": [')
            await asyncio.sleep(5)
            return resp
        raise AssertionError(self.mode)


@pytest.fixture
async def rogue() -> AsyncIterator[Callable[[str], Awaitable[Rogue]]]:
    made: list[Rogue] = []

    async def factory(mode: str) -> Rogue:
        r = Rogue(mode)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", r.handle)
        r.runner = web.AppRunner(app, shutdown_timeout=0.5)
        await r.runner.setup()
        site = web.TCPSite(r.runner, "127.0.0.1", 0)
        await site.start()
        r.url = f"http://127.0.0.1:{site.port}/v1"
        made.append(r)
        return r

    yield factory
    for r in made:
        assert r.runner is not None
        await r.runner.cleanup()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


class Blackhole:
    """A listening socket whose accept queue is full: new SYNs are dropped, so connect() hangs."""

    def __init__(self) -> None:
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(0)
        port = self.lsock.getsockname()[1]
        self.fillers = []
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                c.connect(("127.0.0.1", port))
            self.fillers.append(c)
        self.url = f"http://127.0.0.1:{port}/v1"

    def close(self) -> None:
        for c in self.fillers:
            c.close()
        self.lsock.close()


@pytest.fixture(scope="module")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its key (made once by the openssl command line)."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            "/usr/bin/openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def _tls_server(cert: Path, key: Path) -> tuple[asyncio.Server, str]:
    """A real TLS server with a self-signed certificate: the client's handshake fails verification."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    return server, f"https://127.0.0.1:{port}/v1"


# ---- the matrix --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """What one mode of a fault row must show."""

    client: str
    """``fallback`` (200 served by the fallback after a failed attempt), ``sse_error`` (the stream
    started and ends with an SSE error event), ``served`` (200 from the primary), or an HTTP status."""
    error_class: str | None
    """The failed attempt's class in ``tailgate_upstream_attempts_total{provider="primary",outcome}``."""
    outcome: str = "ok"
    """The ledger row's ``outcome``."""
    code: str | None = None
    """The error code the client sees, for a passed-on error."""


@dataclass(frozen=True)
class Row:
    name: str
    source: str
    """``sim`` (faults on a simulator), ``closed``, ``blackhole``, ``tls``, or ``rogue:<mode>``."""
    faults: dict[str, Any] = field(default_factory=dict)
    stream: Expect | None = None
    unary: Expect | None = None
    sim_keys: tuple[str, ...] = ()
    primary_keys: tuple[str, ...] = ("sk-primary",)
    timeouts: dict[str, float] = field(default_factory=lambda: dict(TIMEOUTS))


FB = "fallback"
ROWS = [
    Row("connect_refused", "closed", stream=Expect(FB, "connect"), unary=Expect(FB, "connect")),
    Row("connect_timeout", "blackhole", stream=Expect(FB, "connect"), unary=Expect(FB, "connect")),
    Row("tls_handshake_failure", "tls", stream=Expect(FB, "connect"), unary=Expect(FB, "connect")),
    Row(
        "headers_stall",
        "sim",
        {"stall_headers_s": 5},
        stream=Expect(FB, "timeout_headers"),
        unary=Expect(FB, "timeout_headers"),
    ),
    Row(
        "first_token_stall",
        "sim",
        {"stall_first_token_s": 5},
        stream=Expect(FB, "timeout_first_token"),
        unary=Expect(FB, "timeout_headers"),  # a non-streamed answer's headers come with its body
    ),
    Row(
        "idle_stall_mid_stream",
        "rogue:idle_after_tokens",
        stream=Expect("sse_error", "timeout_idle", outcome="timeout_idle"),
        unary=Expect(FB, "timeout_first_token"),
    ),
    Row(
        "cut_mid_stream",
        "rogue:cut",
        stream=Expect("sse_error", "cut", outcome="cut"),
        unary=Expect(FB, "cut"),
    ),
    Row(
        "malformed_chunk",
        "sim",
        {"malformed_rate": 1.0},
        stream=Expect("sse_error", "malformed", outcome="malformed"),
        unary=Expect(FB, "malformed"),
    ),
    Row(
        "http_5xx", "sim", {"error_rate": 1.0, "error_statuses": [502]}, Expect(FB, "http_5xx"), Expect(FB, "http_5xx")
    ),
    Row(
        "upstream_outage_reset",
        "sim",
        {"outage": True, "outage_mode": "reset"},
        Expect(FB, "connect"),
        Expect(FB, "connect"),
    ),
    Row(
        "rate_limited_with_retry_after",
        "rogue:429_retry_after",
        stream=Expect(FB, "rate_limited"),
        unary=Expect(FB, "rate_limited"),
    ),
    Row(
        "rate_limited_without_retry_after",
        "sim",
        {"error_rate": 1.0, "error_statuses": [429]},
        Expect(FB, "rate_limited"),
        Expect(FB, "rate_limited"),
    ),
    Row(
        "insufficient_quota",
        "sim",
        {"quota_exhausted": True},
        Expect("429", "insufficient_quota", outcome="insufficient_quota", code="insufficient_quota"),
        Expect("429", "insufficient_quota", outcome="insufficient_quota", code="insufficient_quota"),
    ),
    Row(
        "revoked_provider_key_401",
        "sim",
        sim_keys=("sk-good",),
        primary_keys=("sk-revoked", "sk-good"),
        stream=Expect("served", "http_4xx"),
        unary=Expect("served", "http_4xx"),
    ),
    Row(
        "only_provider_key_refused_401",
        "sim",
        sim_keys=("sk-good",),
        primary_keys=("sk-revoked",),
        stream=Expect("401", "http_4xx", outcome="http_4xx", code="invalid_api_key"),
        unary=Expect("401", "http_4xx", outcome="http_4xx", code="invalid_api_key"),
    ),
    Row(
        "forbidden_403",
        "rogue:403",
        stream=Expect("403", "http_4xx", outcome="http_4xx"),
        unary=Expect("403", "http_4xx", outcome="http_4xx"),
    ),
    Row(
        "upstream_400",
        "rogue:400",
        stream=Expect("400", "http_4xx", outcome="http_4xx"),
        unary=Expect("400", "http_4xx", outcome="http_4xx"),
    ),
    Row("slow_drip", "sim", {"slow_drip_s": 0.05}, stream=Expect("served", None), unary=Expect("served", None)),
    Row(
        "oversized_answer",
        "rogue:huge",
        stream=Expect(FB, "malformed"),
        unary=Expect(FB, "malformed"),
        # 65 MiB must arrive before the first-token deadline for the size cap to be what ends it
        timeouts={**TIMEOUTS, "headers": 20, "first_token": 20},
    ),
]


async def _metric(session: aiohttp.ClientSession, gw: GatewayHandle, name: str, **labels: str) -> float:
    async with session.get(f"{gw.root_url}/metrics") as r:
        text = await r.text()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{"):
            got = ",".join(sorted(line[len(name) + 1 : line.index("}")].split(",")))
            if got == want:
                total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["stream", "unary"])
@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_fault_matrix(
    row: Row,
    mode: str,
    sim: SimFactory,
    gateway: GwFactory,
    rogue: Callable[[str], Awaitable[Rogue]],
    tls_cert: tuple[Path, Path],
    request: pytest.FixtureRequest,
) -> None:
    """One fault, one mode: what the client sees, the ledger row, and the attempts metric (docs/reliability.md)."""
    expect = row.stream if mode == "stream" else row.unary
    assert expect is not None
    cleanup = contextlib.ExitStack()
    request.addfinalizer(cleanup.close)
    fallback = await sim("instant", models=("up-fallback",))
    primary_sim = None
    if row.source == "sim":
        primary_sim = await sim("instant", models=("up-primary",), faults=row.faults or None, api_keys=row.sim_keys)
        primary_url = primary_sim.url
    elif row.source == "closed":
        primary_url = f"http://127.0.0.1:{_closed_port()}/v1"
    elif row.source == "blackhole":
        hole = Blackhole()
        cleanup.callback(hole.close)
        primary_url = hole.url
    elif row.source == "tls":
        server, primary_url = await _tls_server(*tls_cert)
        cleanup.callback(server.close)
    else:
        primary_url = (await rogue(row.source.split(":", 1)[1])).url
    gw = await gateway(
        {
            "providers": {
                "primary": {"base_url": primary_url, "api_keys": list(row.primary_keys), "timeouts": row.timeouts},
                "fallback": {"base_url": fallback.url, "api_keys": ["sk-fallback"], "timeouts": TIMEOUTS},
            },
            "models": {
                ALIAS: {
                    "routes": [
                        {"provider": "primary", "model": "up-primary", "weight": 100},
                        {"provider": "fallback", "model": "up-fallback", "weight": 0},
                    ]
                }
            },
            "routing": {"policy": "weighted", "probes": {"enabled": False}},
        }
    )
    body = {"model": ALIAS, "messages": MSG, "max_tokens": 8, "stream": mode == "stream"}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{gw.url}/chat/completions", json=body) as resp:
            status, headers, raw = resp.status, resp.headers, await resp.read()
        if expect.client in ("fallback", "served", "sse_error"):
            assert status == 200, raw[:300]
            served_by = "fallback" if expect.client == "fallback" else "primary"
            assert headers["x-tailgate-provider"] == served_by
            if mode == "stream":
                assert headers["content-type"].startswith("text/event-stream")
                if expect.client == "sse_error":
                    assert b"data: [DONE]" not in raw
                    tail = raw.strip().split(b"\n\n")[-1]
                    assert tail.startswith(b"event: error\ndata: "), raw[-300:]
                    assert json.loads(tail.split(b"data: ", 1)[1])["error"]["message"]
                else:
                    assert raw.rstrip().endswith(b"data: [DONE]"), raw[-300:]
            else:
                assert json.loads(raw)["choices"][0]["message"]["content"]
        else:
            assert status == int(expect.client), raw[:300]
            err = json.loads(raw)["error"]
            assert set(err) == {"message", "type", "param", "code"}
            if expect.code is not None:
                assert err["code"] == expect.code
            assert "sk-primary" not in raw.decode()
            assert "sk-revoked" not in raw.decode()
        if expect.error_class is not None:
            moved = await _metric(
                session, gw, "tailgate_upstream_attempts_total", provider="primary", outcome=expect.error_class
            )
            assert moved == 1, expect.error_class
        if row.name == "revoked_provider_key_401":
            assert await _metric(session, gw, "tailgate_provider_keys_revoked_total", provider="primary") == 1
            async with session.post(f"{gw.url}/chat/completions", json=body) as again:  # only the good key now
                assert again.status == 200
                assert again.headers["x-tailgate-attempts"] == "1"
                await again.read()  # to its end: a stream left unread would be booked as client_closed
        if row.name == "rate_limited_with_retry_after":
            assert gw.gateway.providers["primary"].paused(time.monotonic())  # for the upstream's 7 s
    ledger = gw.gateway.ledger
    assert ledger is not None
    await asyncio.sleep(0.05)  # the row is booked in the loop turn after the response
    await ledger.flush()
    row_ = read_rows(ledger.path)[-1]
    assert row_.outcome == expect.outcome
    assert row_.status == (200 if expect.client in ("fallback", "served", "sse_error") else int(expect.client))
    if expect.client == "fallback":
        assert (row_.provider, row_.attempts) == ("fallback", 2)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("name", "stream", "faults"),
    [
        ("before_first_token", False, {"stall_first_token_s": 5}),
        ("before_first_token", True, {"stall_first_token_s": 5}),
        ("mid_stream", True, {"slow_drip_s": 0.1}),
    ],
)
async def test_client_disconnect(
    name: str, stream: bool, faults: dict[str, Any], sim: SimFactory, gateway: GwFactory
) -> None:
    """The client goes away before the first token or mid-stream: the upstream request is cancelled at
    once (the simulator records a 499), the ledger row says ``client_closed`` / 499, and
    ``tailgate_requests_total{outcome="client_closed"}`` moves."""
    up = await sim("instant", models=("up-primary",), faults=faults)
    gw = await gateway(
        {
            "providers": {"primary": {"base_url": up.url, "timeouts": {**TIMEOUTS, "first_token": 10, "idle": 10}}},
            "models": {ALIAS: {"routes": [{"provider": "primary", "model": "up-primary"}]}},
            "routing": {"probes": {"enabled": False}},
        }
    )
    body = {"model": ALIAS, "messages": MSG, "max_tokens": 30, "stream": stream}
    async with aiohttp.ClientSession() as session:
        if name == "mid_stream":
            async with session.post(f"{gw.url}/chat/completions", json=body) as resp:
                assert resp.status == 200
                first = await resp.content.readuntil(b"\n\n")
                assert first.startswith(b"data: ")
                resp.close()  # drop the connection mid-stream
        else:
            with pytest.raises(TimeoutError):
                async with session.post(
                    f"{gw.url}/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=0.5)
                ) as resp:
                    await resp.read()
        for _ in range(100):  # the cancellation reaches the simulator within a moment
            if any(t.status == 499 for t in up.truth.records()):
                break
            await asyncio.sleep(0.05)
        assert [t.status for t in up.truth.records()] == [499]
        async with session.get(f"{gw.root_url}/metrics") as r:
            text = await r.text()
    series = 'tailgate_requests_total{alias="deepseek-v3.2",api="openai",outcome="client_closed",provider="primary"}'
    assert f"{series} 1.0" in text
    ledger = gw.gateway.ledger
    assert ledger is not None
    await ledger.flush()
    last = read_rows(ledger.path)[-1]
    assert (last.outcome, last.status) == ("client_closed", 499)
