"""Load generator for stream_relay.py: many concurrent SSE streams, every token chunk timestamped.

One process holds ``--streams`` users. Each user keeps one keep-alive connection and sends one streamed
chat completion after another until the measured window ends; user ``i`` starts at ``t0 + i × ramp ÷ N``
so that the streams' phases spread out as in real traffic; the connections are opened before ``t0``.
Times are ``CLOCK_MONOTONIC`` (``time.monotonic_ns``), shared by every process of the machine, so the
parent can read CPU counters exactly at the window's edges.

Why not aiohttp's client: at 30–60 k chunks per second its per-read coroutine wake-up alone would cost this
process most of a core on a 2-core machine and make the client, not the hop, the thing measured. Here each
connection is an ``asyncio.Protocol`` on uvloop: ``data_received`` takes one timestamp per socket read,
de-chunks HTTP/1.1 and splits SSE frames in place, with no task switch per chunk. Every token-carrying frame
(a non-empty ``delta.content``) received in the same read gets the same timestamp, as a real client sees it.

Written at the end, as one JSON object to ``--out``: the requests started and completed in the window,
errors (non-200, a connection lost or a stream without ``[DONE]`` or with the wrong number of tokens),
token chunks received in the window, TTFT of requests sent in the window; and, to ``--out``'s ``.gaps``
file, every inter-token gap (ns, int64) whose later chunk fell inside the window.

Usage: ``python _stream_client.py URL --streams N --t0 NS --ramp S --measure S --body JSON --key K --tokens T
--out FILE`` (started by stream_relay.py, not by hand).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from array import array
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import uvloop

_TOKEN = b'"content":"'
_EMPTY = b'"content":""'


class Stats:
    """Everything one client process counts; gaps and TTFTs in ns."""

    def __init__(self, w0: int, w1: int, tokens: int) -> None:
        self.w0, self.w1, self.tokens = w0, w1, tokens
        self.gaps = array("q")
        self.ttft = array("q")
        self.chunks_in_window = 0
        self.started = self.completed = self.completed_in_window = 0
        self.errors: dict[str, int] = {}
        self.first_error = ""

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if not self.first_error:
            self.first_error = f"{kind}: {detail}"[:500]


class StreamProtocol(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one streamed request at a time."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[bool] | None = None
        self.closed = False
        self.keep_alive = True
        self.count = 0

    # -- connection ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            self._fail("connection", f"lost after {self.count} tokens: {exc!r}")

    def send(self, request: bytes) -> asyncio.Future[bool]:
        """Send one request; the future is True when a complete, well-formed stream came back."""
        assert self.transport is not None
        self.done = asyncio.get_running_loop().create_future()
        self.head = b""
        self.in_body = False
        self.status = 0
        self.keep_alive = True
        self.cbuf = b""
        self.sbuf = b""
        self.left = 0
        self.crlf = 0
        self.ending = False
        self.count = 0
        self.saw_done = False
        self.last = 0
        self.sent = time.monotonic_ns()
        self.stats.started += 1
        self.transport.write(request)
        return self.done

    # -- parsing ------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        if self.done is None or self.done.done():
            return
        if not self.in_body:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = self.head[:end].decode("latin-1"), self.head[end + 4 :]
            lines = head.split("\r\n")
            self.status = int(lines[0].split(" ", 2)[1])
            fields = {k.strip().lower(): v.strip().lower() for k, _, v in (ln.partition(":") for ln in lines[1:])}
            self.keep_alive = fields.get("connection") != "close"
            if self.status != 200 or fields.get("transfer-encoding") != "chunked":
                self._fail(f"status {self.status}", (data[:300]).decode("utf-8", "replace"))
                return
            self.in_body = True
        self._chunked(data, now)

    def _chunked(self, data: bytes, now: int) -> None:
        buf = self.cbuf + data if self.cbuf else data
        pos, n = 0, len(buf)
        while pos < n:
            if self.left:
                end = min(n, pos + self.left)
                self._sse(buf[pos:end], now)
                self.left -= end - pos
                pos = end
                if not self.left:
                    self.crlf = 2
            elif self.crlf:
                step = min(self.crlf, n - pos)
                pos += step
                self.crlf -= step
                if not self.crlf and self.ending:
                    self._finish()
                    return
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(buf[pos:eol].split(b";", 1)[0], 16)
                pos = eol + 2
                if size:
                    self.left = size
                else:
                    self.ending, self.crlf = True, 2  # the last chunk, then an empty trailer line
        self.cbuf = buf[pos:]

    def _sse(self, piece: bytes, now: int) -> None:
        text = self.sbuf + piece if self.sbuf else piece
        frames = text.split(b"\n\n")
        self.sbuf = frames.pop()
        st = self.stats
        for frame in frames:
            if _TOKEN in frame and _EMPTY not in frame:
                self.count += 1
                if st.w0 <= now <= st.w1:
                    st.chunks_in_window += 1
                    if self.last:
                        st.gaps.append(now - self.last)
                    else:
                        st.ttft.append(now - self.sent)
                self.last = now
            elif frame.startswith(b"data: [DONE]"):
                self.saw_done = True
            elif frame.startswith(b"event: error") or b'"error"' in frame:
                st.error("sse error", frame[:300].decode("utf-8", "replace"))

    def _finish(self) -> None:
        assert self.done is not None
        if not self.saw_done or self.count != self.stats.tokens:
            self._fail("incomplete", f"{self.count} tokens, [DONE] {self.saw_done}")
            return
        self.stats.completed += 1
        if self.stats.w0 <= self.sent <= self.stats.w1:
            self.stats.completed_in_window += 1
        self.done.set_result(True)

    def _fail(self, kind: str, detail: str) -> None:
        self.stats.error(kind, detail)
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()
        if self.done is not None and not self.done.done():
            self.done.set_result(False)


async def connect(args: argparse.Namespace, stats: Stats) -> StreamProtocol | None:
    try:
        _, proto = await asyncio.get_running_loop().create_connection(
            lambda: StreamProtocol(stats), args.host, args.port
        )
    except OSError as exc:
        stats.error("connect", repr(exc))
        return None
    return proto


async def user(
    i: int, args: argparse.Namespace, stats: Stats, request: bytes, stop: int, proto: StreamProtocol | None
) -> StreamProtocol | None:
    """Streams one after another until ``stop``, at least one; returns the connection, still open (a pool keeps it).

    At least one: a client process that a starved machine starts after the window has closed still relays a
    stream through the hop, so the run judges the relay (counted as outside the window) instead of reporting
    "0 of 0 streams complete"."""
    start = args.t0 + int(i * args.ramp * 1e9 / args.streams)
    await asyncio.sleep(max(0.0, (start - time.monotonic_ns()) / 1e9))
    first = True
    while first or time.monotonic_ns() < stop:
        first = False
        if proto is None or proto.closed or not proto.keep_alive:
            proto = await connect(args, stats)
            if proto is None:
                await asyncio.sleep(0.1)
                continue
        try:
            await asyncio.wait_for(proto.send(request), timeout=args.timeout)
        except TimeoutError:
            proto._fail("timeout", f"no end of stream after {args.timeout} s")
    return proto


async def preconnect(args: argparse.Namespace, stats: Stats) -> list[StreamProtocol | None]:
    """Every user's connection, opened before the ramp, at most 32 at a time.

    A burst of new connections larger than the server's listen backlog (aiohttp's default is 128) while its
    event loop is busy ends in resets; clients of a gateway keep their connections, so the streams, not
    the connection storm, are what this benchmark measures.
    """
    gate = asyncio.Semaphore(32)

    async def one() -> StreamProtocol | None:
        async with gate:
            return await connect(args, stats)

    return list(await asyncio.gather(*(one() for _ in range(args.streams))))


async def main(args: argparse.Namespace) -> dict[str, Any]:
    w0 = args.t0 + int(args.ramp * 1e9)
    w1 = w0 + int(args.measure * 1e9)
    stats = Stats(w0, w1, args.tokens)
    body = args.body.encode()
    request = (
        f"POST {args.path} HTTP/1.1\r\nHost: {args.host}:{args.port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {args.key}\r\nAccept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    conns = await preconnect(args, stats)
    kept = await asyncio.gather(*(user(i, args, stats, request, w1, conns[i]) for i in range(args.streams)))
    # Close only once every stream is over and the hop has had time to finish its bookkeeping: a client
    # that hangs up the moment its last byte arrives races the server's end of the response.
    await asyncio.sleep(0.5)
    for proto in kept:
        if proto is not None and proto.transport is not None:
            proto.transport.close()
    Path(args.out).with_suffix(".gaps").write_bytes(stats.gaps.tobytes())
    Path(args.out).with_suffix(".ttft").write_bytes(stats.ttft.tobytes())
    return {
        "streams": args.streams,
        "started": stats.started,
        "completed": stats.completed,
        "completed_in_window": stats.completed_in_window,
        "chunks_in_window": stats.chunks_in_window,
        "gaps": len(stats.gaps),
        "errors": stats.errors,
        "first_error": stats.first_error,
        "ended_ns": time.monotonic_ns(),
    }


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--t0", type=int, required=True, help="CLOCK_MONOTONIC ns of the first user's start")
    ap.add_argument("--ramp", type=float, required=True)
    ap.add_argument("--measure", type=float, required=True)
    ap.add_argument("--body", required=True)
    ap.add_argument("--key", default="none")
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    u = urlsplit(args.url)
    args.host, args.port, args.path = u.hostname, u.port, u.path
    return args


if __name__ == "__main__":
    ns = parse(sys.argv[1:])
    Path(ns.out).write_text(json.dumps(uvloop.run(main(ns))) + "\n")
