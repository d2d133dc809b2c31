"""OTLP ``ExportTraceServiceRequest`` bytes straight from :class:`~tailgate.telemetry.spans.SpanRecord` values.

The SDK's encoder (``encode_spans``) builds a generated protobuf message per span, per attribute and per value,
then serialises the tree: ~50-100 µs a span on the export thread, holding the GIL the event loop needs. Spans
here are plain data already, so :class:`SpanEncoder` writes the protobuf wire format itself (the messages of
``opentelemetry/proto/trace/v1/trace.proto``, ``common.proto``, ``resource.proto``; field numbers below) with
the keys' bytes and the resource and scope written once. The result is the request the SDK would have sent for
the same spans: tests/telemetry/test_otlp_wire.py decodes both with the official ``opentelemetry-proto``
messages and compares them, and the OTLP exporters (HTTP/protobuf and gRPC) send it as they send their own.

The SDK's choices this follows: ``flags`` has ``SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK`` and, for a remote
parent, ``SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK``; the status is always present (empty when unset); a
``tracestate`` is written as the SDK's ``TraceState`` parses it (invalid members dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from struct import Struct
from typing import Any, Final

from tailgate.telemetry.spans import SpanRecord

__all__ = ["SpanEncoder"]

_U64: Final = (1 << 64) - 1
_SMALL: Final = tuple(bytes((i,)) for i in range(128))
_DOUBLE = Struct("<d").pack
_FIXED64 = Struct("<Q").pack
_FIXED32 = Struct("<I").pack

_KIND: Final = {"internal": b"\x30\x01", "server": b"\x30\x02", "client": b"\x30\x03"}
"""``Span.kind`` (field 6, varint): SPAN_KIND_INTERNAL 1, SERVER 2, CLIENT 3."""
_FLAGS_LOCAL: Final = b"\x85\x01" + _FIXED32(0x100)
"""``Span.flags`` (field 16, fixed32): the parent is known to be local (or there is none)."""
_FLAGS_REMOTE: Final = b"\x85\x01" + _FIXED32(0x300)
_STATUS_UNSET: Final = b"\x7a\x00"
"""``Span.status`` (field 15), an empty ``Status``: code STATUS_CODE_UNSET."""


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _any_value(v: Any) -> bytes:
    """An ``AnyValue`` message's body: string 1, bool 2, int 3 (int64), double 4, array 5 (``ArrayValue``: repeated
    ``AnyValue`` values 1). A bool is a bool before it is an int, as in the SDK's encoder."""
    t = type(v)
    if t is str:
        b: bytes = v.encode()
        return b"\x0a" + _varint(len(b)) + b
    if t is bool:
        return b"\x10\x01" if v else b"\x10\x00"
    if t is int:
        return b"\x18" + _varint(v & _U64)
    if t is float:
        return b"\x21" + _DOUBLE(v)
    if isinstance(v, bool):
        return b"\x10\x01" if v else b"\x10\x00"
    if isinstance(v, str):
        return _any_value(str(v))
    if isinstance(v, int):
        return _any_value(int(v))
    if isinstance(v, float):
        return _any_value(float(v))
    if isinstance(v, (tuple, list)):
        return _len(b"\x2a", b"".join(_len(b"\x0a", _any_value(x)) for x in v))
    raise TypeError(f"attribute value of type {t.__name__} cannot be exported")


@lru_cache(maxsize=256)
def _key(key: str) -> bytes:
    """A ``KeyValue``'s key field (1)."""
    return _len(b"\x0a", key.encode())


def _attributes(tag: bytes, attributes: Mapping[str, Any]) -> list[bytes]:
    """Each attribute as a ``KeyValue`` (key 1, value 2) in the field ``tag``."""
    out: list[bytes] = []
    for k, v in attributes.items():
        out.append(_field(tag, k, v))
    return out


def _field(tag: bytes, key: str, value: Any) -> bytes:
    encoded = _any_value(value)
    kv = _key(key) + b"\x12" + _varint(len(encoded)) + encoded
    return tag + _varint(len(kv)) + kv


_CACHE_MAX: Final = 4096
_CACHED: Final = frozenset({str, int, bool, tuple})
"""Value types whose fields are cached (hashable; a float seldom repeats)."""


