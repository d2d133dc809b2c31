"""API keys: round-robin use, and a key never shows up in any text a call produces."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from upstream_support import Clients, SimFactory, chat_body

import tailgate.upstream
from tailgate.upstream import Endpoint, KeyPool, Timeouts, UpstreamClient, call

CANARY = "sk-CANARY-9f3b2c7d1e"


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    """UpstreamClients closed after the test."""
    made = Clients()
    yield made
    await made.close()


def test_public_api() -> None:
    """The exported names change only on purpose."""
    assert sorted(tailgate.upstream.__all__) == [
        "ANTHROPIC",
        "Body",
        "Call",
        "CallResult",
        "Chunk",
        "Dialect",
        "Done",
        "Endpoint",
        "ErrorClass",
        "Event",
        "Headers",
        "KeyPool",
        "OPENAI",
        "RESPONSES",
        "Sent",
        "Tap",
        "Timeouts",
        "UnsendableHeader",
        "UpstreamClient",
        "call",
        "endpoint_for",
    ]


def test_key_pool_round_robin() -> None:
    """Keys come in turn and wrap around; a keyless pool gives None."""
    pool = KeyPool(["a", "b", "c"])
    assert [pool.next() for _ in range(4)] == [(0, "a"), (1, "b"), (2, "c"), (0, "a")]
    assert KeyPool([]).next() is None
    assert "a" not in repr(pool)


def test_endpoint_validation_and_repr() -> None:
    """Bad endpoints and timeouts are refused at construction; repr hides the keys."""
    ep = Endpoint("p", "http://h:1/v1/", api_keys=(CANARY,))
    assert ep.url("/chat/completions") == "http://h:1/v1/chat/completions"
    assert CANARY not in repr(ep)
    with pytest.raises(ValueError, match="base_url"):
        Endpoint("p", "h:1/v1")
    with pytest.raises(ValueError, match="empty"):
        Endpoint("p", "http://h/v1", api_keys=("",))
    with pytest.raises(ValueError, match=r"Timeouts\.idle"):
        Timeouts(idle=0)


async def test_keys_alternate_against_per_key_rate_limit(sim: SimFactory, clients: Clients) -> None:
    """With a 1 rps per-key limit, two keys in turn pass twice where one key alone is limited."""
    keys = ("key-A", "key-B")
    p = await sim("instant", api_keys=keys, faults={"rate_limit_rps": 1})
    both = clients(p.url, keys=keys)
    results = [await call(both, "chat/completions", chat_body(2), stream=True).collect() for _ in range(3)]
    assert [r.key_index for r in results] == [0, 1, 0]
    assert [r.status for r in results] == [200, 200, 429]


async def test_keyless_provider_sends_no_authorization(clients: Clients) -> None:
    """A provider without keys gets no Authorization header."""
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0}})

    url = await _serve(handler)
    try:
        result = await call(clients(url), "chat/completions", chat_body(stream=False), stream=False).collect()
    finally:
        await _stop()
    assert result.ok
    assert seen == [None]


_runners: list[web.AppRunner] = []


async def _serve(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> str:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    _runners.append(runner)
    return f"http://127.0.0.1:{port}/v1"


async def _stop() -> None:
    while _runners:
        await _runners.pop().cleanup()


async def test_canary_key_never_in_result_text(clients: Clients) -> None:
    """An upstream that echoes the key in its error: the key is redacted from every text we produce."""

    async def echo(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        body = {"error": {"message": f"bad key {auth}", "type": "invalid_request_error", "param": auth, "code": None}}
        return web.json_response(body, status=401)

    url = await _serve(echo)
    try:
        c = UpstreamClient(Endpoint("p", url, api_keys=(CANARY,)))
        clients.made.append(c)
        running = call(c, "chat/completions", chat_body(), stream=True)
        events = [repr(e) for e in [e async for e in running]]
    finally:
        await _stop()
    result = running.result
    assert result is not None
    assert result.error_class == "http_4xx"
    assert result.error is not None
    assert "***" in result.error.message
    texts = [
        *events,
        str(result),
        repr(result),
        str(result.error),
        repr(result.error),
        result.error.body().decode(),
        result.detail or "",
        repr(c),
        repr(c.endpoint),
        repr(c.keys),
        repr(running),
    ]
    assert not [t for t in texts if CANARY in t]


async def test_canary_key_not_in_connect_failure(clients: Clients) -> None:
    """A connect failure's result carries no key either."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = UpstreamClient(Endpoint("p", f"http://127.0.0.1:{port}/v1", api_keys=(CANARY,)))
    clients.made.append(c)
    result = await call(c, "chat/completions", chat_body(), stream=True).collect()
    assert result.error_class == "connect"
    assert CANARY not in repr(result)


@pytest.mark.parametrize("value", ["请求-1", "a\r\nx-evil: 1"])
async def test_a_header_the_client_cannot_write_is_never_a_connect_failure(
    sim: SimFactory, clients: Clients, value: str
) -> None:
    """A request header outside Latin-1 or with a line break: the call raises ``UnsendableHeader`` naming the
    header (its value not quoted), before anything is sent — not a ``connect`` failure of the upstream's."""
    p = await sim()
    c = UpstreamClient(Endpoint("p", p.url, api_keys=(CANARY,)))
    clients.made.append(c)
    with pytest.raises(tailgate.upstream.UnsendableHeader) as raised:
        await call(c, "chat/completions", chat_body(), stream=True, headers={"x-request-id": value}).collect()
    assert raised.value.name == "x-request-id"
    assert value not in str(raised.value)
    assert CANARY not in str(raised.value)
    assert p.truth.total == 0
