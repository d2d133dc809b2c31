"""Cheap per-frame work: split an SSE byte stream into exact frames and read what we measure.

Frames are split here (not by :class:`~tailgate.wire.sse.SSEDecoder`) because the gateway must forward
each frame's bytes untouched; the decoder then parses each complete frame's fields.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from tailgate.wire.sse import DEFAULT_MAX_EVENT_SIZE, SSEProtocolError

# Two line terminators in a row end an event. CRLF is tried before a lone CR so it counts as one.
_BOUNDARY = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")


class FrameSplitter:
    """Incremental: ``feed()`` returns the complete frames (terminating blank line included)."""

    __slots__ = ("_buf", "max_frame")

    def __init__(self, max_frame: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        self._buf = b""
        self.max_frame = max_frame

    @property
    def pending(self) -> bytes:
        """Bytes of an unfinished frame."""
        return self._buf

    def feed(self, data: bytes) -> list[bytes]:
        if not self._buf and len(data) > 2 and data.find(b"\n\n") == len(data) - 2 and b"\r" not in data:
            return [data]  # the usual read of a stream: exactly one whole LF-only frame
        buf = self._buf + data if self._buf else data
        frames: list[bytes] = []
        pos = 0
        if b"\r" not in buf:  # the common case: LF-only, one find per frame
            find = buf.find
            while (end := find(b"\n\n", pos)) >= 0:
                frames.append(buf[pos : end + 2])
                pos = end + 2
        else:
            for match in _BOUNDARY.finditer(buf):
                if match.end() == len(buf) and buf.endswith(b"\r"):
                    break  # this CR may be half of a CRLF that the next read completes
                frames.append(buf[pos : match.end()])
                pos = match.end()
        self._buf = buf[pos:]
        if len(self._buf) > self.max_frame:
            raise SSEProtocolError(f"event larger than {self.max_frame} bytes", offset=0, line=0)
        return frames


class _Delta(msgspec.Struct):
    content: Any = None
    reasoning_content: Any = None
    reasoning: Any = None  # OpenRouter / some vLLM builds name it `reasoning`
    refusal: Any = None
    tool_calls: Any = None
    function_call: Any = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    text: Any = None  # /v1/completions


class _Details(msgspec.Struct):
    reasoning_tokens: int | None = None


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    completion_tokens_details: _Details | None = None
    prompt_tokens_details: _PromptDetails | None = None
    prompt_cache_hit_tokens: int | None = None
    """DeepSeek's name for the cached part of ``prompt_tokens`` (its context cache)."""
    # the Responses API names them differently
    input_tokens: int | None = None
    output_tokens: int | None = None
    output_tokens_details: _Details | None = None
    input_tokens_details: _PromptDetails | None = None
    # Anthropic's Messages API: ``input_tokens`` excludes the cache's reads and writes, named apart
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    @property
    def prompt(self) -> int | None:
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        if self.input_tokens is not None and (
            self.cache_read_input_tokens is not None or self.cache_creation_input_tokens is not None
        ):  # Anthropic's three parts add up to the prompt
            return self.input_tokens + (self.cache_read_input_tokens or 0) + (self.cache_creation_input_tokens or 0)
        return self.input_tokens

    @property
    def completion(self) -> int | None:
        return self.completion_tokens if self.completion_tokens is not None else self.output_tokens

    @property
    def reasoning(self) -> int | None:
        details = self.completion_tokens_details or self.output_tokens_details
        return details.reasoning_tokens if details is not None else None

    @property
    def cached(self) -> int | None:
        """Cached prompt tokens in either shape: OpenAI's ``prompt_tokens_details.cached_tokens`` (Responses:
        ``input_tokens_details``) or DeepSeek's ``prompt_cache_hit_tokens``; None when the upstream said
        neither. Where both are present the larger wins: a placeholder 0 beside the other name does not hide
        a real hit (both name the same tokens, so they agree whenever both are real)."""
        details = self.prompt_tokens_details or self.input_tokens_details
        openai = details.cached_tokens if details is not None else None
        deepseek = self.prompt_cache_hit_tokens
        if openai is None and deepseek is None:
            return self.cache_read_input_tokens  # Anthropic's
        if openai is None:
            return deepseek
        return openai if deepseek is None else max(openai, deepseek)


class _ResponseObject(msgspec.Struct):
    usage: _Usage | None = None
    """Also ``message_start``'s ``message`` (Anthropic): its usage holds the input tokens."""


class StreamFrame(msgspec.Struct):
    """The few fields of a stream chunk that measurement needs; the rest is skipped by msgspec."""

    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None


class EventFrame(msgspec.Struct):
    """A Responses API stream event (decoded only for frames without ``choices``, off the chat hot path)."""

    type: str | None = None
    """``response.output_text.delta``, ``response.completed`` …"""
    response: _ResponseObject | None = None
    """The response object of ``response.completed`` (its usage)."""
    message: _ResponseObject | None = None
    """Anthropic's ``message_start``: the message with its usage so far (input tokens)."""
    delta: Any = None
    """Anthropic's ``content_block_delta`` delta (an object with a ``type``); the Responses API's text."""
    usage: _Usage | None = None
    """Anthropic's ``message_delta`` usage (output tokens, sometimes input)."""


class _Message(msgspec.Struct):
    content: Any = None


class _BodyChoice(msgspec.Struct):
    message: _Message | None = None
    text: Any = None


class BodyFrame(msgspec.Struct):
    """The fields of a non-streamed response that measurement needs."""

    choices: list[_BodyChoice] | None = None
    data: list[Any] | None = None
    """Embeddings answer with ``data`` instead of ``choices``."""
    output: list[Any] | None = None
    """The Responses API answers with ``output``."""
    content: list[Any] | None = None
    """Anthropic's Messages API answers with a message's ``content`` blocks."""
    input_tokens: int | None = None
    """Anthropic's ``/v1/messages/count_tokens`` answers with only this."""
    usage: _Usage | None = None


decode_frame = msgspec.json.Decoder(StreamFrame).decode
decode_event = msgspec.json.Decoder(EventFrame).decode
decode_body = msgspec.json.Decoder(BodyFrame).decode


def token_count(frame: StreamFrame) -> int:
    """Choices of this chunk that carry output (content, reasoning, refusal, tool call or text)."""
    if not frame.choices:
        return 0
    n = 0
    for choice in frame.choices:
        d = choice.delta
        if choice.text or (
            d is not None
            and (d.content or d.reasoning_content or d.reasoning or d.refusal or d.tool_calls or d.function_call)
        ):
            n += 1
    return n


def has_answer(frame: StreamFrame) -> bool:
    """Does this token-carrying chunk carry answer output (anything but reasoning)?"""
    for choice in frame.choices or ():
        d = choice.delta
        if choice.text or (d is not None and (d.content or d.refusal or d.tool_calls or d.function_call)):
            return True
    return False


# ---- Retry-After -------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(text: str) -> float | None:
    """OpenAI's reset format (``6m0s``, ``250ms``, ``1.5s``) or bare seconds."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def retry_after(headers: Any) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, ``Retry-After`` or ``x-ratelimit-reset-*``.

    ``retry-after-ms`` is OpenAI's precise form and wins; ``Retry-After`` may also be an HTTP date
    (RFC 9110 §10.2.3), which is ignored here because a provider's clock is not ours.
    """
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    if (ra := headers.get("retry-after")) is not None:
        try:
            return max(0.0, float(ra))
        except ValueError:
            pass
    resets = [
        d
        for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
        if (v := headers.get(name)) is not None and (d := _duration(v)) is not None
    ]
    return max(resets) if resets else None
