"""What a front-door connection writes (gateway/front.py): status lines and headers, whole replies, and the
exchange the proxy answers on — a reply sent at once, or a chunked ``text/event-stream``."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING

from multidict import CIMultiDict

from tailgate.gateway.exchange import SSE_HEADERS, Handle, Reply, Stream

if TYPE_CHECKING:
    from tailgate.gateway.front import Front

__all__ = ["FrontExchange", "Message", "reply_bytes"]

_STATUS = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n" for s in HTTPStatus}
_LAST_CHUNK = b"0\r\n\r\n"


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


class FrontExchange:
    """One ``/v1`` request on a front connection (the proxy's view: exchange.py)."""

    __slots__ = ("body", "deadline_hit", "front", "headers", "keep_alive", "replied", "stream")

    def __init__(self, front: Front, message: Message) -> None:
        self.front = front
        self.headers = message.headers
        self.body = message.body
        self.keep_alive = message.keep_alive
        self.deadline_hit = False
        self.replied = False
        """A whole reply went out (``send``), or a stream ended: losing the client now cancels nothing."""
        self.stream: ChunkedStream | None = None

    def send(self, reply: Reply) -> None:
        """Write ``reply`` now; the proxy's work after it (the call's end, health, bookkeeping) is off the
        client's path, and a client that closes right after reading it does not cancel that work."""
        front = self.front
        if self.replied or front.lost:
            return
        self.replied = True
        front.write_reply(reply, keep_alive=self.keep_alive and not front.closing)

    async def open_stream(self, headers: dict[str, str], first: bytes) -> Stream:
        front = self.front
        if front.lost:
            raise ConnectionResetError("the client closed the connection")
        stream = self.stream = ChunkedStream(self)
        front.transport.write(
            head(200, {**SSE_HEADERS, **headers}, "Transfer-Encoding: chunked\r\n") + (_chunk(first) if first else b"")
        )
        if front.write_paused:
            await front.drain()
        return stream


class ChunkedStream:
    """A chunked ``text/event-stream`` body on a front connection: one write per relayed read."""

    __slots__ = ("done", "exchange")

    def __init__(self, exchange: FrontExchange) -> None:
        self.exchange = exchange
        self.done = False

    async def write(self, data: bytes) -> None:
        if self.done:
            raise RuntimeError("write() after write_eof()")
        if not data:
            return
        front = self.exchange.front
        if front.lost:
            raise ConnectionResetError("the client closed the connection")
        front.transport.write(_chunk(data))
        if front.write_paused:
            await front.drain()

    def push(self, data: bytes) -> bool:
        """Write now, from the upstream connection's callback (``upstream.Tap``); True when the client is slow
        and ``drain()`` must be awaited before more is pushed."""
        if self.done:
            raise RuntimeError("push() after write_eof()")
        front = self.exchange.front
        if front.lost:
            raise ConnectionResetError("the client closed the connection")
        front.transport.write(_chunk(data))
        return front.write_paused

    async def drain(self) -> None:
        front = self.exchange.front
        if front.write_paused:
            await front.drain()

    async def write_eof(self, data: bytes = b"") -> None:
        if self.done:
            return
        self.done = True
        front = self.exchange.front
        if front.lost:
            raise ConnectionResetError("the client closed the connection")
        front.transport.write((_chunk(data) if data else b"") + _LAST_CHUNK)
        self.exchange.replied = True
        if front.write_paused:
            await front.drain()
