"""Server-Sent Events framing: an encoder and an incremental, bounded decoder. No I/O.

Parsing follows the WHATWG algorithm,
https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation
with one addition: ``strict`` mode (the default) refuses what the spec says to ignore, because for an
OpenAI-compatible upstream an unknown field, a stray line or invalid UTF-8 means the stream is broken,
and a measurement that silently skips it would count a broken call as a success.
"""

from __future__ import annotations

import json
import re

import msgspec

__all__ = [
    "DEFAULT_MAX_EVENT_SIZE",
    "DONE_FRAME",
    "KEEPALIVE_FRAME",
    "SSEDecoder",
    "SSEEvent",
    "SSEProtocolError",
    "content_text",
    "encode_event",
]

DONE_FRAME = b"data: [DONE]\n\n"
KEEPALIVE_FRAME = b": keep-alive\n\n"
DEFAULT_MAX_EVENT_SIZE = 1 << 20

_BOM = b"\xef\xbb\xbf"
_EOL = re.compile(rb"\r\n|\r|\n")  # the spec's three line endings; CRLF first so it counts as one
_FIELDS = frozenset((b"data", b"event", b"id", b"retry"))
_LF, _COLON, _SPACE = 0x0A, 0x3A, 0x20


class SSEProtocolError(ValueError):
    """A malformed event stream; the message gives the byte offset and line number in the stream."""

    def __init__(self, problem: str, *, offset: int, line: int) -> None:
        super().__init__(f"{problem} at byte {offset}, line {line}")
        self.problem = problem
        self.offset = offset
        self.line = line


class SSEEvent(msgspec.Struct, frozen=True, gc=False):
    """One dispatched event.

    ``data`` is text (the spec defines the stream as UTF-8 text, and the openai SDK hands out str);
    decoding happens in the decoder so that invalid UTF-8 is reported with its exact stream offset.
    ``event`` is None for the default ``message`` type. ``id`` is the last event ID, which the spec
    carries over from earlier events; ``retry`` is set only on the event whose block carried it.
    """

    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None

    @property
    def is_done(self) -> bool:
        """True for OpenAI's ``data: [DONE]`` terminator (prefix match, as the openai SDK does)."""
        return self.data.startswith("[DONE]")


def encode_event(
    data: bytes | str,
    *,
    event: str | None = None,
    id: str | None = None,  # shadows the builtin: the SSE field is called `id`
    retry: int | None = None,
) -> bytes:
    """Frame one event. Multi-line data becomes one ``data:`` line per line (CR, LF or CRLF split)."""
    raw = data.encode() if isinstance(data, str) else data
    if b"\n" in raw or b"\r" in raw:
        body = b"".join(b"data: " + line + b"\n" for line in _EOL.split(raw))
    else:
        body = b"data: " + raw + b"\n"
    head = b""
    if event is not None:
        head += b"event: " + _single_line("event", event) + b"\n"
    if id is not None:
        if "\0" in id:
            raise ValueError("SSE id must not contain NUL: the spec makes receivers ignore it")
        head += b"id: " + _single_line("id", id) + b"\n"
    if retry is not None:
        if retry < 0:
            raise ValueError("SSE retry must be a non-negative integer")
        head += b"retry: %d\n" % retry
    return head + body + b"\n"


def _single_line(name: str, value: str) -> bytes:
    if "\n" in value or "\r" in value:
        raise ValueError(f"SSE {name} must be a single line: {value!r}")
    return value.encode()


