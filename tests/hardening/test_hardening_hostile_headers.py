"""What a client sends never becomes a provider's failure, nor a 500, nor a secret in the log (issue 37).

Each header the gateway forwards upstream is checked on arrival (gateway/request_path/client_headers.py): a
value HTTP/1.1 cannot carry to the provider is the client's 400 naming the header, never an attempt that fails as the
provider's (its breaker, error rate and health untouched). The raw-byte cases go over a raw socket: httpx and
http.client refuse to send them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hardening_support import ALIAS, MSG, Stack, gateway_config, raw_socket, recv_all, request

from tailgate.ledger import read_rows

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
KEY = "tg-hostile-secret-4d2c9e1a7b"


def raw_post(
    port: int, path: str, headers: list[bytes], body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One POST whose header lines are sent as the bytes given (nothing encoded or checked on the way)."""
    body = body if body is not None else _body(path)
    head = b"POST " + path.encode() + b" HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
    head += b"".join(h + b"\r\n" for h in headers)
    head += b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    sock = raw_socket(port, timeout=15)
    try:
        sock.sendall(head + body)
        raw = recv_all(sock)
    finally:
        sock.close()
    return parse_response(raw)


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines and lines[0].startswith("HTTP/1.") else 0
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        out, rest = b"", body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size or b"0", 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2 :]
        body = out
    return status, headers, body


def _body(path: str) -> bytes:
    obj = {"model": ALIAS, "messages": MSG, "max_tokens": 4}
    return json.dumps(obj).encode()


def metrics(port: int) -> str:
    status, _, raw = request(port, "GET", "/metrics")
    assert status == 200
    return raw.decode()


def failed_attempts(text: str) -> list[str]:
    """Upstream attempts whose outcome is not ``ok`` and breaker transitions, as /metrics lines with a count."""
    return [
        line
        for line in text.splitlines()
        if (
            (line.startswith("tailgate_upstream_attempts_total{") and 'outcome="ok"' not in line)
            or line.startswith("tailgate_breaker_transitions_total{")
        )
        and not line.endswith(" 0.0")
    ]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    def configure(sim_url: str) -> dict[str, object]:
        config = gateway_config(sim_url)
        config["providers"]["sim"]["anthropic_base_url"] = sim_url.removesuffix("/v1")
        return config

    s = Stack(tmp_path, configure=configure)
    try:
        yield s
    finally:
        s.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_a_non_latin1_request_id_is_the_clients_400_not_the_providers_failure(stack: Stack, path: str) -> None:
    """Five requests with ``x-request-id: 请求-N`` (issue 37, defect 1): each a 400 naming the header, in the
    path's API shape; no attempt went upstream, no breaker moved, and the next request is served."""
    for i in range(5):
        status, headers, raw = raw_post(stack.port, path, [f"x-request-id: 请求-{i}".encode()])
        assert status == 400, raw
        body = json.loads(raw)
        if path == MESSAGES:
            assert body["type"] == "error", body
            assert body["error"]["type"] == "invalid_request_error", body
            assert "x-request-id" in body["error"]["message"]
        else:
            assert body["error"]["param"] == "x-request-id", body
        assert re.fullmatch(r"[0-9a-f]{32}", headers["x-request-id"]), headers  # a fresh id of ours
    assert failed_attempts(metrics(stack.port)) == []
    status, _, raw = raw_post(stack.port, path, [b"x-request-id: ok-1"])
    assert status == 200, raw


