"""What one upstream call yields: timestamped events, then a :class:`CallResult`.

Timestamps ``t`` are ``time.perf_counter()`` seconds (monotonic); only ``started_at`` is wall time.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from multidict import CIMultiDictProxy

from tailgate.wire.errors import WireError

__all__ = ["Body", "CallResult", "Chunk", "Done", "ErrorClass", "Event", "Headers", "Sent"]

ErrorClass = Literal[
    "connect",  # could not connect, or the connection dropped before any response header
    "timeout_headers",
    "timeout_first_token",
    "timeout_idle",
    "timeout_total",
    "rate_limited",  # 429 that a retry later can fix
    "insufficient_quota",  # 429 that it cannot
    "http_4xx",
    "http_5xx",
    "http_other",  # a non-2xx status outside 400-599 (e.g. a redirect)
    "malformed",  # a frame or body that is not valid SSE / JSON
    "stream_error",  # the upstream sent an SSE error event mid-stream
    "cut",  # the stream ended (or the connection dropped) without [DONE]
    "cancelled",  # the caller stopped consuming the call
]


class Sent(msgspec.Struct, frozen=True, gc=False):
    """The request was handed to the connection pool at ``t`` (the origin of TTFT and E2E)."""

    t: float


class Headers(msgspec.Struct, frozen=True):
    """Response headers arrived at ``t``."""

    t: float
    status: int
    headers: CIMultiDictProxy[str]


class Chunk(msgspec.Struct, frozen=True, gc=False):
    """One SSE frame, ``raw`` exactly as the upstream sent it (forward it untouched).

    ``token_count`` is the number of choices in the frame carrying a content, reasoning, refusal or
    tool-call delta (or completion text); ``has_token`` is ``token_count > 0``. Keep-alive comments
    and the role-only opening chunk are frames with no token.
    """

    t: float
    raw: bytes
    has_token: bool
    token_count: int
    last: bool = True
    """The last frame of one upstream read: a relay can gather the frames of a read and write once."""


class Body(msgspec.Struct, frozen=True, gc=False):
    """The complete body of a successful non-streamed call, exactly as the upstream sent it."""

    t: float
    raw: bytes


class Done(msgspec.Struct, frozen=True, gc=False):
    """The call completed: ``[DONE]`` (``raw`` is that frame) or, non-streamed, the body (``raw`` empty)."""

    t: float
    raw: bytes = b""


class CallResult(msgspec.Struct, frozen=True):
    """How one call went. Times are in ms from the send; ``started_at`` is wall-clock Unix seconds.

    ``output_tokens`` is the upstream's ``usage.completion_tokens``; when the upstream reported none it
    is the number of token-carrying chunks and ``tokens_estimated`` is True. ``error`` is the upstream's
    parsed error body (non-2xx) with the API keys redacted; ``detail`` a short human-readable reason
    for any failure. Neither ever contains an API key.
    """

    status: int | None
    error_class: ErrorClass | None
    started_at: float
    stream: bool
    request_id: str | None = None
    key_index: int | None = None
    error: WireError | None = None
    detail: str | None = None
    retry_after_s: float | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = msgspec.field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int = 0
    tokens_estimated: bool = True
    token_chunks: int = 0
    ttft_answer_ms: float | None = None
    """Time to the first *answer* token (content, refusal or tool call; not reasoning). Equals ``ttft_ms``
    when the answer came without thinking; None when no answer token came (all thinking, or a failure)."""
    reasoning_tokens: int | None = None
    """Of ``output_tokens``, those spent thinking: the upstream's ``completion_tokens_details.reasoning_tokens``,
    else the reasoning-only chunks counted before the answer (None when neither is known / none came)."""
    cached_tokens: int | None = None
    """Of ``prompt_tokens``, those the provider served from its prompt cache: ``usage.prompt_tokens_details.
    cached_tokens`` (OpenAI, Bailian, vLLM; ``input_tokens_details`` on the Responses API) or DeepSeek's
    ``usage.prompt_cache_hit_tokens``. None when the provider did not say (no usage, or no cache fields)."""

    @property
    def ok(self) -> bool:
        """A success as docs/metrics.md defines one for reliability: 2xx, complete, well-formed, in time."""
        return self.error_class is None

    @property
    def tpot_ms(self) -> float | None:
        """(E2E − TTFT) / (output_tokens − 1), or None with fewer than two tokens."""
        if self.ttft_ms is None or self.e2e_ms is None or self.output_tokens < 2:
            return None
        return (self.e2e_ms - self.ttft_ms) / (self.output_tokens - 1)


Event = Sent | Headers | Chunk | Body | Done | CallResult
