"""A stream's frames, measured one at a time, and the rest of a stream pushed to a relaying caller.

``StreamRelay`` is the part of :class:`~tailgate.upstream.call.Call` that reads a stream's frames: ``_frame``
measures one SSE frame (tokens, ITL, usage, the dropped usage chunk, an error event, the end) for both the
pulled loop in ``Call._run`` and ``_pump``, which takes each upstream read in the connection's own callback once
the caller has set ``Call.tap`` (docs/architecture.md, "After its first token a stream is pushed"). Kept in its
own module so ``call.py`` stays readable; the measurement state it fills is ``Call``'s.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol, runtime_checkable

import msgspec

from tailgate.upstream._frames import (
    FrameSplitter,
    decode_event,
    decode_frame,
    has_answer,
    token_count,
)
from tailgate.upstream._request import _Failed
from tailgate.upstream.dialect import END, Events
from tailgate.upstream.events import ErrorClass
from tailgate.upstream.http import Response
from tailgate.wire.sse import SSEDecoder, SSEProtocolError

_perf = time.perf_counter

# What a stream frame means for the relay (``Call._frame``); a count n >= 0 is a frame to forward.
_DROP = -1
"""The usage chunk asked for on the client's behalf: measured, not forwarded."""
_END = END
"""``[DONE]`` or a dialect's terminal event (upstream/dialect.py): the stream is complete."""
_ERROR = -3
"""An error event: forwarded, then the call fails as ``stream_error``."""
_PAUSED = object()
"""The pump's wake-up when the tap's client is slow."""


@runtime_checkable
class Tap(Protocol):
    """Where a relaying caller wants the rest of a stream pushed (``Call.tap``), e.g. the gateway's client
    connection: ``push`` takes a read's frames (to write now, or with the loop turn's other writes) and says
    whether the client is slow (then ``drain`` is awaited before more is pushed); a ``ConnectionError`` from
    it means the client left."""

    def push(self, data: bytes) -> bool: ...

    async def drain(self) -> None: ...