@pytest.mark.timeout(60)
def test_invalid_utf8_in_x_request_id_is_a_400_with_a_body_and_a_ledger_row(tmp_path: Path) -> None:
    """``x-request-id: caf\\xe9`` on chat: a JSON 400 naming the header (it was a 500 with an empty body), and
    every request's ledger row is written (they were dropped)."""
    s = Stack(tmp_path)
    try:
        status, bad, raw = raw_post(s.port, CHAT, [b"x-request-id: caf\xe9"])
        assert status == 400, raw
        assert json.loads(raw)["error"]["param"] == "x-request-id"
        status, _, raw = raw_post(s.port, CHAT, [b"x-request-id: after-the-bad-one"])
        assert status == 200, raw
    finally:
        s.close()
    rows = {r.request_id: r for r in read_rows(tmp_path / "ledger.db")}
    assert set(rows) == {bad["x-request-id"], "after-the-bad-one"}, rows
    assert rows[bad["x-request-id"]].status == 400


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("header", "value"),
    [
        (b"anthropic-version", "版本".encode()),
        (b"anthropic-beta", b"tools\xa0x"),
        (b"anthropic-version", b"a" * 100),
        (b"x-tailgate-class", b"b\xe9tch"),
    ],
)
def test_every_forwarded_header_is_checked_by_name(stack: Stack, header: bytes, value: bytes) -> None:
    """A bad ``anthropic-version`` / ``anthropic-beta`` / ``x-tailgate-class`` is a 400 naming it in Anthropic's
    shape; nothing reached the provider as its failure."""
    status, _, raw = raw_post(stack.port, MESSAGES, [header + b": " + value])
    assert status == 400, raw
    err = json.loads(raw)["error"]
    assert err["type"] == "invalid_request_error", err
    assert header.decode() in err["message"], err
    assert failed_attempts(metrics(stack.port)) == []


@pytest.mark.timeout(60)
def test_a_502_carries_no_python_exception_text(tmp_path: Path) -> None:
    """Every attempt fails to connect: the 502 names the error class, not the exception's text (errno, address);
    with every breaker then open, the 503 says so instead of "all are drained"."""
    s = Stack(tmp_path, configure=lambda _url: gateway_config("http://127.0.0.1:9/v1", retry={"max_attempts": 1}))
    try:
        status, _, raw = raw_post(s.port, CHAT, [])
        assert status == 502, raw
        message = json.loads(raw)["error"]["message"]
        assert message == "The upstream failed (connect) after 1 attempt(s).", message
        for _ in range(6):
            status, _, raw = raw_post(s.port, CHAT, [])
        assert status == 503, raw
        message = json.loads(raw)["error"]["message"]
        assert "circuit breaker open" in message, message
        assert "drained" not in message, message
    finally:
        s.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_a_max_tokens_no_limit_could_admit_is_a_400(tmp_path: Path, path: str) -> None:
    """``max_tokens: 2**70`` on a key with a tpm: a 400 naming ``max_tokens`` (it was a retryable 429 "Retry after
    60s", a retry that can never succeed); a request that fits is still served."""

    def configure(sim_url: str) -> dict[str, object]:
        config = gateway_config(sim_url, keys=[{"id": "k", "key": KEY, "tpm": 3000}])
        config["providers"]["sim"]["anthropic_base_url"] = sim_url.removesuffix("/v1")
        return config

    s = Stack(tmp_path, configure=configure)
    try:
        auth = b"Authorization: Bearer " + KEY.encode()
        huge = json.dumps({"model": ALIAS, "messages": MSG, "max_tokens": 2**70}).encode()
        status, headers, raw = raw_post(s.port, path, [auth], huge)
        assert status == 400, raw
        assert "retry-after" not in headers
        body = json.loads(raw)
        assert "max_tokens" in body["error"]["message"], body
        if path == CHAT:
            assert body["error"]["param"] == "max_tokens", body
        else:
            assert body["type"] == "error", body
        status, _, raw = raw_post(s.port, path, [auth])
        assert status == 200, raw
    finally:
        s.close()


@pytest.mark.timeout(60)
def test_everything_under_v1_messages_answers_in_anthropics_shape(stack: Stack) -> None:
    """An unknown subpath, a wrong method, a CR in a header and too many headers under ``/v1/messages``: each
    refusal is Anthropic's error object (with its status: 404, 405, 400, 431), never OpenAI's."""
    got = [
        raw_post(stack.port, "/v1/messages/nope", []),
        parse_response(_send(stack.port, b"GET /v1/messages HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")),
        raw_post(stack.port, MESSAGES, [b"x-api-key: tg-abc\rdef"]),
        raw_post(stack.port, MESSAGES, [b"x-h%d: v" % i for i in range(200)]),
    ]
    assert [status for status, _, _ in got] == [404, 405, 400, 431], got
    for _, _, raw in got:
        body = json.loads(raw)
        assert body["type"] == "error", raw
        assert isinstance(body["error"]["message"], str), raw
        assert b"tg-abc" not in raw


def _send(port: int, data: bytes) -> bytes:
    sock = raw_socket(port, timeout=15)
    try:
        sock.sendall(data)
        return recv_all(sock)
    finally:
        sock.close()
