"""SSE framing: the incremental decoder against the WHATWG algorithm, and the encoder."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai._streaming import SSEDecoder as SDKDecoder

from tailgate.wire.sse import (
    DONE_FRAME,
    KEEPALIVE_FRAME,
    SSEDecoder,
    SSEEvent,
    SSEProtocolError,
    encode_event,
)

# A realistic OpenAI-style stream: keep-alive comments, blank keep-alive lines, a named event,
# multi-line data, `data:` without the optional space, a 3-byte UTF-8 character (€) and [DONE].
STREAM = (
    b": keep-alive\n"
    b"\n"
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n'
    b"\n"
    b"\n"
    b"\n"
    b'data: {"choices":[{"delta":{"content":"price: 5\xe2\x82\xac"}}]}\n'
    b"\n"
    b": OPENROUTER PROCESSING\n"
    b"\n"
    b"event: note\n"
    b"data: line one\n"
    b"data:line two\n"
    b"data: \n"
    b"\n"
    b'data: {"choices":[],"usage":{"total_tokens":5}}\n'
    b"\n"
    b"data: [DONE]\n"
    b"\n"
)
EXPECTED = [
    SSEEvent('{"choices":[{"delta":{"role":"assistant","content":""}}]}'),
    SSEEvent('{"choices":[{"delta":{"content":"price: 5€"}}]}'),
    SSEEvent("line one\nline two\n", event="note"),
    SSEEvent('{"choices":[],"usage":{"total_tokens":5}}'),
    SSEEvent("[DONE]"),
]
VARIANTS = {
    "LF": STREAM,
    "CRLF": STREAM.replace(b"\n", b"\r\n"),
    "CR": STREAM.replace(b"\n", b"\r"),
}


def decode_all(chunks: list[bytes], *, strict: bool = True) -> list[SSEEvent]:
    decoder = SSEDecoder(strict=strict)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.close()


def errors_of(chunks: list[bytes], *, strict: bool = True) -> SSEProtocolError:
    with pytest.raises(SSEProtocolError) as info:
        decode_all(chunks, strict=strict)
    return info.value


@pytest.mark.parametrize("variant", VARIANTS)
def test_split_at_every_byte_boundary(variant: str) -> None:
    """Cutting the stream into two reads at any byte gives the same events as one read."""
    stream = VARIANTS[variant]
    for cut in range(len(stream) + 1):
        assert decode_all([stream[:cut], stream[cut:]]) == EXPECTED, cut


@pytest.mark.parametrize("variant", VARIANTS)
def test_one_byte_reads(variant: str) -> None:
    """Reading one byte at a time (splitting every UTF-8 sequence and every CRLF) loses nothing."""
    stream = VARIANTS[variant]
    assert decode_all([stream[i : i + 1] for i in range(len(stream))]) == EXPECTED


def test_matches_the_openai_sdk_decoder() -> None:
    """Lenient mode dispatches exactly what the openai SDK's own SSE decoder does on the same bytes."""
    for stream in VARIANTS.values():
        theirs = [(e.data, e.event, e.id, e.retry) for e in SDKDecoder().iter_bytes(iter([stream]))]
        ours = [(e.data, e.event, e.id, e.retry) for e in decode_all([stream], strict=False)]
        assert ours == theirs


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    """A CR at the end of one read and the LF at the start of the next end one line, not two."""
    events = decode_all([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"])
    assert events == [SSEEvent("a\nb")]


def test_blank_lines_and_comments_dispatch_nothing() -> None:
    """Keep-alive comments and blank lines between events produce no event."""
    assert decode_all([KEEPALIVE_FRAME, b"\n\n\n", b"\r\n\r\n", b":\n\n"]) == []


def test_event_without_data_is_not_dispatched() -> None:
    """Per spec a block with no data field (only `event:`) dispatches nothing and resets the type."""
    assert decode_all([b"event: ping\n\ndata: x\n\n"]) == [SSEEvent("x")]


def test_done_marker() -> None:
    """`data: [DONE]` decodes to an event whose is_done is true; ordinary data is not done."""
    (done,) = decode_all([DONE_FRAME])
    assert done.is_done
    assert not SSEEvent('{"x": "[DONE]"}').is_done


def test_leading_bom_is_ignored_even_when_split() -> None:
    """One leading UTF-8 BOM is skipped, also when it arrives one byte per read."""
    stream = b"\xef\xbb\xbf" + DONE_FRAME
    assert decode_all([stream]) == [SSEEvent("[DONE]")]
    assert decode_all([stream[i : i + 1] for i in range(len(stream))]) == [SSEEvent("[DONE]")]


def test_bom_after_start_is_not_skipped() -> None:
    """Only the first bytes of a stream may be a BOM; later it is part of a (bad) field name."""
    error = errors_of([b"data: a\n\n\xef\xbb\xbfdata: b\n\n"])
    assert error.offset == 9
    assert error.line == 3


def test_id_persists_and_retry_is_reported() -> None:
    """The last event ID carries over to later events (spec); retry applies to its own event only."""
    decoder = SSEDecoder()
    events = decoder.feed(b"id: 7\nretry: 1500\ndata: a\n\ndata: b\n\nid: x\0y\ndata: c\n\n")
    assert events == [SSEEvent("a", id="7", retry=1500), SSEEvent("b", id="7"), SSEEvent("c", id="7")]
    assert decoder.retry == 1500
    assert decoder.last_event_id == "7"


def test_unknown_field_strict_error_names_offset_and_line() -> None:
    """A misspelt field (`dtaa:`) is an error in strict mode, located by byte offset and line."""
    error = errors_of([b"data: ok\n\n", b"dtaa: oops\n\n"])
    assert error.offset == 10
    assert error.line == 3
    assert str(error) == "unknown field 'dtaa' at byte 10, line 3"


def test_line_without_colon_strict_error() -> None:
    """A non-blank line with no colon that is not a field name (raw JSON, HTML) is refused."""
    error = errors_of([b"data: ok\n\n<html>\n"])
    assert "line without a colon" in str(error)
    assert (error.offset, error.line) == (10, 3)


def test_bare_field_name_is_allowed() -> None:
    """A bare `data` line is valid per spec: a data field with an empty value."""
    assert decode_all([b"data\n\n"]) == [SSEEvent("")]


def test_lenient_ignores_unknown_lines() -> None:
    """With strict=False unknown fields and stray lines are ignored, as the spec says."""
    assert decode_all([b"dtaa: x\nhello\ndata: y\n\n"], strict=False) == [SSEEvent("y")]


def test_invalid_utf8_offset_is_exact_even_across_reads() -> None:
    """Invalid UTF-8 is reported at its own byte, even when the line arrived in several reads."""
    stream = b'data: {"a":1}\n\ndata: "ab\xffcd"\n\n'
    for cut in range(len(stream) + 1):
        error = errors_of([stream[:cut], stream[cut:]])
        assert (error.offset, error.line) == (24, 3), cut
        assert "invalid UTF-8" in error.problem


def test_invalid_utf8_lenient_becomes_replacement_character() -> None:
    """The spec's UTF-8 decode replaces invalid bytes with U+FFFD; lenient mode does that."""
    assert decode_all([b"data: a\xffb\n\n"], strict=False) == [SSEEvent("a\ufffdb")]


def test_truncated_stream_strict_raises_lenient_discards() -> None:
    """A stream that ends inside an event raises in strict mode and is discarded in lenient mode."""
    for stream in (b"data: ok\n\ndata: partial", b"data: ok\n\ndata: no blank line\n"):
        error = errors_of([stream])
        assert str(error).startswith("stream ended inside an event")
        assert (error.offset, error.line) == (10, 3)
        assert decode_all([stream], strict=False) == [SSEEvent("ok")]


def test_close_resets_for_a_new_stream() -> None:
    """After close() the decoder starts over: a BOM is allowed again and the last id is cleared."""
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 1\ndata: a\n\n") == [SSEEvent("a", id="1")]
    assert decoder.close() == []
    assert decoder.feed(b"\xef\xbb\xbfdata: b\n\n") == [SSEEvent("b")]


@pytest.mark.parametrize(
    ("before", "last"),
    [
        ([], b"data: " + b"x" * 200 + b"\n\n"),  # one whole line (fast path)
        ([b"data: " + b"x" * 100], b"x" * 100),  # pending bytes of an unfinished line
        ([b"data: " + b"x" * 60 + b"\n"], b"data: " + b"x" * 60 + b"\n"),  # many lines of one event
    ],
)
def test_max_event_size_bounds_memory(before: list[bytes], last: bytes) -> None:
    """An event over max_event_size raises (located at its start) whether whole, pending or in lines."""
    decoder = SSEDecoder(max_event_size=128)
    for chunk in before:
        assert decoder.feed(chunk) == []
    with pytest.raises(SSEProtocolError, match=r"larger than max_event_size \(128 bytes\) at byte 0, line 1"):
        decoder.feed(last)


def test_event_at_max_size_is_accepted() -> None:
    """The limit is inclusive: a line of exactly max_event_size bytes decodes."""
    line = b"data: " + b"x" * 122
    assert SSEDecoder(max_event_size=128).feed(line + b"\n\n") == [SSEEvent("x" * 122)]


def test_encode_event_frames() -> None:
    """encode_event writes one data line per line of data, plus optional event/id/retry lines."""
    assert encode_event(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert encode_event("a\nb\r\nc", event="note", id="3", retry=10) == (
        b"event: note\nid: 3\nretry: 10\ndata: a\ndata: b\ndata: c\n\n"
    )
    assert encode_event("") == b"data: \n\n"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"event": "a\nb"}, "single line"),
        ({"id": "a\rb"}, "single line"),
        ({"id": "a\0b"}, "NUL"),
        ({"retry": -1}, "non-negative"),
    ],
)
def test_encode_event_refuses_unframeable_fields(kwargs: dict[str, object], message: str) -> None:
    """Field values that would break the framing are refused instead of corrupting the stream."""
    with pytest.raises(ValueError, match=message):
        encode_event("x", **kwargs)  # type: ignore[arg-type]


