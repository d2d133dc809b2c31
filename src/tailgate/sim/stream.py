"""Writing a simulated stream's token chunks straight from the engine's step.

Waking one handler coroutine per token per stream made the event loop, not the engine, the limit at
a few hundred concurrent streams. Once the response headers are on the wire, the engine instead calls
:meth:`SSEWriter.on_token` synchronously at the end of each step, which frames the chunk (HTTP/1.1
chunked encoding, RFC 9112 §7.1) and hands it to the socket. The handler wakes only at the end.
"""

from __future__ import annotations

import asyncio
import time

from tailgate.sim.engine import Sequence
from tailgate.sim.presets import EngineParams
from tailgate.sim.usage import usage as sim_usage
from tailgate.wire.types import FunctionCall, ToolCall, chat_chunk_bytes, completion_chunk_bytes

_NO_CACHE = EngineParams(prefix_cache=False)


class SSEWriter:
    """Frames and writes the token chunks of one stream; records when each token left."""

    __slots__ = (
        "answer_at",
        "bad_at",
        "chat",
        "continuous_usage",
        "created",
        "cut",
        "cut_reached",
        "first_at",
        "gaps",
        "last_at",
        "model",
        "params",
        "sent",
        "transport",
    )

    def __init__(
        self,
        transport: asyncio.BaseTransport | None,
        *,
        chat: bool,
        created: int,
        model: str,
        cut: int | None,
        bad_at: int | None,
        continuous_usage: bool = False,
        params: EngineParams | None = None,
    ) -> None:
        self.transport = transport
        self.chat = chat
        self.created = created
        self.model = model
        self.cut = cut
        self.bad_at = bad_at
        self.cut_reached = cut == 0  # a cut at 0 tokens is reached before anything is sent
        self.sent = 0
        self.continuous_usage = continuous_usage
        """vLLM's ``continuous_usage_stats``: every chunk carries the running usage."""
        self.params = params or _NO_CACHE
        """The provider's shape: which usage fields a chunk's running usage carries."""
        self.first_at = 0.0
        self.answer_at = 0.0
        """When the first answer (non-reasoning) token was written; 0.0 while none was."""
        self.last_at = 0.0
        self.gaps: list[float] = []
        """Every gap between token-carrying writes, in ms (ground truth ITL)."""

    def _frame(self, seq: Sequence, i: int) -> bytes:
        token = seq.out[i]
        usage = None
        if self.continuous_usage:
            usage = sim_usage(self.params, seq, i + 1)
        if self.chat and i >= seq.reasoning and seq.tool_call is None:  # the common case first: content
            chunk = chat_chunk_bytes(seq.id, self.created, self.model, token, usage=usage)
        elif not self.chat:
            chunk = completion_chunk_bytes(seq.id, self.created, self.model, token, usage=usage)
        elif i < seq.reasoning:
            chunk = chat_chunk_bytes(seq.id, self.created, self.model, None, reasoning_content=token, usage=usage)
        elif seq.tool_call is not None:
            # The first fragment names the call; later ones carry only argument text (OpenAI's shape).
            if i == seq.reasoning:
                call_id, name = seq.tool_call
                call = ToolCall(index=0, id=call_id, type="function", function=FunctionCall(name=name, arguments=token))
            else:
                call = ToolCall(index=0, function=FunctionCall(arguments=token))
            chunk = chat_chunk_bytes(seq.id, self.created, self.model, None, tool_calls=[call], usage=usage)
        frame = b"data: " + chunk + b"\n\n"
        if i == self.bad_at:  # the malformed-chunk fault: a JSON object cut off mid-string
            frame = b'data: {"id": "' + seq.id.encode() + b'", "choices": [{"delta": {"cont\n\n' + frame
        return frame

    def flush(self, seq: Sequence) -> None:
        """Write every token decoded but not yet sent (all in one socket write)."""
        end = len(seq.out) if self.cut is None else min(len(seq.out), self.cut)
        if end <= self.sent or self.transport is None or self.transport.is_closing():
            return
        sent = self.sent
        if self.chat and sent >= seq.reasoning and seq.tool_call is None and not self.continuous_usage:
            # The common case, inline: answer content chunks (one per engine step at low load).
            if end - sent == 1 and self.bad_at is None:
                data = b"data: " + chat_chunk_bytes(seq.id, self.created, self.model, seq.out[sent]) + b"\n\n"
            else:
                data = b"".join(self._frame(seq, i) for i in range(sent, end))
        else:
            data = b"".join(self._frame(seq, i) for i in range(sent, end))
        self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))  # type: ignore[attr-defined]
        now = time.perf_counter()
        if self.sent <= seq.reasoning < end:
            self.answer_at = now
        if self.sent == 0:
            self.first_at = now
        else:
            self.gaps.append(round((now - self.last_at) * 1000.0, 3))
        self.gaps.extend([0.0] * (end - self.sent - 1))  # tokens that left in the same write
        self.last_at = now
        self.sent = end
        if self.cut is not None and end >= self.cut and not self.cut_reached:
            self.cut_reached = True
            seq._wake()  # the handler drops the connection (disconnect_after_tokens fault)

    def on_token(self, seq: Sequence) -> None:
        """Engine callback: one more token was appended to ``seq.out``."""
        self.flush(seq)
