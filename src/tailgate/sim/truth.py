"""Ground truth of recent requests, as the simulator itself timed them.

Times are measured inside the simulator from the moment the request was read (handler start) on the
event loop's monotonic clock. For streams, ``ttft_ms`` is when the first token-carrying chunk was
written to the socket and ``itl_ms`` holds every gap between token-carrying writes; for non-stream
requests ``ttft_ms`` is when the engine decoded the first token and ``e2e_ms`` is when the body was
handed to the socket. Served at ``GET /sim/truth``; optionally appended to a JSONL file.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import IO, Any

import msgspec


class TruthRecord(msgspec.Struct):
    """One request as the simulator timed it. Every row has every field; ``null`` where it does not apply
    (a 429 was never queued, an error has no first token)."""

    id: str
    """The request's real id, given at arrival (the response body's ``id`` when there is one)."""
    received_at: float
    """Wall-clock time (Unix seconds) when the request was read."""
    status: int
    stream: bool
    queue_ms: float | None = None
    ttft_ms: float | None = None
    """First token of any kind (reasoning, answer or tool call)."""
    ttft_answer_ms: float | None = None
    """First answer token (content or tool call, not reasoning); equals ``ttft_ms`` without thinking."""
    e2e_ms: float | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    """Of ``output_tokens``, how many were thinking (``usage.completion_tokens_details.reasoning_tokens``)."""
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    """Of ``prompt_tokens``, how many the provider's prefix cache held (``null`` with ``prefix_cache: false``
    or when the request never reached the engine)."""
    prefill_ms: float | None = None
    """The engine model's prefill of this request: its uncached prompt tokens at ``prefill_tps`` (scaled)."""
    finish_reason: str | None = None
    itl_ms: list[float] | None = None
    fault: str | None = None
    """Which injected fault shaped this response, if any (``error_rate``, ``disconnect`` …)."""
    degraded: str | None = None
    """Which answer-quality degradation was served, named as the quality signal that should catch it:
    ``canary_wrong`` (a wrong answer to a canary question, the preset's inaccuracy or the ``accuracy``
    fault), ``tool_args_invalid_json`` / ``tool_args_schema_mismatch`` / ``tool_unknown_name``
    (``tool_call_break_rate``), ``content_filtered`` (``content_filter_rate``), ``empty_answer``
    (``empty_answer_rate``); ``null`` for an answer served as the model would."""
    api_key_tail: str | None = None
    client_request_id: str | None = None
    """The request's ``x-request-id`` header (a gateway sends its own; its active probes ``probe-…``)."""
    api: str = "openai"
    """The protocol the request spoke: ``openai`` (chat, completions, responses, embeddings) or
    ``anthropic`` (``/v1/messages``)."""
    batch_id: str | None = None
    """The batch this row is a line of (``null`` for a live request)."""
    custom_id: str | None = None
    """The line's ``custom_id`` in its batch."""
    cost: float | None = None
    """What the provider bills a batch line: its tokens at the preset's price × ``batch_price_ratio``, in
    ``price_currency`` (0 for a line that failed; ``null`` on live rows)."""


_encoder = msgspec.json.Encoder()


class TruthLog:
    """A bounded ring of :class:`TruthRecord` plus an optional JSONL sink."""

    def __init__(self, size: int = 5000, jsonl: str | Path | None = None) -> None:
        self._ring: deque[TruthRecord] = deque(maxlen=size)
        self._file: IO[bytes] | None = Path(jsonl).open("ab") if jsonl is not None else None  # noqa: SIM115
        self.total = 0

    def add(self, record: TruthRecord) -> None:
        self._ring.append(record)
        self.total += 1
        if self._file is not None:
            self._file.write(_encoder.encode(record) + b"\n")

    def records(self, limit: int | None = None) -> list[TruthRecord]:
        items = list(self._ring)
        return items[-limit:] if limit else items

    def as_json(self, limit: int | None = None) -> bytes:
        return _encoder.encode({"requests": self.records(limit), "total": self.total})

    def clear(self) -> None:
        self._ring.clear()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def wall_now() -> float:
    return time.time()


def as_dicts(raw: bytes) -> list[dict[str, Any]]:
    """Decode a ``/sim/truth`` body into plain dicts (handy in tests and benchmarks)."""
    data: dict[str, Any] = msgspec.json.decode(raw)
    requests: list[dict[str, Any]] = data["requests"]
    return requests