class StreamRelay:
    """``Call``'s stream reading (see the module docstring): the attributes below are ``Call``'s."""

    tap: Tap | None
    _events: Events
    """The dialect's stream events (upstream/dialect.py): what a frame without ``choices`` means."""
    _loop: asyncio.AbstractEventLoop
    _decoder: SSEDecoder
    _drop_usage: bool
    _reader: Response | None
    _first: float | None
    _last_token: float | None
    _itl: list[float]
    _token_chunks: int
    _answer: float | None
    _reasoning_chunks: int
    _prompt_tokens: int | None
    _completion_tokens: int | None
    _reasoning_tokens: int | None
    _cached_tokens: int | None

    def _watch(self, phase: float | None, phase_class: ErrorClass, total: float | None) -> None:
        raise NotImplementedError  # Call's

    def _frame(self, raw: bytes, now: float) -> int:
        """Measure one SSE frame of the stream (tokens, ITL, usage) and say what the relay does with it: a
        count n >= 0 is a frame to forward that carries n tokens; ``_DROP``, ``_END`` or ``_ERROR`` otherwise.
        Raises ``_Failed`` for a malformed frame (it is never forwarded)."""
        payload: str | bytes
        event_name: str | None = None
        if raw.startswith(b"data: ") and raw.endswith(b"\n\n") and raw.count(b"\n") == 2 and b"\r" not in raw:
            payload = raw[6:-2]  # the common case, one "data: {...}" line: no need for the full SSE field parser
        elif (
            raw.startswith(b"event: ")
            and raw.endswith(b"\n\n")
            and raw.count(b"\n") == 3
            and b"\r" not in raw
            and (name := raw[7 : raw.index(b"\n")]) in self._events.names
            and raw.startswith(b"data: ", 8 + len(name))
        ):
            # A dialect's common case (Anthropic's): "event: <type>" and one data line; its type is one of the
            # dialect's, so the frame is read as an event at once (not first as a chat chunk).
            try:
                named = decode_event(raw[14 + len(name) : -2])
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise _Failed("malformed", "a stream event is not valid JSON") from None
            return self._events.event(self, named, name.decode(), now)
        else:
            try:
                sse_events = self._decoder.feed(raw)
            except SSEProtocolError as exc:
                raise _Failed("malformed", f"bad SSE frame: {exc.problem}") from None
            if not sse_events:  # a keep-alive comment or stray blank lines
                return 0
            payload, event_name = sse_events[0].data, sse_events[0].event
        if payload.startswith(b"[DONE]") if isinstance(payload, bytes) else payload.startswith("[DONE]"):
            return _END
        try:
            frame = decode_frame(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise _Failed("malformed", "a stream chunk is not valid JSON") from None
        kind: str | None = None  # an event's type (the dialect's: upstream/dialect.py); chat chunks have choices
        if frame.choices is None:
            try:
                event = decode_event(payload)
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise _Failed("malformed", "a stream event is not valid JSON") from None
            kind = event.type
            if kind is not None and not frame.error and event_name != "error" and kind not in self._events.failed:
                return self._events.event(self, event, kind, now)
        if frame.error or event_name == "error" or (kind is not None and kind in self._events.failed):
            return _ERROR
        if (usage := frame.usage) is not None:
            self._take_usage(usage)
            if self._drop_usage and frame.choices == []:
                return _DROP  # the usage chunk we asked for on the client's behalf
        n = token_count(frame)
        if n:
            self._token(now, has_answer(frame))
        return n

    def _token(self, now: float, answer: bool) -> None:
        """A token-carrying frame arrived at ``now`` (``answer``: not reasoning)."""
        self._token_chunks += 1
        if self._last_token is None:
            self._first = now
        else:
            self._itl.append((now - self._last_token) * 1000.0)
        self._last_token = now
        if self._answer is None:
            if answer:
                self._answer = now
            else:
                self._reasoning_chunks += 1

    def _merge_usage(self, usage: Any, *, output: bool) -> None:
        """Anthropic's usage comes in parts (``message_start``, then ``message_delta``): a count it leaves out
        keeps what an earlier event said. ``message_start``'s ``output_tokens`` (1, or 0) is a placeholder, not
        a count: only ``message_delta`` says how many were produced (``output``). Until it came, the output is
        the stream's token chunks, flagged estimated: a stream that ends early — its client left, the provider
        cut it — is billed what it delivered, never 1 (the placeholder would bill a cut stream nothing)."""
        if (prompt := usage.prompt) is not None:
            self._prompt_tokens = prompt
        if output and (completion := usage.completion) is not None:
            self._completion_tokens = completion
        if (cached := usage.cached) is not None:
            self._cached_tokens = cached

    async def _pump(
        self, resp: Response, splitter: FrameSplitter, idle: float | None, total_at: float | None
    ) -> tuple[float, bytes] | None:
        """Relay the stream through ``self.tap`` from the connection's own callback: each read is measured
        (``_frame``, as in the pull loop) and its frames handed on in one ``tap.push``, with no future, task
        switch or event per read. Returns (time, frame) of the end frame (not pushed: the caller sends it
        with the end of its body); raises the failure after pushing the frames before it; returns None when
        the body ended, broke or a deadline passed without an end frame (the pull loop's next read says which).
        A slow client (``push`` says so) stops the pushing until ``tap.drain()``; the upstream's bytes wait
        in the response meanwhile (its own read pause applies)."""
        tap = self.tap
        assert tap is not None
        loop = self._loop
        waiter: asyncio.Future[Any] = loop.create_future()

        def watch() -> None:
            self._watch(None if idle is None else loop.time() + idle, "timeout_idle", total_at)

        def sink(data: bytes) -> None:
            now = _perf()
            forward: list[bytes] = []
            outcome: Any = None
            try:
                for raw in splitter.feed(data):
                    code = self._frame(raw, now)
                    if code >= 0:
                        forward.append(raw)
                    elif code == _END:
                        outcome = (now, raw)
                        break
                    elif code == _ERROR:
                        forward.append(raw)
                        outcome = _Failed("stream_error", "the upstream sent an error event mid-stream")
                        break
                watch()
            except SSEProtocolError as exc:
                outcome = _Failed("malformed", f"bad SSE stream: {exc.problem}")
            except Exception as exc:  # _Failed, _Expired, or a bug: raised where the call's generator runs
                outcome = exc
            paused = False
            if forward:
                try:
                    paused = tap.push(forward[0] if len(forward) == 1 else b"".join(forward))
                except Exception as exc:  # the client left (ConnectionError)
                    outcome = exc
            if outcome is not None or paused:
                resp.push_to(None)
                if not waiter.done():
                    waiter.set_result(outcome if outcome is not None else _PAUSED)

        def ended() -> None:  # the body ended, broke or a deadline failed it
            resp.push_to(None)
            if not waiter.done():
                waiter.set_result(None)

        self._reader = resp
        try:
            while True:
                watch()
                try:
                    data = resp.read_nowait()  # what arrived while we were not pushing
                except Exception:
                    return None  # the body failed: the pull loop's read raises it as a read does
                if data:
                    sink(data)
                if not waiter.done():
                    resp.push_to(sink, ended)
                    if resp.is_eof():
                        ended()
                outcome = await waiter
                if outcome is _PAUSED:
                    self._reader = None  # waiting for our client, not for the upstream: no idle expiry
                    await tap.drain()
                    self._reader = resp
                    waiter = loop.create_future()
                    continue
                if isinstance(outcome, BaseException):
                    raise outcome
                return outcome  # type: ignore[no-any-return]
        finally:
            resp.push_to(None)
            self._reader = None

    def _take_usage(self, usage: Any) -> None:
        self._prompt_tokens = usage.prompt
        self._completion_tokens = usage.completion
        self._reasoning_tokens = usage.reasoning
        self._cached_tokens = usage.cached
