"""One call to one provider, measured: the one place TTFT, ITL and E2E are taken.

``call()`` returns a :class:`Call`. Iterate it (inside ``async with`` so that stopping early closes
the upstream response at once) to get :class:`Sent`, :class:`Headers`, then :class:`Chunk` per SSE
frame or one :class:`Body`, :class:`Done`, and finally the :class:`CallResult`, which is also left on
``call.result``. Upstream failures never raise: they end the iteration with a result whose
``error_class`` says what went wrong. A cancelled or abandoned call gets ``error_class="cancelled"``.

``Sent`` and ``Headers`` are yielded together once the headers arrive (``Sent.t`` is the moment the
request was handed to the pool, so a slow consumer cannot shift it). The send includes waiting for a
free pooled connection and connecting: TTFT and E2E are what the caller of this client experiences.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from types import TracebackType
from typing import Any

import msgspec

from tailgate import __version__
from tailgate.upstream._frames import (
    FrameSplitter,
    decode_body,
    retry_after,
)
from tailgate.upstream._relay import _END, _ERROR, StreamRelay, Tap
from tailgate.upstream._request import MAX_RESPONSE_BODY, _Expired, _Failed, _min, _prepare, _status_class
from tailgate.upstream.client import UpstreamClient
from tailgate.upstream.dialect import OPENAI, Dialect
from tailgate.upstream.events import Body, CallResult, Chunk, Done, ErrorClass, Event, Headers, Sent
from tailgate.upstream.http import Response, request_head
from tailgate.wire.errors import MAX_ERROR_BODY, WireError, parse_error_body
from tailgate.wire.sse import SSEDecoder, SSEProtocolError

__all__ = ["Call", "Tap", "call"]

USER_AGENT = f"tailgate/{__version__}"

_perf = time.perf_counter


class Call(StreamRelay):
    """One measured upstream call; see the module docstring. Iterate it once."""

    def __init__(
        self,
        client: UpstreamClient,
        path: str,
        body: bytes | Mapping[str, Any],
        *,
        stream: bool,
        client_wants_usage: bool | None = None,
        request_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        key_hash: int | None = None,
        dialect: Dialect = OPENAI,
    ) -> None:
        self.client = client
        self.dialect = dialect
        self._key_hash = key_hash
        self.path = path
        self.stream = stream
        self.request_id = request_id
        # The Responses API and Anthropic's Messages API always send usage (and a strict upstream refuses
        # stream_options): their bodies go as they are (the dialect says so: upstream/dialect.py).
        self._payload, self.client_wants_usage = _prepare(
            body, stream, client_wants_usage, inject=dialect.injects_usage
        )
        self._extra_headers = headers
        self._events = dialect.events
        self.result: CallResult | None = None
        self.tap: Tap | None = None
        """Set by a caller that relays the stream and has written every frame it was given: the rest of the
        stream is then pushed to it from the connection's callback (``_pump``), with the same measurement."""
        self._decoder: SSEDecoder  # a stream's, set when it starts
        self._drop_usage = False
        self._gen: AsyncGenerator[Event, None] | None = None
        # measurement state, filled as the call goes
        self._t0 = 0.0
        self._wall = 0.0
        self._status: int | None = None
        self._key_index: int | None = None
        self._first: float | None = None
        self._last_token: float | None = None
        self._itl: list[float] = []
        self._token_chunks = 0
        self._prompt_tokens: int | None = None
        self._completion_tokens: int | None = None
        self._answer: float | None = None
        self._reasoning_chunks = 0
        self._reasoning_tokens: int | None = None
        self._cached_tokens: int | None = None
        # the read watchdog (see _read)
        self._loop: asyncio.AbstractEventLoop  # set when the call starts
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._deadline: float | None = None
        self._expiry_class: ErrorClass = "timeout_idle"
        self._reader: Response | None = None
        self._sending: asyncio.Task[Any] | None = None
        self._send_expired = False

    def __repr__(self) -> str:
        return f"Call({self.client.endpoint.name!r}, {self.path!r}, stream={self.stream}, result={self.result!r})"

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._gen is None:
            self._gen = self._run()
        return self._gen

    async def __aenter__(self) -> Call:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the call now: the upstream response is closed and the result says ``cancelled``."""
        if self._gen is not None:
            await self._gen.aclose()
        if self.result is None:
            self.result = self._finish("cancelled", detail="the call was closed before it started")

    async def collect(self) -> CallResult:
        """Run the call to its end, discarding the events (what bench and monitor need)."""
        async with self:
            async for _ in self:
                pass
        assert self.result is not None  # _run always sets it before it ends
        return self.result

    # -- the result ------------------------------------------------------------------------------

    def _ms(self, t: float | None) -> float | None:
        return None if t is None else (t - self._t0) * 1000.0

    def _finish(
        self,
        error_class: ErrorClass | None,
        *,
        end: float | None = None,
        error: WireError | None = None,
        detail: str | None = None,
        retry_after_s: float | None = None,
    ) -> CallResult:
        if detail is not None:
            for secret in self.client.keys.secrets:
                detail = detail.replace(secret, "***")
        estimated = self._completion_tokens is None
        return CallResult(
            status=self._status,
            error_class=error_class,
            started_at=self._wall,
            stream=self.stream,
            request_id=self.request_id,
            key_index=self._key_index,
            error=error,
            detail=detail,
            retry_after_s=retry_after_s,
            ttft_ms=self._ms(self._first),
            e2e_ms=self._ms(end if end is not None else (_perf() if self._t0 else None)),
            itl_ms=self._itl,
            prompt_tokens=self._prompt_tokens,
            output_tokens=self._token_chunks if self._completion_tokens is None else self._completion_tokens,
            tokens_estimated=estimated,
            token_chunks=self._token_chunks,
            ttft_answer_ms=self._ms(self._answer),
            reasoning_tokens=self._reasoning_tokens
            if self._reasoning_tokens is not None
            else (self._reasoning_chunks or None),
            cached_tokens=self._cached_tokens,
        )

    # -- the call --------------------------------------------------------------------------------

    def _request_headers(self) -> dict[str, str]:
        endpoint = self.client.endpoint
        headers = {
            "User-Agent": USER_AGENT,
            "Accept-Encoding": "identity",
            "Content-Type": "application/json",
            **endpoint.headers,
        }
        if self._extra_headers:
            headers.update(self._extra_headers)
        keys = self.client.keys
        if (picked := keys.next() if self._key_hash is None else keys.pick(self._key_hash)) is not None:
            self._key_index, key = picked
            headers["Authorization"] = f"Bearer {key}"
            if self.dialect.api_key_header:  # Anthropic's endpoints read x-api-key (some only that; both are sent)
                headers["x-api-key"] = key
        if self.request_id is not None:
            headers["x-request-id"] = self.request_id
        return headers

    # -- deadlines: one timer per call, not one per read -------------------------------------------

    def _on_timer(self) -> None:
        """The watchdog fired: expire the send or read in progress, or re-arm for a deadline that moved on."""
        self._timer = None
        reader, task, deadline = self._reader, self._sending, self._deadline
        if deadline is None or (reader is None and task is None):
            return  # nothing is waiting; the next read arms the timer again
        if deadline > self._timer_at:
            self._arm(deadline)  # the deadline moved on (idle) since the timer was set: wait for the new one
        elif task is not None:
            self._send_expired = True  # as asyncio.timeout does: cancel, then turn it into the expiry
            task.cancel()
        elif reader is not None:
            reader.set_exception(_Expired(self._expiry_class))

    def _arm(self, deadline: float) -> None:
        self._timer_at = deadline
        self._timer = self._loop.call_at(deadline, self._on_timer)

    def _watch(self, phase: float | None, phase_class: ErrorClass, total: float | None) -> None:
        """Point the watchdog at the earlier of the phase and total deadlines (``_Expired`` if it has passed)."""
        if total is not None and (phase is None or total <= phase):
            deadline: float | None = total
            self._expiry_class = "timeout_total"
        else:
            deadline = phase
            self._expiry_class = phase_class
        if deadline is not None:
            if self._loop.time() >= deadline:
                raise _Expired(self._expiry_class)
            if self._timer is None or self._timer_at > deadline:
                if self._timer is not None:
                    self._timer.cancel()
                self._arm(deadline)
        self._deadline = deadline

    async def _read(self, resp: Response, phase: float | None, phase_class: ErrorClass, total: float | None) -> bytes:
        """One read of the body, bounded by the phase deadline and the total deadline (loop time).

        Data already buffered is taken without waiting. Otherwise the read waits on the call's one
        watchdog timer (``loop.call_at``): it is re-armed only when the deadline moves earlier, and a
        timer that fires early for a deadline that moved later re-arms itself. On expiry it fails the
        waiting read with ``_Expired`` through the reader's ``set_exception`` (the response is then closed).
        A fresh ``asyncio.timeout_at()`` per read cost a Timeout object, a timer handle and a task
        cancellation path on every read; this costs a comparison.
        """
        try:
            data = resp.read_nowait()
            if data or resp.is_eof():
                return data
            self._watch(phase, phase_class, total)
            self._reader = resp
            try:
                return await resp.readany()
            finally:
                self._reader = None
        except OSError as exc:
            raise _Failed("cut", f"the upstream connection broke mid-response ({type(exc).__name__})") from None

    async def _run(self) -> AsyncGenerator[Event, None]:
        client, endpoint = self.client, self.client.endpoint
        limits = endpoint.timeouts
        pool = client.pool
        loop = pool.loop
        if loop is None or loop.is_closed():
            loop = pool.loop = asyncio.get_running_loop()
        self._loop = loop
        headers = self._request_headers()
        resp: Response | None = None
        clean = False
        self._wall = time.time()
        self._t0 = t0 = _perf()
        l0 = loop.time()

        def at(seconds: float | None) -> float | None:
            return None if seconds is None else l0 + seconds

        total_at = at(limits.total)
        if self.stream:
            headers_at = at(limits.headers)
        else:  # see Timeouts: a non-streamed answer's headers may come only with the whole body
            waits = [s for s in (limits.headers, limits.first_token) if s is not None]
            headers_at = at(max(waits) if len(waits) == 2 else None)
        try:
            # The send (pool, connect, request, headers) is bounded by the headers and total deadlines
            # through the watchdog: on expiry it cancels this task and the cancellation becomes _Expired,
            # exactly as asyncio.timeout_at() would (one timer for the whole call instead of one per phase).
            total_first = total_at is not None and (headers_at is None or total_at <= headers_at)
            deadline = total_at if total_first else headers_at
            cancelling = 0
            task: asyncio.Task[Any] | None = None
            if deadline is not None:
                task = asyncio.current_task(loop)  # with the loop: no getpid() system call
                assert task is not None
                cancelling = task.cancelling()
                self._expiry_class = "timeout_total" if total_first else "timeout_headers"
                self._deadline, self._sending = deadline, task
                self._arm(deadline)
            expired = False
            try:
                try:
                    body = self._payload
                    head = request_head("POST", client.target(self.path), pool.host_header, headers, len(body))
                    resp = await pool.post(head, body)
                finally:
                    self._sending = None
                    # Ours alone (no other cancel pending) if uncancel() brings it back to where it was.
                    expired = task is not None and self._send_expired and task.uncancel() <= cancelling
            except asyncio.CancelledError:
                if expired:
                    raise _Expired(self._expiry_class) from None
                raise
            except TimeoutError as exc:  # the pool's own connect timeout
                raise _Failed("connect", f"connect timed out ({type(exc).__name__})") from None
            except OSError as exc:
                raise _Failed("connect", f"{type(exc).__name__}: {exc}") from None
            # An UnsendableHeader (request_head refuses a header it cannot write) is raised to the caller as it
            # is: the request was never sent, so it is no failure of the upstream's (no error class, no result).
            client.in_flight += 1
            t_headers = _perf()
            self._status = status = resp.status
            yield Sent(t0)
            yield Headers(t_headers, status, resp.headers)

            if not 200 <= status < 300:
                result = await self._error_result(resp, total_at, loop)
                clean = True
                self.result = result
                yield result
                return

            first_at = at(limits.first_token)
            if not self.stream:
                chunks: list[bytes] = []
                size = 0
                # Usually one read: the body arrived with the headers and is taken without waiting.
                while data := await self._read(resp, _min(headers_at, first_at), "timeout_first_token", total_at):
                    chunks.append(data)
                    size += len(data)
                    if size > MAX_RESPONSE_BODY:  # a runaway upstream must not fill our memory
                        raise _Failed("malformed", f"the response body is larger than {MAX_RESPONSE_BODY} bytes")
                raw = b"".join(chunks)
                t_end = _perf()
                clean = True
                try:
                    parsed = decode_body(raw)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    raise _Failed("malformed", f"the response body is not valid JSON ({len(raw)} bytes)") from None
                if (
                    parsed.choices is None
                    and parsed.data is None
                    and parsed.output is None
                    and parsed.content is None
                    and parsed.input_tokens is None
                ):
                    # A 200 whose JSON is not an OpenAI answer (no "choices", no "data"): count it as
                    # malformed, with the start of the body as the example.
                    example = raw[:120].decode("utf-8", "replace")
                    raise _Failed("malformed", f"the response is JSON but not an OpenAI answer: {example}")
                self._first = self._answer = t_end
                if parsed.usage is not None:
                    self._prompt_tokens = parsed.usage.prompt
                    self._completion_tokens = parsed.usage.completion
                    self._reasoning_tokens = parsed.usage.reasoning
                    self._cached_tokens = parsed.usage.cached
                yield Body(t_end, raw)
                yield Done(t_end)
                self.result = self._finish(None, end=t_end)
                yield self.result
                return

            # The stream, inline (one generator level fewer between the socket and the relay).
            splitter = FrameSplitter()
            self._decoder = SSEDecoder(strict=True)
            self._drop_usage = not self.client_wants_usage
            idle = limits.idle
            read = self._read
            end: tuple[float, bytes] | None = None
            while end is None:
                if self.tap is not None:  # the caller relays the rest: measured reads go straight to it
                    end = await self._pump(resp, splitter, idle, total_at)
                    if end is not None:
                        break
                if self._first is None:
                    data = await read(resp, first_at, "timeout_first_token", total_at)
                else:
                    data = await read(resp, None if idle is None else loop.time() + idle, "timeout_idle", total_at)
                now = _perf()
                if not data:
                    raise _Failed("cut", "the stream ended without [DONE]")
                try:
                    frames = splitter.feed(data)
                except SSEProtocolError as exc:
                    raise _Failed("malformed", f"bad SSE stream: {exc.problem}") from None
                final = len(frames) - 1
                for i, raw in enumerate(frames):
                    code = self._frame(raw, now)
                    if code >= 0:  # the relay writes once per upstream read, at its last frame
                        yield Chunk(now, raw, code > 0, code, i == final)
                    elif code == _END:
                        end = now, raw
                        break
                    elif code == _ERROR:
                        yield Chunk(now, raw, False, 0, True)
                        raise _Failed("stream_error", "the upstream sent an error event mid-stream")
            now, raw = end
            yield Done(now, raw)
            self.result = self._finish(None, end=now)
            await self._drain(resp, total_at, loop)
            clean = True
            yield self.result
            return
        except _Expired as exc:
            self.result = self._finish(exc.error_class, detail=f"{exc.error_class} after {self._ms(_perf()):.0f} ms")
            yield self.result
        except _Failed as exc:
            self.result = self._finish(exc.error_class, detail=exc.detail)
            yield self.result
        except (asyncio.CancelledError, GeneratorExit, ConnectionError):  # ConnectionError: the tap's client left
            if self.result is None:
                self.result = self._finish("cancelled", detail="the caller stopped the call")
            raise
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if resp is not None:
                client.in_flight -= 1
                if clean:
                    resp.release()  # read to its end: the connection goes back to the pool
                else:
                    resp.close()  # mid-body: drop the connection, the upstream sees the client leave

    async def _drain(self, resp: Response, total_at: float | None, loop: Any) -> None:
        """Read to the end after [DONE] so the connection can be reused; a short, bounded wait."""
        idle = self.client.endpoint.timeouts.idle
        try:
            while resp.read_nowait():  # usually the end is already here: no timer needed
                pass
            if resp.is_eof():
                return
            async with asyncio.timeout_at(_min(total_at, loop.time() + min(idle or 1.0, 1.0))):
                while await resp.readany():
                    pass
        except OSError:  # TimeoutError included
            resp.close()  # not reusable; the call itself already succeeded

    async def _error_result(self, resp: Response, total_at: float | None, loop: Any) -> CallResult:
        """Read (a bounded prefix of) a non-2xx body and parse it, keys redacted."""
        status = resp.status
        idle = self.client.endpoint.timeouts.idle
        body = bytearray()
        try:
            deadline = _min(total_at, None if idle is None else loop.time() + idle)
            async with asyncio.timeout_at(deadline):
                while len(body) <= MAX_ERROR_BODY and (data := await resp.readany()):
                    body += data
        except OSError:  # TimeoutError included
            resp.close()  # keep what arrived; the status alone classifies the call
        if len(body) <= MAX_ERROR_BODY and not resp.at_eof():
            resp.close()
        # parse_error_body replaces every key in every field (and in the exception args).
        error = parse_error_body(status, bytes(body), redact=tuple(self.client.keys.secrets))
        return self._finish(
            _status_class(status, error),
            error=error,
            detail=f"HTTP {status}: {error.message}",
            retry_after_s=retry_after(resp.headers),
        )


def call(
    client: UpstreamClient,
    path: str,
    body: bytes | Mapping[str, Any],
    *,
    stream: bool,
    client_wants_usage: bool | None = None,
    request_id: str | None = None,
    headers: Mapping[str, str] | None = None,
    key_hash: int | None = None,
    dialect: Dialect = OPENAI,
) -> Call:
    """Prepare one measured call of ``POST {base_url}/{path}``; iterate the returned :class:`Call`.

    ``client_wants_usage=None`` reads it from the body's ``stream_options.include_usage``.
    ``headers`` are added to the request (e.g. a provider's own tracing header).
    ``key_hash``: a conversation's affinity key; the provider's API key is then ``KeyPool.pick(key_hash)``
    (the same account for the whole conversation) instead of the next in turn.
    ``dialect``: the protocol the endpoint speaks (upstream/dialect.py: OpenAI's, the Responses API's,
    Anthropic's); it is never read from ``path``.
    """
    return Call(
        client,
        path,
        body,
        stream=stream,
        client_wants_usage=client_wants_usage,
        request_id=request_id,
        headers=headers,
        key_hash=key_hash,
        dialect=dialect,
    )
