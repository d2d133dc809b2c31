"""The lean upstream HTTP client (tailgate.upstream.http) against real sockets on port 0.

Each test runs a tiny asyncio server that answers with exact bytes, so the edge cases of HTTP/1.1 the
pool must get right (chunked, bodies that end with the connection, 1xx, a peer that closes or talks
nonsense, keep-alive reuse, the connection limit, flow control, TLS) are each shown on the wire.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from _require import require_program
from tailgate.upstream.http import HIGH_WATER, Pool, Response, UpstreamDisconnected, request_head

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Serve = Callable[..., Awaitable[tuple["Server", Pool]]]

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head and body (Content-Length only: what the pool sends)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    body = await reader.readexactly(length)
    return head, body


class Server:
    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl = ssl_context
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl)
        port = self.server.sockets[0].getsockname()[1]
        return f"{'https' if self.ssl else 'http'}://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[Server] = []
    pools: list[Pool] = []

    async def start(
        handler: Handler, *, limit: int = 8, keepalive_s: float = 30.0, **kw: object
    ) -> tuple[Server, Pool]:
        server = Server(handler, kw.pop("server_ssl", None))  # type: ignore[arg-type]
        url = await server.start()
        pool = Pool(url, limit=limit, connect_timeout=2.0, keepalive_s=keepalive_s, **kw)  # type: ignore[arg-type]
        servers.append(server)
        pools.append(pool)
        return server, pool

    yield start
    for pool in pools:
        await pool.close()
    for server in servers:
        await server.stop()


def head_for(pool: Pool, body: bytes, **headers: str) -> bytes:
    return request_head("POST", "/v1/chat/completions", pool.host_header, dict(headers), len(body))


async def read_all(response: Response) -> bytes:
    out = bytearray()
    while data := await response.readany():
        out += data
    return bytes(out)


async def keep_answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: bytes = OK) -> None:
    while True:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()


async def test_keep_alive_reuses_one_connection_and_sends_what_was_asked(serve: Serve) -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            seen.append(await read_request(reader))
            writer.write(OK)

    server, pool = await serve(handler)
    for i in range(3):
        body = b'{"n": %d}' % i
        response = await pool.post(head_for(pool, body, Authorization="Bearer sk-x"), body)
        assert response.status == 200
        assert response.headers["content-type"] == "application/json"
        assert await read_all(response) == b'{"ok":true}'
        assert response.at_eof()
        response.release()
    assert server.connections == 1
    assert pool.in_use == 0
    assert pool.idle == 1
    head, body = seen[2]
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nAuthorization: Bearer sk-x\r\n" in head
    assert body == b'{"n": 2}'


async def test_chunked_body_arrives_decoded_piece_by_piece(serve: Serve) -> None:
    go = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await go.wait()
        writer.write(b"6\r\n world\r\n0\r\n\r\n")
        await read_request(reader)  # the connection is reused for a second request
        writer.write(OK)

    server, pool = await serve(handler)
    response = await pool.post(head_for(pool, b"{}"), b"{}")
    assert await response.readany() == b"hello"
    assert not response.is_eof()
    go.set()
    assert await read_all(response) == b" world"
    response.release()
    second = await pool.post(head_for(pool, b"{}"), b"{}")
    assert await read_all(second) == b'{"ok":true}'
    second.release()
    assert server.connections == 1


async def test_a_body_without_length_ends_with_the_connection_and_is_not_reused(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")

    server, pool = await serve(handler)
    for _ in range(2):
        response = await pool.post(head_for(pool, b"{}"), b"{}")
        assert await read_all(response) == b"until the end"
        response.release()
    assert server.connections == 2
    assert pool.idle == 0


async def test_informational_answers_are_skipped(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + OK)

    _, pool = await serve(handler)
    response = await pool.post(head_for(pool, b"{}"), b"{}")
    assert response.status == 200
    assert "link" not in response.headers
    assert await read_all(response) == b'{"ok":true}'


async def test_a_gzip_body_sent_anyway_is_decompressed(serve: Serve) -> None:
    text = b'{"choices": [], "padding": "' + b"x" * 5000 + b'"}'
    packed = gzip.compress(text)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(0, len(packed), 100):  # in small pieces: the decompressor keeps its state across them
            piece = packed[i : i + 100]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        writer.write(b"0\r\n\r\n")

    _, pool = await serve(handler)
    response = await pool.post(head_for(pool, b"{}"), b"{}")
    assert await read_all(response) == text


async def test_a_corrupt_gzip_body_fails_the_read(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 12\r\n\r\nnot gzip at all")
        await asyncio.sleep(1)

    _, pool = await serve(handler)
    response = await pool.post(head_for(pool, b"{}"), b"{}")
    with pytest.raises(UpstreamDisconnected, match="compressed body is corrupt"):
        await read_all(response)


async def test_bytes_after_a_whole_answer_are_not_taken_for_it(serve: Serve) -> None:
    """A peer that sends more than one answer: the first stays as it was, the connection is not reused."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(OK + b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n")

    server, pool = await serve(handler)
    for _ in range(2):
        response = await pool.post(head_for(pool, b"{}"), b"{}")
        assert response.status == 200
        assert await read_all(response) == b'{"ok":true}'
        response.release()
    assert server.connections == 2
    assert pool.idle == 0


