"""A lean HTTP/1.1 client for the upstream calls: a keep-alive pool of asyncio protocols parsed by llhttp.

Why not aiohttp's client (which the rest of tailgate still uses where speed does not matter): a gateway
call needs one thing from it — POST a body, get the status, the headers and the body's bytes as they
arrive — and aiohttp's general client (cookies, redirects, proxies, decompression, tracing, a request
and a response object of many fields, a payload writer) cost 111 µs of CPU per non-streamed call and
~12.7 µs per read of a stream on our benchmark machine; this pool costs 39 µs and ~9 µs
(``benchmarks/upstream_client.py``; docs/benchmarks.md, "A lean upstream client"). The parser is
httptools (llhttp, the parser Node.js uses; uvicorn's too), so this module only moves bytes: it does not
parse HTTP by hand.

What it does: HTTP/1.1 over TCP or TLS (the system's CA store, SNI, hostname checked), keep-alive
connections reused last-in first-out (idle ones closed after ``keepalive_s``), at most ``limit``
connections per pool (callers beyond wait in order), ``Content-Length`` and chunked responses and
bodies that end with the connection, 1xx answers skipped, read-side flow control (a slow consumer
pauses the socket instead of growing the buffer). What it leaves out on purpose: redirects, cookies,
proxies (``trust_env`` was already off), compression (it asks for ``identity``; a gzip or deflate body
sent anyway is decompressed), HTTP/2.

Errors: every failure is an ``OSError`` — :class:`UpstreamDisconnected` (closed, reset or not HTTP) or
``TimeoutError`` (the connect timeout) — so a caller classifies one exception family.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

__all__ = ["Pool", "Response", "UnsendableHeader", "UpstreamDisconnected", "request_head"]

HIGH_WATER = 1 << 20
"""Buffered, unread body bytes at which the socket stops being read (resumed once they are read)."""
MAX_HEADER_BYTES = 1 << 16
"""A response whose headers are larger than this is refused (aiohttp's limit is 8 KiB per field)."""


class UpstreamDisconnected(ConnectionError):
    """The upstream closed or reset the connection, or sent something that is not HTTP."""


class UnsendableHeader(ValueError):
    """A request header that HTTP/1.1 cannot carry (a line break, a character outside Latin-1): the request is
    never sent. It is the caller's error, never the upstream's; ``name`` says which header (its value is not
    kept: it may be a key)."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"the request header {name!r} {why}")
        self.name = name


def request_head(method: str, target: str, host: str, headers: dict[str, str], length: int) -> bytes:
    """The request line and headers of one request, ``Content-Length`` last.

    A name or value with a CR or LF would let one header smuggle others (or a second request), and one
    outside Latin-1 cannot be written: refused with :class:`UnsendableHeader` naming the header, never sent.
    """
    lines = [f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n"]
    for name, value in headers.items():
        lines.append(f"{name}: {value}\r\n")
    lines.append(f"Content-Length: {length}\r\n\r\n")
    head = "".join(lines)
    lines_expected = len(headers) + 4  # request line, Host, the headers, Content-Length, the blank line
    if head.count("\n") != lines_expected or head.count("\r") != lines_expected:
        bad = next((n for n, v in headers.items() if any(c in n or c in v for c in "\r\n")), "request line")
        raise UnsendableHeader(bad, "contains a line break")
    try:
        return head.encode("latin-1")
    except UnicodeEncodeError:
        bad = next((n for n, v in headers.items() if not _latin1(n) or not _latin1(v)), "request line")
        raise UnsendableHeader(bad, "has a character outside Latin-1") from None


def _latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


class Response:
    """One response: ``status`` and ``headers`` once awaited from :meth:`Pool.post`, then the body.

    Read with :meth:`read_nowait` (what is buffered, no wait) and :meth:`readany` (wait for more; ``b""``
    at the end); :meth:`set_exception` fails the current and every later read (a caller's watchdog).
    End with :meth:`release` (read to its end: the connection goes back to the pool) or :meth:`close`.
    """

    __slots__ = (
        "_buf",
        "_conn",
        "_eof",
        "_exc",
        "_head",
        "_header_bytes",
        "_informational",
        "_keep_alive",
        "_raw_headers",
        "_sink",
        "_sink_ended",
        "_size",
        "_until_close",
        "_unzip",
        "_waiter",
        "headers",
        "status",
    )

    def __init__(self, conn: _Conn, head: asyncio.Future[Response]) -> None:
        self._conn: _Conn | None = conn
        self._head: asyncio.Future[Response] | None = head  # dropped once settled: no response <-> future cycle
        self.status = 0
        self.headers: CIMultiDictProxy[str] = _EMPTY
        self._raw_headers: list[tuple[str, str]] = []
        self._header_bytes = 0
        self._informational = False
        self._keep_alive = False
        self._until_close = False
        self._unzip: Any = None  # a zlib decompressor for a gzip / deflate body the upstream sent anyway
        self._buf: list[bytes] = []
        self._size = 0
        self._eof = False
        self._exc: BaseException | None = None
        self._waiter: asyncio.Future[bytes | None] | None = None  # bytes: data handed over; None: look again
        self._sink: Callable[[bytes], None] | None = None  # push_to
        self._sink_ended: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"<Response {self.status} eof={self._eof} buffered={self._size}>"

    # -- reading ---------------------------------------------------------------------------------

    def is_eof(self) -> bool:
        """The whole body has arrived (some of it may still be unread)."""
        return self._eof

    def at_eof(self) -> bool:
        """The whole body has arrived and been read."""
        return self._eof and not self._buf

    def read_nowait(self) -> bytes:
        """Every buffered byte, or ``b""``; raises the failure if there was one."""
        if self._exc is not None:
            raise self._exc
        buf = self._buf
        if not buf:
            return b""
        data = buf[0] if len(buf) == 1 else b"".join(buf)
        self._take()
        return data

    async def readany(self) -> bytes:
        """What arrives next (at least one byte), or ``b""`` at the end of the body."""
        if self._exc is None and not self._buf and not self._eof:
            conn = self._conn
            if conn is None:
                return b""
            waiter: asyncio.Future[bytes | None] = conn.loop.create_future()
            self._waiter = waiter
            try:
                handed = await waiter
            finally:
                self._waiter = None
            if handed is not None and self._exc is None:  # given to us straight from the socket (_on_body)
                if not self._buf:
                    return handed
                self._buf.insert(0, handed)  # more came after it in the same loop turn: keep the order
                self._size += len(handed)
        return self.read_nowait()

    def push_to(self, sink: Callable[[bytes], None] | None, ended: Callable[[], None] | None = None) -> None:
        """Hand each read of the body to ``sink(data)`` from the connection's callback as it arrives, instead
        of buffering it for a reader (what is already buffered stays for ``read_nowait``: take it first);
        ``ended()`` when the body ends, breaks or is failed (then read as usual to learn which). ``sink``
        must not raise. ``push_to(None)`` stops."""
        self._sink = sink
        self._sink_ended = ended if sink is not None else None

    def _take(self) -> None:
        self._buf = []
        paused, self._size = self._size >= HIGH_WATER, 0
        if paused and (conn := self._conn) is not None and not conn.closed:
            conn.transport.resume_reading()

    def set_exception(self, exc: BaseException) -> None:
        """Fail the waiting read (and every later one) with ``exc``."""
        self._exc = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if (ended := self._sink_ended) is not None:
            ended()

    # -- the end ---------------------------------------------------------------------------------

    def release(self) -> None:
        """Done with a response read to its end: its connection goes back to the pool (or is closed)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            reusable = self._eof and not self._buf and self._exc is None and self._keep_alive
            conn.pool._give_back(conn, reusable)

    def close(self) -> None:
        """Done early: the connection is closed (the upstream sees the client leave)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.pool._give_back(conn, False)

    # -- fed by the connection -------------------------------------------------------------------

    def _on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:
            raise UpstreamDisconnected(f"the upstream's response headers are larger than {MAX_HEADER_BYTES} bytes")
        self._raw_headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def _on_headers_complete(self, status: int, keep_alive: bool) -> None:
        if 100 <= status < 200:  # 100 Continue, 103 Early Hints: the real answer follows
            self._informational = True
            self._raw_headers = []
            return
        self.status = status
        self.headers = headers = CIMultiDictProxy(CIMultiDict(self._raw_headers))
        self._keep_alive = keep_alive
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):  # not asked for (identity), but cheap to honour
            self._unzip = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, by the header
        if status not in (204, 304) and "content-length" not in headers and "transfer-encoding" not in headers:
            self._until_close = True  # the body ends when the connection does
            self._keep_alive = False
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_result(self)

    def _on_body(self, data: bytes) -> None:
        if self._unzip is not None:
            try:
                data = self._unzip.decompress(data)
            except zlib.error as exc:
                raise UpstreamDisconnected(f"the upstream's compressed body is corrupt ({exc})") from None
            if not data:
                return
        if (sink := self._sink) is not None and not self._buf:
            sink(data)  # pushed (push_to): no reader, no buffering
            return
        waiter = self._waiter
        if waiter is not None and not self._buf and not waiter.done():
            waiter.set_result(data)  # a reader is waiting: hand it over, no buffering
            return
        self._buf.append(data)
        size = self._size
        self._size = size + len(data)
        if size < HIGH_WATER <= self._size and (conn := self._conn) is not None:
            conn.transport.pause_reading()  # once, when crossing: _take resumes it
        self._wake()

    def _on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        self._eof = True
        self._wake()

    def _on_lost(self, exc: BaseException | None) -> None:
        head, self._head = self._head, None
        if head is not None and not head.done():
            reason = f": {exc}" if exc is not None else ""
            head.set_exception(UpstreamDisconnected(f"the upstream closed the connection before answering{reason}"))
            return
        if self._eof:
            return
        if self._until_close and exc is None:
            self._eof = True
        elif self._exc is None:
            self._exc = (
                exc
                if isinstance(exc, UpstreamDisconnected)
                else UpstreamDisconnected("the upstream connection broke mid-response")
            )
        self._wake()


_EMPTY: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())


class _Conn(asyncio.Protocol):
    """One keep-alive connection; its parser feeds the response in flight."""

    def __init__(self, pool: Pool, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.loop = loop
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set by connection_made
        self.parser = httptools.HttpResponseParser(self)
        self.response: Response | None = None
        self.closed = False
        self.stray = False  # the peer began an answer nobody asked for
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.response is None:  # nothing was asked: an idle connection must not talk
            self.close()
            return
        try:
            self.parser.feed_data(data)
            if self.stray:
                self.close()
        except (httptools.HttpParserError, UpstreamDisconnected) as exc:
            response, self.response = self.response, None
            self.close()
            if response is not None:
                cause = exc.__cause__ or exc.__context__  # a callback's own error, wrapped by httptools
                if isinstance(cause, UpstreamDisconnected):
                    exc = cause
                elif not isinstance(exc, UpstreamDisconnected):
                    exc = UpstreamDisconnected(f"the upstream's answer is not valid HTTP ({exc})")
                response._on_lost(exc)

    def connection_lost(self, exc: BaseException | None) -> None:
        if exc is None and self.closed:  # closed by us (pool closing) while a response was in flight
            exc = UpstreamDisconnected("the connection was closed by tailgate")
        self.closed = True
        self.pool._lost(self)
        response, self.response = self.response, None
        if response is not None:
            response._on_lost(exc)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.close()

    # httptools callbacks (the parser calls them from feed_data). Once the answer is whole the response is
    # detached: a callback without one is a second, unasked-for answer, and the connection is not trusted again.
    def on_message_begin(self) -> None:
        if self.response is None:
            self.stray = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if (response := self.response) is not None:
            response._on_header(name, value)

    def on_headers_complete(self) -> None:
        if (response := self.response) is not None:
            parser = self.parser
            response._on_headers_complete(parser.get_status_code(), parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        if (response := self.response) is not None:
            response._on_body(body)

    def on_message_complete(self) -> None:
        if (response := self.response) is not None:
            response._on_message_complete()
            if response._eof:
                self.response = None


class Pool:
    """Keep-alive connections to one origin (``scheme://host:port`` of ``base_url``), at most ``limit``.

    ``connect_timeout`` bounds a new connection's TCP (and TLS) set-up, not the wait for a free one.
    Make it inside the event loop that uses it; ``close()`` at the end.
    """

    def __init__(
        self,
        base_url: str,
        *,
        limit: int,
        connect_timeout: float | None,
        keepalive_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL with a host: {base_url!r}")
        self.host = parts.hostname
        tls = parts.scheme == "https"
        self.port = parts.port or (443 if tls else 80)
        default = self.port == (443 if tls else 80)
        name = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = name if default else f"{name}:{self.port}"
        self.ssl = (ssl_context or ssl.create_default_context()) if tls else None
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.keepalive_s = keepalive_s
        self._idle: list[_Conn] = []
        self._busy: set[_Conn] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        self.loop: asyncio.AbstractEventLoop | None = None
        """The loop it serves, remembered by its first call (``asyncio.get_running_loop()`` is a ``getpid()``
        system call per use on Python 3.11: one per request showed in the gateway's profile)."""
        self.opened = 0
        """New connections made so far (a count that climbs with the traffic means keep-alive is not working)."""

    def __repr__(self) -> str:
        return f"<Pool {self.host_header} busy={len(self._busy)} idle={len(self._idle)} limit={self.limit}>"

    @property
    def in_use(self) -> int:
        """Connections that carry a request or a response not yet released."""
        return len(self._busy) + self._opening

    @property
    def idle(self) -> int:
        """Open keep-alive connections waiting for the next request."""
        return len(self._idle)

    async def post(self, head: bytes, body: bytes) -> Response:
        """Send ``head`` (from :func:`request_head`) and ``body``; the response once its headers arrived.

        Cancelled before the headers arrive, the connection is closed (it cannot carry another request).
        """
        conn = await self._acquire()
        if conn.closed:  # lost between its connect and now
            self._give_back(conn, False)
            raise UpstreamDisconnected("the upstream closed the connection before the request was sent")
        loop = conn.loop
        head_future: asyncio.Future[Response] = loop.create_future()
        response = Response(conn, head_future)
        conn.response = response
        if len(body) < 16384:
            conn.transport.write(head + body)
        else:
            conn.transport.writelines((head, body))
        try:
            return await head_future
        except BaseException:
            response.close()
            raise

    async def _acquire(self) -> _Conn:
        woken = False
        while True:
            if self._closed:
                raise UpstreamDisconnected("the connection pool is closed")
            idle = self._idle
            while idle:
                conn = idle.pop()
                if conn.closed:
                    continue
                if conn.loop.time() - conn.idle_since > self.keepalive_s:
                    conn.close()
                    continue
                self._busy.add(conn)
                return conn
            if len(self._busy) + self._opening < self.limit:
                return await self._connect()
            waiter = asyncio.get_running_loop().create_future()
            if woken:  # woken but beaten to the connection by a newcomer: keep our place at the front
                self._waiters.appendleft(waiter)
            else:
                self._waiters.append(waiter)
            woken = True
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # pass the turn we were given on to the next in line
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        self._opening += 1
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Conn(self, loop),
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl is not None else None,
                )
        except BaseException:
            self._opening -= 1
            self._wake_one()
            raise
        self._opening -= 1
        self.opened += 1
        self._busy.add(conn)
        return conn

    def _give_back(self, conn: _Conn, reusable: bool) -> None:
        self._busy.discard(conn)
        conn.response = None
        if reusable and not conn.closed and not self._closed:
            conn.idle_since = conn.loop.time()
            self._idle.append(conn)
            if self._sweeper is None:
                self._sweeper = conn.loop.call_later(self.keepalive_s, self._sweep)
        else:
            conn.close()
        self._wake_one()

    def _lost(self, conn: _Conn) -> None:
        if conn in self._busy:
            return  # its response sees the loss and gives it back
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _sweep(self) -> None:
        """Close the keep-alive connections idle for longer than ``keepalive_s``."""
        self._sweeper = None
        if not self._idle:
            return
        loop = self._idle[0].loop
        cutoff = loop.time() - self.keepalive_s
        stale = [c for c in self._idle if c.idle_since <= cutoff]
        for conn in stale:
            self._idle.remove(conn)
            conn.close()
        if self._idle:
            oldest = min(c.idle_since for c in self._idle)
            self._sweeper = loop.call_at(oldest + self.keepalive_s, self._sweep)

    async def close(self) -> None:
        """Close every connection, idle or busy; waiters get :class:`UpstreamDisconnected`."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in [*self._idle, *self._busy]:
            conn.close()
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        await asyncio.sleep(0)  # let the transports finish closing
