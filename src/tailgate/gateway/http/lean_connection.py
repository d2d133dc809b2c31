"""The lean front door: the gateway's own HTTP/1.1 server for the ``/v1`` POSTs, aiohttp for everything else.

aiohttp's server (request objects, middleware chain, router, payload stream, response writer) cost about a third of
the gateway's CPU per relayed request (docs/benchmarks.md, "The front door"). The hot path — ``POST`` to the
proxy's paths — is parsed here with llhttp (httptools) on a bare asyncio protocol and handed to the proxy as an
:class:`~tailgate.gateway.http.exchange.Exchange`; its answer is written in one system call (a stream: one per
relayed read). Every other request — admin, dashboard, metrics, models, health, a wrong method, anything this
parser refuses — is handed over, with the bytes received so far, to aiohttp's own connection handler
(``_aiohttp_internals.SiteLink.hand_over``), which then serves that connection to its end.

What the aiohttp stack does for these POSTs is kept, with the same answers (``wire.http_refusals``, one table for
both servers): a body over ``max_body_bytes`` is a 413, one that does not arrive within ``body_read_timeout`` a
408, a declared non-JSON content type a 415 (each closes the connection after lingering); ``request_deadline``
ends a request with a 504 or an SSE error event (``exchange.Deadline``, as aiohttp's deadline middleware); a client
that goes away cancels its request (the ledger says 499); an idle connection closes after ``keepalive_timeout``;
``Expect: 100-continue`` is answered; the connection cap counts these connections; a graceful stop waits for
their requests like aiohttp's.

A hand-over needs the request's first byte to be the first byte of a read: true of every client that waits for an
answer before it sends the next request (all HTTP/1.1 clients in use; pipelining is off everywhere). A non-``/v1``
request pipelined right behind a ``/v1`` one in the same read is answered 400 ("send it on its own connection");
pipelined ``/v1`` requests are served in order.

This module is the connection (parse, dispatch, hand-over, timers, graceful stop); ``lean_reply`` holds what it
writes (status lines and headers, whole replies, the exchange and its chunked stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

import httptools
from multidict import CIMultiDict

from tailgate._aiohttp_internals import SiteLink
from tailgate.config.schema import ServerConfig
from tailgate.gateway.http.exchange import Deadline, Handle, Reply, Stream, end_at_deadline, error_reply
from tailgate.gateway.http.lean_reply import LeanExchange, Message, WriteBatch, reply_bytes
from tailgate.wire import errors as wire_errors
from tailgate.wire import http_refusals
from tailgate.wire.errors import WireError
from tailgate.wire.http_refusals import BodyLimits

__all__ = ["LeanConnection", "LeanRoutes"]

log = logging.getLogger("tailgate.http")


@dataclass(frozen=True, slots=True)
class LeanRoutes:
    """What the lean front door serves itself: ``POST`` to these paths, within these limits."""

    routes: Mapping[str, Handle]
    limits: BodyLimits
    server: ServerConfig


_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_PIPELINE_LIMIT = 16
"""Complete requests queued behind the one being served before reading pauses."""
_HANDOVER_LIMIT = 1 << 20
"""Bytes held for a hand-over that waits on a request in flight before reading pauses."""


class _Stop(Exception):
    """Raised from a parser callback to stop parsing this connection's input (the reason is on the front)."""


