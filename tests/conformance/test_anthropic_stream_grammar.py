"""The stream translator's output obeys Anthropic's documented event grammar, and the checker catches breaks.

The checker (tests/anthropic_grammar.py) is shown failing on planted bad sequences below, one per rule,
so a green run means the grammar was checked, not that the checker was asleep.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import anthropic
import httpx2
import msgspec
import pytest
from anthropic._models import construct_type
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from anthropic_grammar import GrammarError, check_events, check_stream
from conftest import SimFactory
from tailgate.wire.anthropic_stream import StreamTranslator
from tailgate.wire.anthropic_translate import to_message
from tailgate.wire.errors import overloaded
from tailgate.wire.sse import SSEDecoder


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-g",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": choices,
        **extra,
    }


USAGE = _chunk(usage={"prompt_tokens": 20, "completion_tokens": 6, "total_tokens": 26})


def _translate(chunks: list[dict[str, Any]], *, finish: bool = True) -> bytes:
    t = StreamTranslator(model="claude", input_tokens=20)
    out = b"".join(b"".join(t.feed(c)) for c in chunks)
    return out + (b"".join(t.finish()) if finish else b"")


def _sdk_message(body: bytes) -> Any:
    """The message the official SDK's stream accumulator builds from these frames."""
    snapshot = None
    json_bufs: dict[int, bytes] = {}
    for frame in body.split(b"\n\n"):
        if not frame or frame.startswith((b"event: ping", b"event: error")):
            continue
        data = msgspec.json.decode(frame.split(b"data: ", 1)[1])
        event = cast(RawMessageStreamEvent, construct_type(type_=RawMessageStreamEvent, value=data))
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
    return snapshot


