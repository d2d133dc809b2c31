"""The request path's small decode of a whole chat answer (answer_quality.py) says what the pure signals and the
first-byte gate say of the same body (tailgate.quality), on every shape of answer that matters to them."""

from __future__ import annotations

import itertools
import json
from typing import Any

from tailgate.gateway.request_path.answer_quality import _fast
from tailgate.quality.gate import non_answer
from tailgate.quality.signals import content_filtered, empty_answer

CONTENTS: list[Any] = [
    None,
    "",
    "   ",
    "\n",
    " hi",
    "hi",
    [{"type": "text", "text": "hi"}],
    [{"type": "text", "text": " "}],
]
FINISHES = [None, "stop", "length", "content_filter", "sensitive", "tool_calls"]
EXTRAS: list[dict[str, Any]] = [
    {},
    {"tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"refusal": "no"},
    {"reasoning_content": "thinking"},
    {"reasoning": "thinking"},
]


def test_the_small_decode_agrees_with_the_signals_and_the_gate() -> None:
    checked = 0
    for content, finish, extra in itertools.product(CONTENTS, FINISHES, EXTRAS):
        message = {"role": "assistant", "content": content, **extra}
        body = {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
        fast = _fast(json.dumps(body).encode())
        assert fast is not None
        where = (content, finish, extra)
        assert fast.verdict == non_answer(body), where
        assert fast.filtered == content_filtered(body).hit, where
        empty = empty_answer(body)
        assert fast.empty == (None if empty is None else empty.hit), where
        checked += 1
    assert checked == len(CONTENTS) * len(FINISHES) * len(EXTRAS)


def test_what_is_not_a_chat_answer_is_not_judged() -> None:
    for raw in (b"not json", b"{}", b'{"choices": []}', b'{"choices": [{"finish_reason": 3}]}'):
        assert _fast(raw) is None, raw