class LeanConnection(asyncio.Protocol):
    """One client connection (see the module docstring). ``link`` counts it on its site, lets aiohttp's graceful
    stop call :meth:`close` and :meth:`shutdown`, and hands the connection to aiohttp's handler."""

    def __init__(
        self,
        front: LeanRoutes,
        *,
        link: SiteLink,
        loop: asyncio.AbstractEventLoop,
        batch: WriteBatch,
    ) -> None:
        self._routes = {path.encode(): handle for path, handle in front.routes.items()}
        self._limits = front.limits
        server = front.server
        self._max_field = server.max_header_bytes
        self._max_headers = server.max_headers
        self._keepalive_s = server.keepalive_timeout
        self._deadline_s = server.request_deadline
        self._link = link
        self._loop = loop
        self.batch = batch
        """Writes queued during a loop turn, written at its end (``queue``; ``lean_reply.WriteBatch``)."""
        self._out: list[bytes] = []
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set in connection_made
        self.lost = False
        self.write_paused = False
        self._read_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        # the message being parsed
        self._data = b""
        self._chunks: list[bytes] = []
        """Reads since the message in progress began, while its head is open and it began a read (for a hand-over)."""
        self._idle = True
        """Between messages: the next byte begins one."""
        self._clean = True
        """This read began between messages."""
        self._begun = 0
        """Messages begun in this read."""
        self._fresh = True
        """The message in progress began at the first byte of a read (it can be handed over)."""
        self._head_open = False
        self._url = b""
        self._fields: list[tuple[bytes, bytes]] = []
        self._message: Message | None = None
        self._body: list[bytes] = []
        self._body_size = 0
        self._body_timer: asyncio.TimerHandle | None = None
        self._stop_reason: str | None = None
        # serving
        self._queue: deque[Message | Reply] = deque()
        self._task: asyncio.Task[None] | None = None
        self.exchange: LeanExchange | None = None
        """The request being served."""
        self._ignore_input = False
        self.closing = False
        self._handover: list[bytes] | None = None
        self._handover_size = 0
        self._last = loop.time()
        self._keepalive: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._link.join(self, transport)  # a graceful stop reaches us
        self._arm_keepalive()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.lost:
            return
        self.lost = True
        self._link.leave(self)
        self._cancel_timers()
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionResetError("the client closed the connection"))
        if self._task is not None and (self.exchange is None or not self.exchange.replied):
            self._task.cancel()  # like aiohttp's handler_cancellation: the proxy books a 499
        self._queue.clear()
        self._out.clear()

    # -- writing: queued for the end of the loop turn, or now after what is queued ----------------------

    def queue(self, data: bytes) -> None:
        """Write ``data`` now if it is the loop turn's first write, else at the end of the turn with the turn's
        other writes (``WriteBatch``): one client alone is answered at once, fifty share the wake-ups."""
        if self._out or self.batch.add(self):
            self._out.append(data)
        else:
            self.transport.write(data)

    def flush(self) -> None:
        """Write what is queued (the batch calls it; so does every direct write and close, to keep the order)."""
        if self._out:
            out, self._out = self._out, []
            if not self.lost:
                self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def send(self, data: bytes) -> None:
        """Write ``data`` now, after what is queued (one write)."""
        if self._out:
            self._out.append(data)
            self.flush()
        else:
            self.transport.write(data)

    def _close(self) -> None:
        self.flush()
        self.transport.close()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)

    async def drain(self) -> None:
        if not self.write_paused:
            return
        if self.lost:
            raise ConnectionResetError("the client closed the connection")
        waiter = self._drain_waiter
        if waiter is None or waiter.done():
            waiter = self._drain_waiter = self._loop.create_future()
        await waiter

    def data_received(self, data: bytes) -> None:
        if self._ignore_input:
            return
        if self._handover is not None:
            self._handover.append(data)
            self._handover_size += len(data)
            if self._handover_size > _HANDOVER_LIMIT:
                self._pause_reading()  # resumed when aiohttp's handler has the connection
            return
        self._clean = self._idle
        self._begun = 0
        self._data = data
        if self._head_open and self._fresh:
            self._chunks.append(data)
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            reason, self._stop_reason = self._stop_reason, None
            if reason == "handover":
                self._start_handover()
            elif reason is None:  # the parser refused the input
                if self._fresh and (self._head_open or self._idle):
                    self._start_handover()  # aiohttp parses it again and answers in its own (OpenAI) shape
                else:
                    self._refuse(http_refusals.malformed("HttpParserError"), self._url_path())
            return
        finally:
            self._data = b""
        if self._message is not None and self._body_timer is None and not self._head_open:
            # a body still on its way: it must arrive within body_read_timeout (408)
            self._body_timer = self._loop.call_later(self._limits.read_timeout_s, self._body_late)

    # -- httptools callbacks ----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._idle = False
        self._begun += 1
        self._fresh = self._clean and self._begun == 1
        self._chunks = [self._data] if self._fresh else []
        self._head_open = True
        self._url = b""
        self._fields = []

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._max_field:
            self._stop(http_refusals.header_too_large("line"))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields.append((name, value))
        if len(name) + len(value) > self._max_field:
            self._stop(http_refusals.header_too_large("line"))
        if len(self._fields) > self._max_headers:
            self._stop(http_refusals.header_too_large("count"))

    def on_headers_complete(self) -> None:
        self._head_open = False
        path = self._url.partition(b"?")[0]
        handle = self._routes.get(path) if self._parser.get_method() == b"POST" else None
        if handle is None or self._parser.should_upgrade():  # an Upgrade (h2c, websocket) is aiohttp's to answer
            self._stop(http_refusals.not_pipelinable())
        self._chunks = []
        headers: CIMultiDict[str] = CIMultiDict(
            [(n.decode("latin-1"), v.decode("utf-8", "surrogateescape")) for n, v in self._fields]
        )
        self._fields = []
        length = headers.get("Content-Length")
        refused = http_refusals.before_body(
            self._limits,
            path.decode("latin-1"),
            headers.get("Content-Type"),
            int(length) if length is not None and length.isdigit() else None,
        )
        if refused is not None:
            self._refuse(refused, path.decode("latin-1"))
            raise _Stop
        if headers.get("Expect", "").lower() == "100-continue":
            self.send(_CONTINUE)
        self._message = Message(path.decode("latin-1"), handle, headers, self._parser.should_keep_alive())
        self._body = []
        self._body_size = 0

    def on_body(self, body: bytes) -> None:
        if self._message is None:
            return
        self._body.append(body)
        self._body_size += len(body)
        if self._body_size > self._limits.max_bytes:
            self._refuse(http_refusals.too_large(self._limits.max_bytes), self._message.path)
            raise _Stop

    def on_message_complete(self) -> None:
        self._idle = True
        message, self._message = self._message, None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        if message is None:
            return
        body = self._body
        message.body = body[0] if len(body) == 1 else b"".join(body)
        self._body = []
        self._queue.append(message)
        if self._task is None:
            self._next()
        elif len(self._queue) > _PIPELINE_LIMIT:
            self._pause_reading()  # resumed when the queue is served

    def _stop(self, refusal: WireError) -> NoReturn:
        """Stop parsing this request: hand the connection to aiohttp if the request began a read (aiohttp parses it
        again and answers as it does for every other path), else refuse it with ``refusal`` and close."""
        if self._fresh:
            self._stop_reason = "handover"
        else:
            self._refuse(refusal, self._url_path())
            self._stop_reason = "refused"
        raise _Stop

    def _url_path(self) -> str | None:
        """The path of the request being parsed (its refusal's shape follows it), if its URL was read."""
        return self._url.partition(b"?")[0].decode("latin-1") or None

    # -- serving ----------------------------------------------------------------------------------

    def _refuse(self, err: WireError, path: str | None = None) -> None:
        """Answer ``err`` (in the shape of ``path``'s API) after whatever is queued, then close; nothing more is
        read."""
        self._ignore_input = True
        self._message = None
        self._stop_reason = self._stop_reason or "refused"
        self._cancel_timers()
        self._queue.append(error_reply(err, path=path))
        if self._task is None:
            self._next()

    def _body_late(self) -> None:
        self._body_timer = None
        path = self._message.path if self._message is not None else None
        self._refuse(http_refusals.body_late(self._limits), path)

    def _next(self) -> None:
        """Serve the next queued message, or hand over / close / wait, as the connection's state says."""
        while self._queue and not self.lost:
            item = self._queue.popleft()
            if isinstance(item, Message):
                self._task = self._loop.create_task(self._serve(item))
                if len(self._queue) <= _PIPELINE_LIMIT:
                    self._resume_reading()
                return
            self.write_reply(item, keep_alive=False, linger=True)  # a refusal: it closes the connection
            return
        if self.lost:
            return
        if self._handover is not None:
            self._hand_over()
        elif self.closing:
            self._close()
        else:
            self._last = self._loop.time()
            self._arm_keepalive()

    @property
    def handler_task(self) -> asyncio.Task[None] | None:
        """The task serving the connection's current request."""
        return self._task

    def release(self, exchange: LeanExchange) -> None:
        """``exchange`` is answered (``LeanExchange.detach``): serve the connection's next request; its handler
        finishes detached (``_serve`` then touches the connection no more)."""
        if self.exchange is not exchange:
            return
        exchange.detached = True
        self._task = None
        self.exchange = None
        self._next()

    async def _serve(self, message: Message) -> None:
        exchange = self.exchange = LeanExchange(self, message)
        task = asyncio.current_task(self._loop)
        assert task is not None
        if self._deadline_s is not None:
            exchange.deadline = Deadline(self._deadline_s, task, self._loop, lambda: exchange.replied)
        out: Reply | Stream | None
        try:
            out = await message.handle(exchange)
        except asyncio.CancelledError:
            if exchange.deadline is None or not exchange.deadline.hit or self.lost:
                raise  # the client went away (connection_lost cleaned up), or the server is stopping
            task.uncancel()
            err = await end_at_deadline(exchange.deadline.seconds, exchange.stream, message.path)
            out = None if err is None else error_reply(err, path=message.path)
        except ConnectionError:
            if exchange.detached:
                return  # the connection serves another request now
            self._task = None
            self._close()
            return
        except Exception:
            log.exception("unhandled error in POST %s", message.path)
            out = None if exchange.stream is not None else error_reply(wire_errors.server_error(), path=message.path)
        finally:
            if exchange.deadline is not None:
                exchange.deadline.cancel()
        if exchange.detached:
            return  # the connection went on to its next request when the answer was out
        self._task = None
        self.exchange = None
        if self.lost:
            return
        keep_alive = message.keep_alive and not self.closing
        if exchange.replied:  # sent by send(), or a stream that ended
            if not keep_alive:
                self._close()
                return
        elif isinstance(out, Reply):
            self.write_reply(out, keep_alive=keep_alive)
            if not keep_alive:
                return
        else:
            self._close()  # a stream that did not end cleanly: the client must see the cut
            return
        self._next()

    def write_reply(self, reply: Reply, *, keep_alive: bool, linger: bool = False) -> None:
        """Write ``reply`` in one call. Without keep-alive the connection closes: at once, or with ``linger``
        (a refused request whose body may still be on its way) after reading and dropping what the client still
        sends for up to ``http_refusals.LINGER_S``, so that it reads the answer instead of a reset."""
        try:
            data = reply_bytes(reply, keep_alive=keep_alive)
        except ValueError:
            log.exception("refused to send a response header")
            data = reply_bytes(Reply(500, {}, b""), keep_alive=keep_alive)
        if keep_alive:
            self.queue(data)  # written with the loop turn's other writes (WriteBatch)
            return
        self.send(data)
        if linger and self.transport.can_write_eof():
            self._ignore_input = True
            self.transport.write_eof()
            self._linger = self._loop.call_later(http_refusals.LINGER_S, self.transport.close)
        else:
            self._close()

    # -- hand-over, keep-alive, stop ----------------------------------------------------------------

    def _start_handover(self) -> None:
        self._handover = self._chunks
        self._handover_size = sum(len(c) for c in self._chunks)
        self._chunks = []
        self._head_open = False
        if self._task is None and not self._queue:
            self._hand_over()

    def _hand_over(self) -> None:
        """aiohttp's handler takes the connection, from the first byte of the request in progress."""
        data = b"".join(self._handover or ())
        self._handover = None
        self._cancel_timers()
        self.flush()  # what is queued goes first
        self.lost = True  # this protocol is done with the connection (its counters move to the handler)
        handler = self._link.hand_over(self, self.transport, write_paused=self.write_paused)
        self._resume_reading()
        if data:
            handler.data_received(data)

    def _pause_reading(self) -> None:
        if not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()

    def _arm_keepalive(self) -> None:
        if self._keepalive is None:
            self._keepalive = self._loop.call_at(self._last + self._keepalive_s, self._keepalive_due)

    def _keepalive_due(self) -> None:
        self._keepalive = None
        if self.lost or self._task is not None or self._queue or self._message is not None:
            return  # busy: armed again when the request ends
        due = self._last + self._keepalive_s
        if self._loop.time() >= due:
            self._close()
        else:
            self._keepalive = self._loop.call_at(due, self._keepalive_due)

    def _cancel_timers(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def close(self) -> None:
        """aiohttp's ``pre_shutdown``: no new request; close once the one in flight is answered."""
        self.closing = True
        if not self._busy() and not self.lost:
            self._close()

    def _busy(self) -> bool:
        """A request's body is arriving, or a request is queued or being served (half a head is not a request:
        a graceful stop does not wait for a client that never finishes its headers)."""
        return self._task is not None or bool(self._queue) or self._message is not None

    async def shutdown(self, timeout: float | None = None) -> None:  # noqa: ASYNC109  # aiohttp's signature
        """aiohttp's graceful stop: wait up to ``timeout`` for the request in flight, then cancel it and close."""
        self.closing = True
        end = None if timeout is None else self._loop.time() + timeout
        while self._busy() and not self.lost and (end is None or self._loop.time() < end):
            task = self._task
            if task is None:  # a request still arriving: it gets its answer too
                await asyncio.sleep(0.01)
                continue
            left = None if end is None else max(0.0, end - self._loop.time())
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), left)
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if not self.lost:
            self._close()
