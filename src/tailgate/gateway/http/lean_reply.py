"""What a lean front-door connection writes (``lean_connection``): status lines and headers, whole replies, the
exchange the proxy answers on — a reply sent at once, or a chunked ``text/event-stream`` — and the write batch
of a loop turn. It meets the connection through the :class:`Connection` protocol only."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Protocol

from multidict import CIMultiDict

from tailgate.gateway.http.exchange import SSE_HEADERS, Deadline, Handle, Reply, Stream

__all__ = ["ChunkedStream", "Connection", "LeanExchange", "Message", "WriteBatch", "reply_bytes"]

_STATUS = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
_LAST_CHUNK = b"0\r\n\r\n"


class Connection(Protocol):
    """What an exchange, its stream and the write batch need of a lean connection (``LeanConnection``): its
    state, its writes and the hand-over to its next request — never the connection's parser or timers."""

    lost: bool
    """The client is gone (the transport closed)."""
    closing: bool
    """The connection closes after the current answer (no keep-alive, or the server is stopping)."""
    write_paused: bool
    """The transport's buffer is full: ``drain()`` before writing more."""

    @property
    def handler_task(self) -> asyncio.Task[None] | None: ...

    def send(self, data: bytes) -> None: ...

    def queue(self, data: bytes) -> None: ...

    def flush(self) -> None: ...

    async def drain(self) -> None: ...

    def write_reply(self, reply: Reply, *, keep_alive: bool, linger: bool = False) -> None: ...

    def release(self, exchange: LeanExchange) -> None: ...


class Message:
    """A complete ``/v1`` request as parsed: the handler its path chose, headers, body, keep-alive."""

    __slots__ = ("body", "handle", "headers", "keep_alive", "path")

    def __init__(self, path: str, handle: Handle, headers: CIMultiDict[str], keep_alive: bool) -> None:
        self.path = path
        self.handle = handle
        self.headers = headers
        self.keep_alive = keep_alive
        self.body = b""


