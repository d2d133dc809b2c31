"""Spans as plain data, W3C trace context, and ids: what a face builds before anything is exported.

A face (the gateway, the load tester) records what happened as it always did and, once a request has ended,
describes it as :class:`SpanRecord` values — ids, parent, kind, times, attributes — that ``export.Exporter.emit``
hands to the OpenTelemetry SDK. Nothing here imports the SDK, so a face with telemetry off never loads it.

W3C trace context (https://www.w3.org/TR/trace-context/): :func:`parse_traceparent` reads a caller's
``traceparent`` (version 00 and later versions' first four fields; an all-zero id, a bad length or a non-hex digit
is ignored, as the recommendation says: the request starts a trace of its own), :func:`traceparent` writes one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final, Literal

__all__ = [
    "AttrValue",
    "Ids",
    "SpanRecord",
    "TraceParent",
    "parse_traceparent",
    "traceparent",
]

AttrValue = str | bool | int | float | tuple[str, ...]
Kind = Literal["server", "client", "internal"]

_HEX: Final = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A caller's trace context: the trace, the caller's span (our server span's parent), whether it samples."""

    trace_id: int
    span_id: int
    sampled: bool
    tracestate: str | None = None


def _hex(text: str, width: int) -> int | None:
    if len(text) != width or not set(text) <= _HEX:
        return None
    value = int(text, 16)
    return value or None


def parse_traceparent(value: str | None, tracestate: str | None = None) -> TraceParent | None:
    """The ``traceparent`` header's context, or None when absent or invalid (never an error: the request goes on
    and starts its own trace)."""
    if not value:
        return None
    parts = value.strip().lower().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff" or not set(parts[0]) <= _HEX:
        return None
    if parts[0] == "00" and len(parts) != 4:
        return None
    trace_id, span_id = _hex(parts[1], 32), _hex(parts[2], 16)
    if trace_id is None or span_id is None or len(parts[3]) != 2 or not set(parts[3]) <= _HEX:
        return None
    return TraceParent(trace_id, span_id, bool(int(parts[3], 16) & 1), tracestate or None)


def traceparent(trace_id: int, span_id: int, sampled: bool = True) -> str:
    """A version-00 ``traceparent`` header value."""
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


class Ids:
    """Random trace and span ids (W3C: 128 and 64 bits, never zero), from a generator seeded once per process:
    ids must be unique, not secret, and a system call per id would cost more than the span."""

    __slots__ = ("_bits",)

    def __init__(self, seed: int | None = None) -> None:
        rng = random.Random(seed)  # seeded from os.urandom when None
        self._bits = rng.getrandbits

    def trace_id(self) -> int:
        return self._bits(128) or 1

    def span_id(self) -> int:
        return self._bits(64) or 1


@dataclass(slots=True)
class SpanRecord:
    """One finished span as plain data. Times are Unix epoch nanoseconds."""

    name: str
    kind: Kind
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue] = field(default_factory=dict)
    error: str | None = None
    """The span's status: None is unset (no error), else an error with this description."""
    remote_parent: bool = False
    """The parent is the caller's span (from its ``traceparent``), not one of ours."""
    tracestate: str | None = None
