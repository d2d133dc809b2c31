"""Unit tests of the cheap per-frame work: frame splitting, token detection, Retry-After."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from tailgate.upstream._frames import FrameSplitter, decode_frame, retry_after, token_count
from tailgate.wire.sse import SSEProtocolError


def test_split_lf_across_reads() -> None:
    """Frames split anywhere across reads come out whole and byte-exact."""
    stream = b'data: {"a":1}\n\n: keep-alive\n\ndata: [DONE]\n\n'
    for cut in range(1, len(stream)):
        s = FrameSplitter()
        frames = s.feed(stream[:cut]) + s.feed(stream[cut:])
        assert frames == [b'data: {"a":1}\n\n', b": keep-alive\n\n", b"data: [DONE]\n\n"]
        assert s.pending == b""


def test_split_one_frame_per_read_and_its_neighbours() -> None:
    """A read that is exactly one frame (the usual case, taken without scanning) and the reads that only look
    like one: a lone byte, a frame with a blank line more, two frames, a CRLF frame, one after a pending part."""
    s = FrameSplitter()
    assert s.feed(b'data: {"a":1}\n\n') == [b'data: {"a":1}\n\n']
    assert s.feed(b"d") == []
    assert s.pending == b"d"
    assert s.feed(b"ata: x\n\n") == [b"data: x\n\n"]
    assert s.feed(b"data: y\n\n\n") == [b"data: y\n\n"]
    assert s.pending == b"\n"
    s = FrameSplitter()
    assert s.feed(b"data: a\n\ndata: b\n\n") == [b"data: a\n\n", b"data: b\n\n"]
    assert s.feed(b"data: c\r\n\r\n") == [b"data: c\r\n\r\n"]
    assert s.feed(b"\n\n") == [b"\n\n"]
    assert s.pending == b""


def test_split_crlf_and_cr() -> None:
    """CRLF and lone-CR terminators are frame boundaries; a CR at the end of a read waits."""
    s = FrameSplitter()
    assert s.feed(b"data: a\r\n\r") == []
    assert s.feed(b"\ndata: b\r\rdata: c\n\n") == [b"data: a\r\n\r\n", b"data: b\r\r", b"data: c\n\n"]


def test_split_bounded() -> None:
    """An unterminated frame larger than the limit raises instead of growing memory."""
    s = FrameSplitter(max_frame=10)
    with pytest.raises(SSEProtocolError):
        s.feed(b"data: " + b"x" * 20)


@pytest.mark.parametrize(
    ("data", "tokens"),
    [
        ('{"choices":[{"delta":{"role":"assistant","content":""}}]}', 0),
        ('{"choices":[{"delta":{"content":"hi"}}]}', 1),
        ('{"choices":[{"delta":{"reasoning_content":"hm"}}]}', 1),
        ('{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}', 1),
        ('{"choices":[{"text":"x"}]}', 1),
        ('{"choices":[{"delta":{},"finish_reason":"stop"}]}', 0),
        ('{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}', 0),
    ],
)
def test_token_detection(data: str, tokens: int) -> None:
    """Content, reasoning, tool-call and completion text count; role-only, finish and usage do not."""
    assert token_count(decode_frame(data)) == tokens


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
        ({"Retry-After": "3"}, 3.0),
        ({"x-ratelimit-reset-requests": "6m0s"}, 360.0),
        ({"x-ratelimit-reset-requests": "1.5s", "x-ratelimit-reset-tokens": "20ms"}, 1.5),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    """Retry-After forms: OpenAI's ms header wins, then seconds, then the x-ratelimit reset."""
    assert retry_after(CIMultiDict(headers)) == seconds