class _DateHeader:
    """The ``Date`` value, formatted once a second (RFC 9110 §6.6.1: an origin server with a clock sends it)."""

    __slots__ = ("_second", "_value")

    def __init__(self) -> None:
        self._second, self._value = 0, ""

    def now(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._second, self._value = second, email.utils.formatdate(second, usegmt=True)
        return self._value


_DATE = _DateHeader()


def head(status: int, headers: Mapping[str, str], fixed: str) -> bytes:
    """Status line and headers; ``fixed`` holds the framing headers. Refuses CR/LF in a name or value (a header
    must never split the response: RFC 9112 §5)."""
    lines = [_STATUS.get(status) or f"HTTP/1.1 {status} Unknown\r\n", fixed, "Date: ", _DATE.now(), "\r\n"]
    for name, value in headers.items():
        if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
            raise ValueError(f"CR or LF in the response header {name!r}")
        lines += (name, ": ", value, "\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("utf-8")


def reply_bytes(reply: Reply, *, keep_alive: bool) -> bytes:
    """A whole reply, head and body, for one write. A header that would split the response becomes a logged 500
    by the caller (``ValueError``)."""
    body = reply.body
    fixed = f"Content-Type: {reply.content_type}\r\nContent-Length: {len(body)}\r\n"
    if not keep_alive:
        fixed += "Connection: close\r\n"
    return head(reply.status, reply.headers, fixed) + body


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class LeanExchange:
    """One ``/v1`` request on a lean connection (the proxy's view: ``exchange.Exchange``)."""

    __slots__ = ("body", "deadline", "detached", "front", "headers", "keep_alive", "replied", "stream")

    def __init__(self, front: Connection, message: Message) -> None:
        self.front = front
        self.headers = message.headers
        self.body = message.body
        self.keep_alive = message.keep_alive
        self.deadline: Deadline | None = None
        """``server.request_deadline`` over this request (set by the connection when it starts serving it)."""
        self.replied = False
        """A whole reply went out (``send``), or a stream ended: losing the client now cancels nothing."""
        self.detached = False
        """The connection has gone on to its next request; the handler finishes on its own (``detach``)."""
        self.stream: ChunkedStream | None = None

    @property
    def deadline_hit(self) -> bool:
        return self.deadline is not None and self.deadline.hit

    def send(self, reply: Reply) -> None:
        """Write ``reply`` now; the proxy's work after it (the call's end, health, bookkeeping) is off the
        client's path, and a client that closes right after reading it does not cancel that work."""
        front = self.front
        if self.replied or front.lost:
            return
        self.replied = True
        front.write_reply(reply, keep_alive=self.keep_alive and not front.closing)

    def detach(self) -> asyncio.Task[Any] | None:
        """After the answer: the connection serves its next request now, not when the handler returns; returns
        the handler's task. What the handler does next (the call's end, health, the books) is its own; a client
        that leaves cancels none of it. Not for a connection that closes after this answer."""
        front = self.front
        task = front.handler_task
        if not self.replied or self.detached or front.lost or not self.keep_alive or front.closing or task is None:
            return None
        front.release(self)
        return task if self.detached else None

    async def open_stream(self, headers: dict[str, str], first: bytes) -> Stream:
        front = self.front
        if front.lost:
            raise ConnectionResetError("the client closed the connection")
        stream = self.stream = ChunkedStream(self)
        front.send(
            head(200, {**SSE_HEADERS, **headers}, "Transfer-Encoding: chunked\r\n") + (_chunk(first) if first else b"")
        )
        if front.write_paused:
            await front.drain()
        return stream


class WriteBatch:
    """The writes of one loop turn after its first (``LeanConnection.queue``: answers and pushed stream bytes), written
    together at the end of the turn (one ``call_soon``). Writing each at once inside the reads' callbacks cost
    ~1.6x the CPU per write (the client, woken by each small write between two reads, paid a full wake-up each
    time; docs/benchmarks.md); a burst of reads then a burst of writes is what a pulled relay did, and a
    connection with two answers or reads in one turn gets one write. The turn's first write goes at once, so a
    lone client is not made to wait for the rest of the turn's work."""

    __slots__ = ("_fronts", "_loop", "_open")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._fronts: list[Connection] = []
        self._open = False

    def add(self, front: Connection) -> bool:
        """True: ``front`` is written at the end of the turn. False: this is the turn's first write, make it
        now (the turn is marked: later writes in it are batched)."""
        if self._open:
            self._fronts.append(front)
            return True
        self._open = True
        self._loop.call_soon(self._flush)
        return False

    def _flush(self) -> None:
        self._open = False
        fronts, self._fronts = self._fronts, []
        for front in fronts:
            front.flush()


class ChunkedStream:
    """A chunked ``text/event-stream`` body on a lean connection: one write per relayed read (pulled), or the
    bytes pushed in a loop turn in one write at its end (``push``, through the front's queue)."""

    __slots__ = ("done", "exchange")

    def __init__(self, exchange: LeanExchange) -> None:
        self.exchange = exchange
        self.done = False

    def push(self, data: bytes) -> bool:
        """Take ``data`` from the upstream connection's callback (``upstream.Tap``); it is written at the end
        of this loop turn. True when the client is slow: ``drain()`` must be awaited before more is pushed."""
        if self.done:
            raise RuntimeError("push() after write_eof()")
        front = self.exchange.front
        if front.lost:
            raise ConnectionResetError("the client closed the connection")
        front.queue(_chunk(data))
        return front.write_paused

    async def drain(self) -> None:
        front = self.exchange.front
        front.flush()
        if front.write_paused:
            await front.drain()

    async def write(self, data: bytes) -> None:
        if self.done:
            raise RuntimeError("write() after write_eof()")
        if not data:
            return
        front = self.exchange.front
        if front.lost:
            raise ConnectionResetError("the client closed the connection")
        front.send(_chunk(data))
        if front.write_paused:
            await front.drain()

    async def write_eof(self, data: bytes = b"") -> None:
        if self.done:
            return
        self.done = True
        front = self.exchange.front
        if front.lost:
            raise ConnectionResetError("the client closed the connection")
        front.send((_chunk(data) if data else b"") + _LAST_CHUNK)
        self.exchange.replied = True
        if front.write_paused:
            await front.drain()