TEXT = [_chunk({"role": "assistant", "content": ""}), _chunk({"content": "Hello"}), _chunk({"content": " there"})]
THINKING = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"reasoning_content": "Let me think"}),
    _chunk({"reasoning_content": " briefly."}),
    _chunk({"content": "Answer."}),
]
TOOLS = [
    _chunk({"role": "assistant", "content": None}),
    _chunk({"content": "Calling."}),
    _chunk(
        {"tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "w", "arguments": ""}}]}
    ),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    _chunk(
        {"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "t", "arguments": "{}"}}]}
    ),
]


def test_text_stream_conforms() -> None:
    """Text: message_start, ping, one text block, message_delta with usage, message_stop; the SDK agrees."""
    body = _translate([*TEXT, _chunk({}, finish="stop"), USAGE])
    checked = check_stream(body)
    assert checked.events[:2] == ["message_start", "ping"]
    assert [(b.type, b.text) for b in checked.blocks] == [("text", "Hello there")]
    assert checked.stop_reason == "end_turn"
    assert checked.usage == {"output_tokens": 6, "input_tokens": 20, "cache_read_input_tokens": 0}
    message = _sdk_message(body)
    assert message.content[0].text == "Hello there"
    assert message.usage.output_tokens == 6


def test_thinking_stream_conforms() -> None:
    """Thinking: a thinking block (thinking deltas, then one signature_delta) before the text block."""
    checked = check_stream(_translate([*THINKING, _chunk({}, finish="stop"), USAGE]))
    assert [(b.index, b.type, b.text) for b in checked.blocks] == [
        (0, "thinking", "Let me think briefly."),
        (1, "text", "Answer."),
    ]
    assert checked.blocks[0].signature == ""


def test_tool_use_stream_conforms() -> None:
    """Tool use: text, then one tool_use block per call with its input_json_delta; stop_reason tool_use."""
    body = _translate([*TOOLS, _chunk({}, finish="tool_calls"), USAGE])
    checked = check_stream(body)
    assert [(b.type, b.input_json) for b in checked.blocks] == [
        ("text", ""),
        ("tool_use", '{"city": "Paris"}'),
        ("tool_use", "{}"),
    ]
    assert [b.start.get("id") for b in checked.blocks[1:]] == ["call_a", "call_b"]
    assert checked.stop_reason == "tool_use"
    message = _sdk_message(body)
    assert [(b.type, getattr(b, "input", None)) for b in message.content][1:] == [
        ("tool_use", {"city": "Paris"}),
        ("tool_use", {}),
    ]


def test_an_error_mid_stream_conforms() -> None:
    """A failure after the first token ends with one error event and nothing after it (never a silent cut)."""
    t = StreamTranslator(model="claude")
    body = b"".join(b"".join(t.feed(c)) for c in THINKING[:3]) + b"".join(t.fail(overloaded("upstream went away")))
    checked = check_stream(body)
    assert checked.events[-1] == "error"
    assert checked.error == {"type": "overloaded_error", "message": "upstream went away"}
    assert checked.blocks[0].type == "thinking"


def test_a_stream_with_no_output_still_conforms() -> None:
    """An upstream that says nothing but [DONE]: message_start, message_delta, message_stop."""
    assert check_stream(_translate([])).events == ["message_start", "ping", "message_delta", "message_stop"]


# ---- the checker fails on planted defects ---------------------------------------------------------


def _good() -> list[dict[str, Any]]:
    body = _translate([*THINKING, *TOOLS[1:], _chunk({}, finish="tool_calls"), USAGE])
    return [msgspec.json.decode(f.split(b"data: ", 1)[1]) for f in body.split(b"\n\n") if f]


def _index(events: list[dict[str, Any]], kind: str, nth: int = 0) -> int:
    return [i for i, e in enumerate(events) if e["type"] == kind][nth]


def _drop(kind: str, nth: int = 0) -> Any:
    def plant(events: list[dict[str, Any]]) -> None:
        del events[_index(events, kind, nth)]

    return plant


def _set(kind: str, path: tuple[Any, ...], value: Any, nth: int = 0) -> Any:
    def plant(events: list[dict[str, Any]]) -> None:
        target = events[_index(events, kind, nth)]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return plant


def _thinking_into_text(events: list[dict[str, Any]]) -> None:
    """PEERS.md's bug: thinking deltas emitted into a text block."""
    events[_index(events, "content_block_start")]["content_block"] = {"type": "text", "text": ""}


def _event_after_stop(events: list[dict[str, Any]]) -> None:
    events.append({"type": "ping"})


def _swap_first_two_blocks(events: list[dict[str, Any]]) -> None:
    i = _index(events, "content_block_start", 1)
    j = _index(events, "content_block_stop", 0)
    events[i], events[j] = events[j], events[i]


def _bad_tool_json(events: list[dict[str, Any]]) -> None:
    for e in events:
        if (
            e["type"] == "content_block_delta"
            and e["delta"]["type"] == "input_json_delta"
            and e["delta"]["partial_json"]
        ):
            e["delta"]["partial_json"] = e["delta"]["partial_json"].replace("{", "[", 1)
            return


PLANTED = {
    "no message_start": (_drop("message_start"), "must open with message_start"),
    "a block never closed": (_drop("content_block_stop", 2), "still open"),
    "index skips": (_set("content_block_start", ("index",), 5, 1), "expected 1"),
    "delta for another block": (_set("content_block_delta", ("index",), 3, 0), "the open block is 0"),
    "thinking into a text block": (_thinking_into_text, "thinking_delta in a text block"),
    "no signature_delta": (_drop("content_block_delta", 2), "without signature_delta"),
    "no usage in message_delta": (_set("message_delta", ("usage",), {}), "usage.output_tokens"),
    "no stop_reason": (_set("message_delta", ("delta", "stop_reason"), None), "needs a stop_reason"),
    "no message_delta": (_drop("message_delta"), "before any message_delta"),
    "silent cut": (_drop("message_stop"), "silent cut"),
    "event after message_stop": (_event_after_stop, "after the stream ended"),
    "two blocks open": (_swap_first_two_blocks, "still open"),
    "tool input not an object": (_bad_tool_json, "tool input"),
    "content in message_start": (
        _set("message_start", ("message", "content"), [{"type": "text", "text": ""}]),
        "empty",
    ),
}


@pytest.mark.parametrize("name", PLANTED)
def test_the_checker_fails_on_a_planted_defect(name: str) -> None:
    """Each planted break of the grammar is caught, with a message saying which rule."""
    events = copy.deepcopy(_good())
    check_events(copy.deepcopy(events))  # the unplanted sequence passes
    plant, words = PLANTED[name]
    plant(events)
    with pytest.raises(GrammarError, match=words):
        check_events(events)


def test_the_checker_wants_named_frames() -> None:
    """A frame without `event:` (the SDK would skip it) or with a mismatched name is a break."""
    body = _translate([*TEXT, _chunk({}, finish="stop")])
    with pytest.raises(GrammarError, match="no `event:` name"):
        check_stream(body.replace(b"event: ping\n", b"", 1))
    with pytest.raises(GrammarError, match="carries data of type"):
        check_stream(body.replace(b"event: ping\n", b"event: message_stop\n", 1))


# ---- any upstream stream: a property -------------------------------------------------------------

_piece = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=6)
_part = st.one_of(
    st.tuples(st.just("reasoning_content"), _piece),
    st.tuples(st.just("reasoning"), _piece),
    st.tuples(st.just("content"), _piece),
    st.tuples(st.just("tool"), st.lists(_piece, max_size=4)),
)


@settings(max_examples=150, deadline=None)
@given(
    parts=st.lists(_part, max_size=12),
    finish=st.sampled_from(["stop", "length", "tool_calls", "content_filter", None]),
    usage=st.booleans(),
)
def test_any_chat_stream_translates_to_a_conforming_sequence(
    parts: list[tuple[str, Any]], finish: str | None, usage: bool
) -> None:
    """Whatever mix of thinking, text and tool calls an upstream streams (vLLM's `reasoning` too), in any order
    and any fragment sizes, the translation conforms, and each block carries exactly what was streamed into it."""
    chunks: list[dict[str, Any]] = [_chunk({"role": "assistant", "content": ""})]
    expected: list[tuple[str, str]] = []  # (block type, content) as the translation should group them
    tools = 0
    for kind, value in parts:
        if kind == "tool":
            name, args = f"f{tools}", "".join(value)
            chunks.append(
                _chunk(
                    {
                        "tool_calls": [
                            {"index": tools, "id": f"call_{tools}", "function": {"name": name, "arguments": ""}}
                        ]
                    }
                )
            )
            chunks += [_chunk({"tool_calls": [{"index": tools, "function": {"arguments": v}}]}) for v in value]
            expected.append(("tool_use", args))
            tools += 1
            continue
        block = "text" if kind == "content" else "thinking"
        chunks.append(_chunk({kind: value}))
        if expected and expected[-1][0] == block:
            expected[-1] = (block, expected[-1][1] + value)
        else:
            expected.append((block, value))
    if finish is not None:
        chunks.append(_chunk({}, finish=finish))
    if usage:
        chunks.append(USAGE)
    body = _translate(chunks)
    # Tool arguments here are arbitrary text, not JSON: check the grammar on everything but that rule.
    checked = check_stream(body, tool_json=False)
    got = [(b.type, b.input_json if b.type == "tool_use" else b.text) for b in checked.blocks]
    assert got == expected
    assert checked.usage["output_tokens"] == (6 if usage else sum(len(v) if k == "tool" else 1 for k, v in parts))


# ---- a real upstream: the simulator's OpenAI chat stream --------------------------------------------


async def test_the_simulators_chat_streams_translate_to_conforming_sequences(sim: SimFactory) -> None:
    """Real chat streams (role chunk, reasoning_content, tool-call fragments, finish, usage chunk) from the
    simulator's OpenAI endpoint, translated chunk by chunk: thinking then tool_use, or thinking then text;
    usage is the simulator's truth; the SDK's accumulator agrees."""
    p = await sim(
        "reasoner", engine={"pre_median_s": 0.0, "step_ms": 1.0, "default_output_tokens": 10, "reasoning_median": 4}
    )
    tool = {
        "type": "function",
        "function": {"name": "w", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }
    cases = [
        ({"tools": [tool], "tool_choice": "required"}, ["thinking", "tool_use"], "tool_use"),
        ({}, ["thinking", "text"], "end_turn"),
    ]
    async with httpx2.AsyncClient(timeout=10) as http:
        for extra, blocks, reason in cases:
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "stream_options": {"include_usage": True},
                **extra,
            }
            resp = await http.post(p.url + "/chat/completions", json=body)
            decoder = SSEDecoder()
            t = StreamTranslator(model="claude")
            out = b""
            for event in decoder.feed(resp.content):
                if not event.is_done:
                    out += b"".join(t.feed(msgspec.json.decode(event.data)))
            out += b"".join(t.finish())
            checked = check_stream(out)
            assert [b.type for b in checked.blocks] == blocks
            assert checked.stop_reason == reason
            truth = p.truth.records()[-1]
            assert checked.usage["output_tokens"] == truth.output_tokens
            assert checked.usage["input_tokens"] == truth.prompt_tokens
            message = _sdk_message(out)
            if reason == "tool_use":
                assert set(message.content[1].input) == {"city"}
            else:
                assert message.content[1].text == checked.blocks[1].text


async def test_the_simulators_chat_answers_translate_to_sdk_messages(sim: SimFactory) -> None:
    """A real non-streamed chat completion (thinking + tool call) from the simulator becomes a message the
    official SDK validates, with the simulator's usage."""
    p = await sim("reasoner", engine={"pre_median_s": 0.0, "step_ms": 1.0, "reasoning_median": 4})
    tool = {
        "type": "function",
        "function": {"name": "w", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    }
    async with httpx2.AsyncClient(timeout=10) as http:
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [tool],
            "tool_choice": "required",
        }
        resp = await http.post(p.url + "/chat/completions", json=body)
    message = to_message(msgspec.json.decode(resp.content), model="claude")
    parsed = anthropic.types.Message.model_validate(msgspec.json.decode(msgspec.json.encode(message)))
    assert [b.type for b in parsed.content] == ["thinking", "tool_use"]
    assert parsed.content[1].type == "tool_use"
    assert isinstance(parsed.content[1].input.get("n"), int)
    assert parsed.stop_reason == "tool_use"
    truth = p.truth.records()[-1]
    assert (parsed.usage.input_tokens, parsed.usage.output_tokens) == (truth.prompt_tokens, truth.output_tokens)
