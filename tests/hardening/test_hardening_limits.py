"""Resource limits (``server:``): slow clients, many connections, upstream attempts, the request deadline.

Each test runs a real gateway (HardenedSite, as ``tailgate serve``) in front of a real simulator with
the limit set small, and drives it with raw sockets or concurrent clients. Waits are bounded.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hardening_support import ALIAS, MSG, Stack, assert_openai_error, post_json, raw_socket, recv_all, request

from tailgate.ledger import read_rows
from tailgate.sim.faults import Faults

StackFactory = Callable[..., Stack]


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[StackFactory]:
    made: list[Stack] = []

    def factory(server: dict[str, Any], **extra: Any) -> Stack:
        s = Stack(tmp_path / f"s{len(made)}", server=server, **extra)
        made.append(s)
        return s

    yield factory
    for s in made:
        s.close()


def _faults(stack: Stack, **faults: Any) -> None:
    async def apply() -> None:
        stack.sim.set_faults(Faults.model_validate(faults))

    stack.call(apply())


def _wait_closed(sock: socket.socket, within: float) -> bytes:
    """What the server sends until it closes the connection; fails if it is still open after ``within``."""
    sock.settimeout(within)
    return recv_all(sock)


def _body(**fields: Any) -> bytes:
    return json.dumps({"model": ALIAS, "messages": MSG, "max_tokens": 2, **fields}).encode()


def test_slowloris_headers_are_cut_at_the_keepalive_timeout(make_stack: StackFactory) -> None:
    """A client that sends half its headers and stops is disconnected after keepalive_timeout."""
    stack = make_stack({"keepalive_timeout": "1s"})
    sock = raw_socket(stack.port)
    t0 = time.monotonic()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
    data = _wait_closed(sock, within=10)
    took = time.monotonic() - t0
    sock.close()
    assert data == b""
    assert 0.5 <= took < 10
    assert stack.site.connections == 0


def test_half_a_body_gets_a_408_and_frees_the_connection(make_stack: StackFactory) -> None:
    """Headers complete, then 10 of 1,000 body bytes and silence: a 408 in the OpenAI shape, then close."""
    stack = make_stack({"body_read_timeout": "0.5s", "keepalive_timeout": "30s"})
    sock = raw_socket(stack.port)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"model":'
    )
    answer = _wait_closed(sock, within=10)
    sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:200]
    assert assert_openai_error(408, body)["code"] == "request_timeout"
    deadline = time.monotonic() + 5
    while stack.site.connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stack.site.connections == 0


def test_idle_keepalive_connection_is_closed(make_stack: StackFactory) -> None:
    """After a complete request, an idle keep-alive connection is closed after keepalive_timeout."""
    stack = make_stack({"keepalive_timeout": "1s"})
    sock = raw_socket(stack.port)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.settimeout(5)
    first = sock.recv(4096)
    assert first.startswith(b"HTTP/1.1 200")
    t0 = time.monotonic()
    rest = _wait_closed(sock, within=10)
    took = time.monotonic() - t0
    sock.close()
    assert rest == b""
    # Both sides: not before keepalive_timeout (0.1 s for the gap between the server's last write and t0),
    # and closed by the server, not by the 10 s the socket waits at most (a bound far past any slow machine).
    assert 0.9 <= took < 10


def test_connections_over_the_cap_get_503_and_the_gateway_recovers(make_stack: StackFactory) -> None:
    """max_connections 8: 8 idle sockets hold their slots, the 9th gets 503 + Retry-After at once;
    when they close, new connections are served again."""
    stack = make_stack({"max_connections": 8, "keepalive_timeout": "30s"})
    held = [raw_socket(stack.port) for _ in range(8)]
    deadline = time.monotonic() + 5
    while stack.site.connections < 8 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stack.site.connections == 8
    extra = raw_socket(stack.port)
    answer = _wait_closed(extra, within=5)
    extra.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), answer[:200]
    assert b"Retry-After: 1" in head
    assert assert_openai_error(503, body)["code"] == "overloaded"
    for s in held:
        s.close()
    deadline = time.monotonic() + 5
    while stack.site.connections and time.monotonic() < deadline:
        time.sleep(0.02)
    status, _, _ = request(stack.port, "GET", "/healthz")
    assert status == 200
    assert stack.site.refused >= 1


def test_many_connections_at_once(make_stack: StackFactory) -> None:
    """300 requests from 96 threads against a cap of 32 connections: every answer is a 200 or a shaped
    503, none hangs, the open-connection count returns to zero and the gateway still serves."""
    stack = make_stack({"max_connections": 32})

    def one(i: int) -> int:
        try:
            status, _headers, raw = post_json(stack.port, "/v1/chat/completions", _body(), timeout=20)
        except (ConnectionError, http.client.HTTPException):  # refused while sending: the socket was closed
            return -1
        if status != 200:
            assert status == 503, raw
            assert_openai_error(status, raw)
        return status

    with concurrent.futures.ThreadPoolExecutor(max_workers=96) as pool:
        statuses = list(pool.map(one, range(300)))
    assert statuses.count(200) >= 32
    assert set(statuses) <= {200, 503, -1}
    deadline = time.monotonic() + 5
    while stack.site.connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stack.site.connections == 0
    assert post_json(stack.port, "/v1/chat/completions", _body())[0] == 200


def test_upstream_attempts_over_the_cap_get_503_with_retry_after(make_stack: StackFactory) -> None:
    """max_upstream_in_flight 2 with a provider that stalls: the third concurrent request is refused at
    once with 503 + Retry-After (no queue); when the stall ends the two finish with 200."""
    stack = make_stack({"max_upstream_in_flight": 2})
    _faults(stack, stall_headers_s=1.5)
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        slow = [pool.submit(post_json, stack.port, "/v1/chat/completions", _body()) for _ in range(2)]
        deadline = time.monotonic() + 5
        while sum(p.in_flight for p in stack.gateway.providers.values()) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        status, headers, raw = post_json(stack.port, "/v1/chat/completions", _body())
        # Refused, not queued behind the stall: answered while both stalled requests are still in flight
        # (event order; a queued request could only be answered after one of them finished).
        assert not any(f.done() for f in slow)
        assert sum(p.in_flight for p in stack.gateway.providers.values()) == 2
        assert status == 503
        assert headers["retry-after"] == "1"
        assert "max_upstream_in_flight" in assert_openai_error(status, raw)["message"]
        assert [f.result()[0] for f in slow] == [200, 200]


def test_request_deadline_non_stream_and_stream(make_stack: StackFactory) -> None:
    """request_deadline 1s: a stalled upstream gives a 504 ``deadline_exceeded``; a stream that started
    and then drips past the deadline ends with an SSE error event (no silent cut); the ledger says so."""
    stack = make_stack({"request_deadline": "1s"})
    _faults(stack, stall_headers_s=5)
    t0 = time.monotonic()
    status, _, raw = post_json(stack.port, "/v1/chat/completions", _body())
    assert time.monotonic() - t0 < 4
    assert status == 504
    assert assert_openai_error(status, raw)["code"] == "deadline_exceeded"
    _faults(stack, stall_headers_s=0, slow_drip_s=0.3)
    status, headers, raw = post_json(stack.port, "/v1/chat/completions", _body(stream=True, max_tokens=30))
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert b"data: [DONE]" not in raw
    tail = raw.strip().split(b"\n\n")[-1]
    assert tail.startswith(b"event: error\ndata: ")
    assert json.loads(tail.split(b"data: ", 1)[1])["error"]["code"] == "deadline_exceeded"
    ledger = stack.gateway.ledger
    assert ledger is not None
    time.sleep(0.1)  # the row is booked when the handler ends, a moment after the client has its answer
    stack.call(ledger.flush())
    assert [(r.outcome, r.status) for r in read_rows(ledger.path)][-2:] == [("deadline", 504), ("deadline", 200)]


def test_a_hedge_over_the_attempt_cap_is_not_sent(tmp_path: Path) -> None:
    """max_upstream_in_flight 1 with a hedged alias: the first attempt holds the only slot, the hedge is
    not sent (``no_capacity``) and the request is still served: the cap never turns a hedge into a 503."""

    def two_routes(sim_url: str) -> dict[str, Any]:
        return {
            "providers": {"a": {"base_url": sim_url}, "b": {"base_url": sim_url}},
            "models": {
                ALIAS: {
                    "routes": [{"provider": "a", "model": "up-model"}, {"provider": "b", "model": "up-model"}],
                    "hedge": {"after": "0.1s", "budget": 1.0},
                }
            },
            "routing": {"policy": "weighted", "probes": {"enabled": False}},
            "server": {"max_upstream_in_flight": 1},
        }

    stack = Stack(tmp_path, configure=two_routes, sim_faults={"stall_first_token_s": 0.6})
    try:
        status, headers, raw = post_json(stack.port, "/v1/chat/completions", _body())
        assert status == 200, raw
        assert headers["x-tailgate-attempts"] == "1"
        assert "x-tailgate-hedged" not in headers
        _, _, metrics = request(stack.port, "GET", "/metrics")
        assert b'tailgate_hedges_total{alias="deepseek-v3.2",outcome="no_capacity"} 1.0' in metrics
    finally:
        stack.close()
