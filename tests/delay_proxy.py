"""A Redis a network hop away: a TCP proxy that delays every byte by a configurable one-way delay.

Used by the slow-Redis tests (``tests/state``) and by ``benchmarks/state_overhead.py`` (as a subprocess, so its
work is not on the gateway's event loop). Each direction of each connection is delayed by ``delay_s``: a
request/answer round trip through it costs ``2 × delay_s`` more than straight to the server; ``reply_s``
adds a delay to the server's answers only. An event loop's timers have a resolution of 1 ms (epoll), so a
one-way delay of 0.5 ms each way comes out at ~2.5 ms round trip; ``--rtt-ms 1`` (``delay_s=0,
reply_s=0.001``) puts the whole round trip on the answers and measures ~1.1 ms. Order is kept
per direction (bytes are released in the order they arrived, each ``delay_s`` after it arrived), so a
pipelining client sees the same stream as without it. ``delay_s`` may be changed while connections are open
(a test turns a fast Redis into a 200 ms one); bytes already queued keep the delay they were given.

As a script: ``python tests/delay_proxy.py HOST:PORT [--delay-ms D] [--rtt-ms R] [--port 0]`` prints
``listening on 127.0.0.1:PORT`` once bound and proxies until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections import deque

__all__ = ["DelayProxy"]


class DelayProxy:
    """``async with DelayProxy(host, port, delay_s) as proxy``: ``proxy.port`` forwards to ``host:port``."""

    def __init__(self, host: str, port: int, delay_s: float = 0.0, *, reply_s: float = 0.0) -> None:
        self.host = host
        self.upstream_port = port
        self.delay_s = delay_s
        self.reply_s = reply_s
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def __aenter__(self) -> DelayProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        try:
            await asyncio.gather(self._pipe(reader, up_writer, False), self._pipe(up_reader, writer, True))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()
            self._tasks.discard(task)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, reply: bool) -> None:
        """Copy ``src`` to ``dst``, each chunk released ``delay_s`` (+ ``reply_s`` for answers) after it was read
        (order kept)."""
        queue: deque[tuple[float, bytes]] = deque()
        ready = asyncio.Event()
        done = False

        async def release() -> None:
            while True:
                while not queue:
                    if done:
                        return
                    ready.clear()
                    await ready.wait()
                at, data = queue.popleft()
                wait = at - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                dst.write(data)
                await dst.drain()

        sender = asyncio.create_task(release())
        try:
            while True:
                data = await src.read(65536)
                if not data:
                    break
                queue.append((time.monotonic() + self.delay_s + (self.reply_s if reply else 0.0), data))
                ready.set()
        finally:
            done = True
            ready.set()
            with contextlib.suppress(Exception):
                await sender
            with contextlib.suppress(Exception):
                dst.write_eof()


async def _main(target: str, delay_ms: float, rtt_ms: float, port: int) -> None:
    host, _, p = target.rpartition(":")
    proxy = DelayProxy(host or "127.0.0.1", int(p), delay_ms / 1000.0, reply_s=rtt_ms / 1000.0)
    proxy.port = port
    await proxy.start()
    print(f"listening on 127.0.0.1:{proxy.port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", help="HOST:PORT of the redis-server")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay, each direction (default 0)")
    ap.add_argument("--rtt-ms", type=float, default=0.0, help="delay added to the answers only (default 0)")
    ap.add_argument("--port", type=int, default=0)
    st = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(st.target, st.delay_ms, st.rtt_ms, st.port))
    sys.exit(0)
