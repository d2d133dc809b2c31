"""One ``/v1`` request and its answer as the proxy sees them, whichever HTTP server carried it.

The proxy (gateway/request_path/proxy.py) reads ``headers`` and ``body`` of an :class:`Exchange` and answers
either with a :class:`Reply` (sent whole once the handler returns) or by opening a stream on the exchange and
writing to it.
Two servers carry exchanges: the lean front door (``lean_connection``, the hot path) and aiohttp (``/v1`` POSTs
under ``server.http_front: aiohttp``; ``aiohttp_exchange`` adapts it). What both do when ``request_deadline``
passes is here too (:class:`Deadline`, :func:`end_at_deadline`). No server imported: plain protocols and data.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tailgate.wire.anthropic import error_body as anthropic_error_body
from tailgate.wire.anthropic import error_event as anthropic_error_event
from tailgate.wire.errors import WireError
from tailgate.wire.http_refusals import deadline_exceeded

__all__ = [
    "SSE_HEADERS",
    "Deadline",
    "Exchange",
    "Handle",
    "HasHeaders",
    "Reply",
    "Stream",
    "end_at_deadline",
    "error_body",
    "error_frame",
    "error_reply",
]

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(slots=True)
class Reply:
    """A complete answer: status, headers and body, sent in one write."""

    status: int
    headers: dict[str, str]
    body: bytes
    content_type: str = "application/json"


def error_reply(err: WireError, headers: Mapping[str, str] | None = None, path: str | None = None) -> Reply:
    """``err`` in the OpenAI shape — Anthropic's for a ``path`` under ``/v1/messages`` — with the headers it
    carries (``Retry-After``) and ``headers`` on top."""
    return Reply(err.status, {**(err.headers or {}), **(headers or {})}, error_body(err, path))


ANTHROPIC_PATH = "/v1/messages"
"""Requests under it speak Anthropic's Messages API: every error they get is in its shape (gateway/apis/messages.py)."""


def error_body(err: WireError, path: str | None) -> bytes:
    """An error response's body in the shape of the API ``path`` belongs to."""
    return anthropic_error_body(err) if path is not None and path.startswith(ANTHROPIC_PATH) else err.body()


def error_frame(err: WireError, path: str | None) -> bytes:
    """The SSE ``error`` event that ends a stream of ``path``'s API after its first byte."""
    return anthropic_error_event(err) if path is not None and path.startswith(ANTHROPIC_PATH) else err.sse_frame()


class Stream(Protocol):
    """An answer whose headers are sent and whose body follows in pieces (an SSE stream)."""

    async def write(self, data: bytes) -> None: ...

    async def write_eof(self, data: bytes = b"") -> None: ...


class HasHeaders(Protocol):
    @property
    def headers(self) -> Mapping[str, str]:
        """Case-insensitive."""
        ...


class Exchange(HasHeaders, Protocol):
    @property
    def body(self) -> bytes:
        """The whole request body, read within ``max_body_bytes`` and ``body_read_timeout``."""
        ...

    @property
    def deadline_hit(self) -> bool:
        """``server.request_deadline`` cancelled this request (the ledger says ``deadline``, not 499)."""
        ...

    async def open_stream(self, headers: dict[str, str], first: bytes) -> Stream:
        """Send a 200 ``text/event-stream`` head with ``headers`` and ``first`` in one write."""
        ...

    def send(self, reply: Reply) -> None:
        """Send ``reply`` now if the server can (the handler returns it too; it is not sent twice). The
        proxy's work after it is off the client's path."""
        ...

    def detach(self) -> asyncio.Task[Any] | None:
        """The answer is out (``send``, or a stream's end): let the connection serve its next request while the
        handler finishes; returns the handler's task, now on its own. None where the server cannot (then the
        handler's end comes first, as before)."""
        ...


Handle = Callable[[Exchange], Awaitable[Reply | Stream]]


class Deadline:
    """``server.request_deadline`` over one request's handler task, on either server: when due (and not yet
    answered, ``answered``) it marks the request ``hit`` and cancels the task. The handler's caller tells a
    cancellation by the deadline (``hit``: answer with :func:`end_at_deadline`) from a client that left or a stop."""

    __slots__ = ("_answered", "_task", "_timer", "hit", "seconds")

    def __init__(
        self,
        seconds: float,
        task: asyncio.Task[Any],
        loop: asyncio.AbstractEventLoop,
        answered: Callable[[], bool] | None = None,
    ) -> None:
        self.seconds = seconds
        self.hit = False
        self._task: asyncio.Task[Any] | None = task
        self._answered = answered
        self._timer = loop.call_later(seconds, self._fire)

    def _fire(self) -> None:
        if self._task is None or (self._answered is not None and self._answered()):
            return  # answered: what is left is bookkeeping
        self.hit = True
        self._task.cancel()

    def cancel(self) -> None:
        """Disarm, and let go of the task and the ``answered`` callback: the callback usually closes over the
        exchange that holds this deadline, a cycle that would keep every finished handler task alive until the
        cyclic garbage collector ran (thousands at c=50, and the collector's passes over them)."""
        self._timer.cancel()
        self._task = None
        self._answered = None


async def end_at_deadline(deadline_s: float, stream: Stream | None, path: str) -> WireError | None:
    """The request passed its deadline (the handler task is uncancelled): before the first byte the 504 to send
    (returned); after it, the stream ends with the same error as an SSE ``error`` event in ``path``'s API shape
    (None: nothing more to send) — never a silent cut."""
    err = deadline_exceeded(deadline_s)
    if stream is None:
        return err
    with contextlib.suppress(ConnectionError, RuntimeError):
        await stream.write(error_frame(err, path))
        await stream.write_eof()
    return None