class SSEDecoder:
    """Incremental decoder: ``feed()`` bytes as they arrive, ``close()`` at end of stream.

    Reads may split the stream anywhere: inside a UTF-8 sequence, between CR and LF, inside the BOM.
    Comments (``: keep-alive``) and blank lines between events dispatch nothing. An event (pending
    bytes plus the lines already read for it) larger than ``max_event_size`` raises, bounding memory.

    ``strict=True`` raises ``SSEProtocolError`` for an unknown field name (``dtaa:``), a line without a
    colon that is not a field name, invalid UTF-8 in a field, and, at ``close()``, a stream that ended
    inside an event. ``strict=False`` is the spec: unknown lines are ignored, invalid UTF-8 becomes
    U+FFFD, and an unfinished event at the end is discarded. Comments are skipped without decoding.
    """

    def __init__(self, *, strict: bool = True, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        self.strict = strict
        self.max_event_size = max_event_size
        self._reset_stream()

    def _reset_stream(self) -> None:
        self.last_event_id: str | None = None  # the spec's "last event ID buffer"; survives events
        self.retry: int | None = None  # the reconnection time last announced by the stream
        self._buf = bytearray()  # an incomplete line; never holds CR or LF
        self._offset = 0  # stream offset of _buf[0]
        self._line = 0  # complete lines consumed
        self._at_start = True  # a BOM may still come
        self._skip_lf = False  # the last line ended in CR: an LF next is that CRLF's second half
        self._reset_event()

    def _reset_event(self) -> None:
        self._data: list[str] = []
        self._event: str | None = None
        self._event_retry: int | None = None
        self._event_bytes = 0  # bytes of this event's lines so far; 0 means no event in progress
        self._event_start = 0  # stream offset and line number of the event's first field line
        self._event_line = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode the next bytes of the stream; returns the events they complete, in order."""
        if self._buf and b"\n" not in chunk and b"\r" not in chunk:
            # Still inside one long line: append (amortised O(1)) instead of re-joining every read.
            self._buf += chunk
            self._check_pending(len(self._buf))
            return []
        data = b"".join((self._buf, chunk)) if self._buf else chunk
        base, pos = self._offset, 0
        if self._at_start:
            if len(data) < 3 and _BOM.startswith(data):
                self._buf[:] = data  # maybe the first bytes of a BOM: wait for more
                return []
            self._at_start = False
            if data.startswith(_BOM):  # "One leading U+FEFF BYTE ORDER MARK character must be ignored"
                pos = 3
        if self._skip_lf and pos < len(data):
            self._skip_lf = False
            if data[pos] == _LF:
                pos += 1
        events: list[SSEEvent] = []
        if data.find(b"\r", pos) < 0:
            pos = self._scan_lf(data, pos, base, events)
        else:
            pos = self._scan_any(data, pos, base, events)
        self._offset = base + pos
        self._buf[:] = data[pos:]
        self._check_pending(len(self._buf))
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream. Strict: raise if it ended inside an event; lenient: discard it (the spec).

        Returns a list for symmetry with ``feed()``; the spec never dispatches an unfinished event,
        so it is always empty. The decoder is then ready for a new stream.
        """
        pending = len(self._buf)
        in_event = self._event_bytes > 0
        offset, line = (self._event_start, self._event_line) if in_event else (self._offset, self._line + 1)
        self._reset_stream()
        if (pending or in_event) and self.strict:
            what = f"{pending} bytes of an unfinished line" if pending else "no blank line after its fields"
            raise SSEProtocolError(f"stream ended inside an event ({what})", offset=offset, line=line)
        return []

    # ---- internals ---------------------------------------------------------------------------

    def _scan_lf(self, data: bytes, pos: int, base: int, events: list[SSEEvent]) -> int:
        """LF-only input: the common case, with a fast path for whole ``data: ...\\n\\n`` events."""
        find, end = data.find, len(data)
        while (nl := find(b"\n", pos)) >= 0:
            if self._event_bytes == 0 and nl + 1 < end and data[nl + 1] == _LF and data.startswith(b"data: ", pos):
                if nl - pos > self.max_event_size:
                    raise self._too_big(base + pos, self._line + 1)
                self._line += 1
                text = self._text(data[pos + 6 : nl], base + pos + 6)
                self._line += 1  # the blank line that ends it
                events.append(SSEEvent(text, None, self.last_event_id, None))
                pos = nl + 2
                continue
            self._line_done(data, pos, nl, base, events)
            pos = nl + 1
        return pos

    def _scan_any(self, data: bytes, pos: int, base: int, events: list[SSEEvent]) -> int:
        """Input with CR: split on CRLF, LF or a lone CR, as the spec's grammar allows."""
        for match in _EOL.finditer(data, pos):
            self._line_done(data, pos, match.start(), base, events)
            pos = match.end()
        if pos == len(data) and data.endswith(b"\r"):
            self._skip_lf = True  # this CR may be half of a CRLF whose LF comes in the next read
        return pos

    def _line_done(self, data: bytes, start: int, end: int, base: int, events: list[SSEEvent]) -> None:
        """Process one complete line, ``data[start:end]`` (terminator excluded)."""
        self._line += 1
        if start == end:  # a blank line dispatches the event, if there is one
            if self._data:
                events.append(
                    SSEEvent("\n".join(self._data), self._event or None, self.last_event_id, self._event_retry)
                )
            self._reset_event()  # no data: the spec drops the event type and dispatches nothing
            return
        if data[start] == _COLON:  # a comment, e.g. `: keep-alive` or OpenRouter's `: OPENROUTER PROCESSING`
            return
        if self._event_bytes == 0:
            self._event_start, self._event_line = base + start, self._line
        self._event_bytes += end - start
        if self._event_bytes > self.max_event_size:  # reported where the event began, like close()
            raise self._too_big(self._event_start, self._event_line)
        colon = data.find(b":", start, end)
        if colon < 0:  # "the whole line is the field name, and the empty string is the field value"
            name, value_at = data[start:end], end
        else:
            name, value_at = data[start:colon], colon + 1
            if value_at < end and data[value_at] == _SPACE:  # one leading space is not part of the value
                value_at += 1
        value = data[value_at:end]
        if name == b"data":
            self._data.append(self._text(value, base + value_at))
        elif name == b"event":
            self._event = self._text(value, base + value_at)
        elif name == b"id":
            text = self._text(value, base + value_at)
            if "\0" not in text:  # the spec ignores an id containing NUL
                self.last_event_id = text
        elif name == b"retry":
            if value.isdigit():  # ASCII digits only; anything else is ignored, per spec
                self.retry = self._event_retry = int(value)
        elif self.strict:
            shown = name[:40].decode("utf-8", "replace")
            problem = f"unknown field {shown!r}" if colon >= 0 else f"line without a colon: {shown!r}"
            raise SSEProtocolError(problem, offset=base + start, line=self._line)

    def _text(self, raw: bytes, offset: int) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            if not self.strict:
                return raw.decode("utf-8", "replace")  # the spec's "UTF-8 decode" substitutes U+FFFD
            raise SSEProtocolError(
                f"invalid UTF-8 ({exc.reason})", offset=offset + exc.start, line=self._line
            ) from None

    def _check_pending(self, pending: int) -> None:
        if pending + self._event_bytes > self.max_event_size:
            if self._event_bytes:
                raise self._too_big(self._event_start, self._event_line)
            raise self._too_big(self._offset, self._line + 1)

    def _too_big(self, offset: int, line: int) -> SSEProtocolError:
        return SSEProtocolError(
            f"event larger than max_event_size ({self.max_event_size} bytes)", offset=offset, line=line
        )


def content_text(raw: bytes) -> str:
    """The assistant text in raw SSE frames (``data: {...}`` lines) or a whole JSON body: every
    ``choices[].delta.content`` / ``choices[].message.content``, and Anthropic's ``text_delta`` events or a
    message's text blocks, joined. Tolerant: lines that are not JSON objects are skipped. For grading accuracy
    answers (bench, monitor), not for relaying."""
    out: list[str] = []
    for line in raw.split(b"\n"):
        data = line[5:].strip() if line.startswith(b"data:") else (line if line.startswith(b"{") else b"")
        if not data or data == b"[DONE]":
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        for choice in obj.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            part = (choice.get("delta") or choice.get("message") or {}).get("content")
            if isinstance(part, str):
                out.append(part)
        kind = obj.get("type")  # Anthropic's Messages API: text deltas, or a whole message's text blocks
        if kind == "content_block_delta" and isinstance(delta := obj.get("delta"), dict):
            if delta.get("type") == "text_delta" and isinstance(text := delta.get("text"), str):
                out.append(text)
        elif kind == "message":
            for block in obj.get("content") or []:
                if (
                    isinstance(block, dict)
                    and block.get("type") == "text"
                    and isinstance(text := block.get("text"), str)
                ):
                    out.append(text)
    return "".join(out)