async def test_connection_close_is_honoured(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")

    server, pool = await serve(handler)
    for _ in range(2):
        response = await pool.post(head_for(pool, b"{}"), b"{}")
        assert await read_all(response) == b"ok"
        response.release()
    assert server.connections == 2


async def test_a_peer_that_closes_before_answering_is_an_oserror(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    _, pool = await serve(handler)
    with pytest.raises(UpstreamDisconnected, match="before answering"):
        await pool.post(head_for(pool, b"{}"), b"{}")
    assert pool.in_use == 0


async def test_a_peer_that_is_not_http_is_refused_with_the_reason(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
        await asyncio.sleep(1)

    _, pool = await serve(handler)
    with pytest.raises(UpstreamDisconnected, match="not valid HTTP"):
        await pool.post(head_for(pool, b"{}"), b"{}")
    assert pool.in_use == 0


async def test_a_cut_mid_body_fails_the_read(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
        await writer.drain()

    _, pool = await serve(handler)
    response = await pool.post(head_for(pool, b"{}"), b"{}")
    with pytest.raises(UpstreamDisconnected, match="mid-response"):
        await read_all(response)
    response.close()
    assert pool.in_use == 0
    assert pool.idle == 0


async def test_oversized_headers_are_refused(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 1000) for i in range(80)))
        await asyncio.sleep(1)

    _, pool = await serve(handler)
    with pytest.raises(UpstreamDisconnected, match="headers are larger"):
        await pool.post(head_for(pool, b"{}"), b"{}")


async def test_a_header_with_a_line_break_is_never_sent() -> None:
    with pytest.raises(ValueError, match="'X-Evil' contains a line break"):
        request_head("POST", "/v1/x", "h", {"X-Evil": "a\r\nHost: other"}, 0)
    with pytest.raises(ValueError, match="line break"):
        request_head("POST", "/v1/x\r\nX: y", "h", {}, 0)


async def test_the_limit_queues_callers_in_order(serve: Serve) -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            await release.wait()
            writer.write(OK)

    server, pool = await serve(handler, limit=2)
    tasks = [asyncio.create_task(pool.post(head_for(pool, b"{}"), b"{}")) for _ in range(5)]
    await asyncio.sleep(0.2)
    assert pool.in_use == 2
    assert not any(t.done() for t in tasks)
    tasks[4].cancel()  # a waiter that gives up leaves the queue
    release.set()
    for task in tasks[:4]:
        response = await task
        assert await read_all(response) == b'{"ok":true}'
        response.release()
    assert server.connections == 2
    assert pool.in_use == 0


async def test_cancelled_while_waiting_for_headers_closes_the_connection(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(5)

    server, pool = await serve(handler)
    task = asyncio.create_task(pool.post(head_for(pool, b"{}"), b"{}"))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.in_use == 0
    assert pool.idle == 0


async def test_a_slow_reader_pauses_the_socket_instead_of_buffering(serve: Serve) -> None:
    size = 8 * HIGH_WATER

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        for _ in range(size // 65536):
            writer.write(b"x" * 65536)
            await writer.drain()

    _, pool = await serve(handler)
    response = await pool.post(head_for(pool, b"{}"), b"{}")
    await asyncio.sleep(0.3)  # nobody reads: the pool must have stopped reading near HIGH_WATER
    assert response._size < 2 * HIGH_WATER + 65536 * 4
    assert len(await read_all(response)) == size
    response.release()
    assert pool.idle == 1


async def test_idle_connections_expire(serve: Serve) -> None:
    server, pool = await serve(keep_answering, keepalive_s=0.1)
    response = await pool.post(head_for(pool, b"{}"), b"{}")
    await read_all(response)
    response.release()
    assert pool.idle == 1
    await asyncio.sleep(0.35)
    assert pool.idle == 0  # the sweep closed it
    response = await pool.post(head_for(pool, b"{}"), b"{}")
    await read_all(response)
    response.release()
    assert server.connections == 2


async def test_a_connection_the_peer_closed_while_idle_is_not_reused(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)
        await writer.drain()  # then close: an idle keep-alive connection the server drops

    server, pool = await serve(handler)
    for _ in range(2):
        response = await pool.post(head_for(pool, b"{}"), b"{}")
        assert await read_all(response) == b'{"ok":true}'
        response.release()
        await asyncio.sleep(0.1)
        assert pool.idle == 0
    assert server.connections == 2


async def test_closing_the_pool_fails_a_response_in_flight(serve: Serve) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
        await asyncio.sleep(5)

    _, pool = await serve(handler)
    response = await pool.post(head_for(pool, b"{}"), b"{}")
    assert await response.readany() == b"a"
    reading = asyncio.create_task(response.readany())
    await asyncio.sleep(0.05)
    await pool.close()
    with pytest.raises(UpstreamDisconnected):
        await asyncio.wait_for(reading, 2)
    with pytest.raises(UpstreamDisconnected, match="closed"):
        await pool.post(head_for(pool, b"{}"), b"{}")


async def test_connect_refused_and_connect_timeout_are_oserrors() -> None:
    # a port with no listener: bind one, learn its number, close it
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    pool = Pool(f"http://127.0.0.1:{port}/v1", limit=2, connect_timeout=2.0, keepalive_s=30)
    with pytest.raises(ConnectionRefusedError):
        await pool.post(request_head("POST", "/v1/x", pool.host_header, {}, 0), b"")
    assert pool.in_use == 0
    await pool.close()


async def test_connect_timeout_is_a_timeout_error() -> None:
    """A listener whose accept queue is full drops new SYNs: the connect hangs until the timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    await asyncio.sleep(0.1)
    pool = Pool(f"http://127.0.0.1:{port}/v1", limit=1, connect_timeout=0.1, keepalive_s=30)
    try:
        with pytest.raises(TimeoutError):
            await pool.post(request_head("POST", "/v1/x", pool.host_header, {}, 0), b"")
        assert pool.in_use == 0
    finally:
        await pool.close()
        for sock in (*fillers, listener):
            sock.close()


def test_host_header_and_ports() -> None:
    assert Pool("http://api.example.com/v1", limit=1, connect_timeout=1, keepalive_s=1).host_header == "api.example.com"
    https = Pool("https://api.example.com:8443/v1", limit=1, connect_timeout=1, keepalive_s=1)
    assert (https.host_header, https.port, https.ssl is not None) == ("api.example.com:8443", 8443, True)
    assert Pool("http://[::1]:8000/v1", limit=1, connect_timeout=1, keepalive_s=1).host_header == "[::1]:8000"
    with pytest.raises(ValueError, match="not an http"):
        Pool("ftp://x/v1", limit=1, connect_timeout=1, keepalive_s=1)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = require_program("openssl", "apt-get install openssl")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_tls_with_the_hostname_checked(serve: Serve, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=str(cert))
    server, pool = await serve(keep_answering, server_ssl=server_ctx, ssl_context=trusted)
    for _ in range(2):
        response = await pool.post(head_for(pool, b"{}"), b"{}")
        assert await read_all(response) == b'{"ok":true}'
        response.release()
    assert server.connections == 1
    # the system's CA store does not know a self-signed certificate: refused, as an OSError
    _, untrusting = await serve(keep_answering, server_ssl=server_ctx)
    with pytest.raises(ssl.SSLCertVerificationError):
        await untrusting.post(head_for(untrusting, b"{}"), b"{}")
    assert untrusting.in_use == 0