class SpanEncoder:
    """Spans of one resource and one instrumentation scope to ``ExportTraceServiceRequest`` bytes."""

    def __init__(
        self,
        resource: Mapping[str, Any],
        scope_name: str,
        scope_version: str | None,
        *,
        resource_schema_url: str = "",
        scope_schema_url: str = "",
        trace_state: Callable[[str], str] = lambda header: header,
        unique_keys: Iterable[str] = (),
    ) -> None:
        """``trace_state``: a ``tracestate`` header as the span's ``trace_state`` field (the SDK's parse).
        ``unique_keys``: attributes whose values seldom repeat (ids), never cached."""
        # Resource: attributes 1 (KeyValue). InstrumentationScope: name 1, version 2.
        res = b"".join(_attributes(b"\x0a", resource))
        scope = _len(b"\x0a", scope_name.encode()) if scope_name else b""
        if scope_version:
            scope += _len(b"\x12", scope_version.encode())
        # ResourceSpans: resource 1, scope_spans 2, schema_url 3. ScopeSpans: scope 1, spans 2, schema_url 3.
        self._resource = _len(b"\x0a", res)
        self._resource_tail = _len(b"\x1a", resource_schema_url.encode()) if resource_schema_url else b""
        self._scope = _len(b"\x0a", scope)
        self._scope_tail = _len(b"\x1a", scope_schema_url.encode()) if scope_schema_url else b""
        self._trace_state = lru_cache(maxsize=64)(trace_state)
        self._unique = frozenset(unique_keys)
        self._fields: dict[tuple[str, Any, type], bytes] = {}
        """A span attribute's whole field (tag, length, ``KeyValue``) by key, value and the value's type (True and
        1 are equal keys of a dict, not equal values on the wire): most repeat from span to span (the operation,
        model, provider, route, outcome, token counts). Floats, other types and ``unique_keys`` are encoded each
        time; the cache is emptied when it reaches its bound."""

    def _span_attributes(self, attributes: Mapping[str, Any]) -> list[bytes]:
        fields, unique = self._fields, self._unique
        out: list[bytes] = []
        for k, v in attributes.items():
            t = type(v)
            if t not in _CACHED or k in unique:
                out.append(_field(b"\x4a", k, v))
                continue
            ck = (k, v, t)
            got = fields.get(ck)
            if got is None:
                got = _field(b"\x4a", k, v)
                if len(fields) >= _CACHE_MAX:
                    fields.clear()
                fields[ck] = got
            out.append(got)
        return out

    def span(self, s: SpanRecord) -> bytes:
        """One ``Span`` message: trace_id 1, span_id 2, trace_state 3, parent_span_id 4, name 5, kind 6, start 7,
        end 8 (fixed64), attributes 9, status 15, flags 16 (fixed32)."""
        name = s.name.encode()
        parts = [
            b"\x0a\x10",
            s.trace_id.to_bytes(16, "big"),
            b"\x12\x08",
            s.span_id.to_bytes(8, "big"),
        ]
        if s.tracestate:
            state = self._trace_state(s.tracestate).encode()
            if state:
                parts.append(_len(b"\x1a", state))
        if s.parent_id is not None:
            parts.append(b"\x22\x08")
            parts.append(s.parent_id.to_bytes(8, "big"))
        parts += (
            b"\x2a",
            _varint(len(name)),
            name,
            _KIND[s.kind],
            b"\x39",
            _FIXED64(s.start_ns),
            b"\x41",
            _FIXED64(s.end_ns),
        )
        parts += self._span_attributes(s.attributes)
        if s.error is None:
            parts.append(_STATUS_UNSET)
        else:  # Status: message 2, code 3 (STATUS_CODE_ERROR 2)
            message = s.error.encode()
            parts.append(_len(b"\x7a", (_len(b"\x12", message) if message else b"") + b"\x18\x02"))
        parts.append(_FLAGS_REMOTE if s.remote_parent and s.parent_id is not None else _FLAGS_LOCAL)
        return b"".join(parts)

    def request(self, spans: Iterable[SpanRecord]) -> bytes:
        """The ``ExportTraceServiceRequest`` (resource_spans 1) of these spans."""
        body: list[bytes] = [self._scope]
        for s in spans:
            span = self.span(s)
            body.append(b"\x12")
            body.append(_varint(len(span)))
            body.append(span)
        body.append(self._scope_tail)
        scope_spans = b"".join(body)
        resource_spans = self._resource + _len(b"\x12", scope_spans) + self._resource_tail
        return _len(b"\x0a", resource_spans)
