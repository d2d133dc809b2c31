"""A Redis whose answer to one command the test holds: a TCP proxy on 127.0.0.1 (port 0) that forwards every byte
at once, except the reply to the next command carrying a marker, which it keeps until the test decides.

Used by the late-reply tests (``tests/state/test_state_late_replies.py``): a call whose budget runs out, or whose
caller goes away, while Redis has answered but the answer is held, gets that answer exactly when the test lets it
through, with no wall-clock guess about when Redis is "surely" slow enough. redis-py's request path sends one
command at a time on a connection (no pipelining), so the bytes that next come back on the marked command's
connection are its reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

__all__ = ["Held", "ReplyGate", "stall_until"]


def stall_until(deadline: float) -> None:
    """Keep this thread, and so its event loop, busy until ``deadline`` (monotonic): a saturated replica."""
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(left)


class Held:
    """The reply to one marked command: ``arrived`` is set once Redis has answered it and the gate holds it."""

    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        self.seen_at = 0.0
        """When the command passed the gate (monotonic): its caller's budget started before."""
        self.arrived = asyncio.Event()
        self._fate: asyncio.Future[tuple[bool, Callable[[], None] | None]] = asyncio.get_running_loop().create_future()

    def deliver(self, then: Callable[[], None] | None = None) -> None:
        """Let the reply through; ``then`` runs as soon as it is written, in the same turn of the loop."""
        self._fate.set_result((True, then))

    def drop(self) -> None:
        """Cut the connection instead: its caller never gets this reply."""
        self._fate.set_result((False, None))


class ReplyGate:
    """``async with ReplyGate(host, port) as gate``: ``gate.url`` reaches the Redis at ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.upstream_port = port
        self.port = 0
        self._armed: Held | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def hold(self, marker: bytes) -> Held:
        """Hold the reply to the next command whose bytes contain ``marker`` (once)."""
        self._armed = Held(marker)
        return self._armed

    async def __aenter__(self) -> ReplyGate:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
            marked: list[Held] = []  # this connection's command whose reply is to be held (one at most)
            await asyncio.gather(self._commands(reader, up_writer, marked), self._replies(up_reader, writer, marked))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    w.close()
            self._tasks.discard(task)

    async def _commands(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, marked: list[Held]) -> None:
        while data := await src.read(65536):
            armed = self._armed
            if armed is not None and armed.marker in data:
                self._armed = None
                armed.seen_at = time.monotonic()
                marked.append(armed)
            dst.write(data)
            await dst.drain()
        dst.write_eof()

    async def _replies(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, marked: list[Held]) -> None:
        while data := await src.read(65536):
            if marked:
                held = marked.pop()
                held.arrived.set()
                keep, then = await held._fate
                if not keep:
                    dst.close()  # the client's side: its commands' pipe sees the end and closes Redis's side
                    return
                dst.write(data)
                if then is not None:
                    then()
            else:
                dst.write(data)
            await dst.drain()
        dst.write_eof()