_text = st.text(st.characters(codec="utf-8", exclude_characters="\r"), max_size=40)
_name = st.text(st.characters(codec="utf-8", exclude_characters="\r\n\0"), min_size=1, max_size=10)
_events = st.lists(
    st.tuples(_text, st.none() | _name, st.none() | _name, st.booleans()),
    max_size=8,
)


@given(events=_events, ending=st.sampled_from([b"\n", b"\r\n", b"\r"]), cuts=st.lists(st.integers(0, 2000)))
def test_any_chunking_decodes_to_the_encoded_events(
    events: list[tuple[str, str | None, str | None, bool]], ending: bytes, cuts: list[int]
) -> None:
    """Encoding events (with keep-alives between) and decoding any chunking returns the same events."""
    stream = b""
    expected: list[SSEEvent] = []
    last_id: str | None = None
    for data, event, id_, keepalive in events:
        stream += encode_event(data, event=event, id=id_) + (KEEPALIVE_FRAME if keepalive else b"")
        last_id = id_ if id_ is not None else last_id
        expected.append(SSEEvent(data, event=event, id=last_id))
    stream = stream.replace(b"\n", ending)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    assert decode_all(chunks) == expected


def test_content_text_joins_deltas_and_bodies_and_skips_the_rest() -> None:
    """content_text: stream deltas and a whole body give the assistant text; junk lines are skipped."""
    from tailgate.wire.sse import content_text

    frames = (
        b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"4"}}]}\n\n'
        b": keep-alive\n\ndata: not json\n\ndata: [1]\n\n"
        b'data: {"choices":[{"delta":{"content":"2"}}, "x"]}\n\ndata: [DONE]\n\n'
    )
    assert content_text(frames) == "42"
    assert content_text(b'{"choices":[{"message":{"role":"assistant","content":"17"}}]}') == "17"
    assert content_text(b'{"choices":[{"message":{"content":null}}]}') == ""
