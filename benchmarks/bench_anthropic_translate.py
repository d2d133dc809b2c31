"""Claim (issue 32): translating Anthropic's Messages API to OpenAI chat and back costs a fraction of a millisecond
per coding-agent request and a few microseconds per streamed chunk in the wire layer, next to a passthrough that
reads only the request's head and forwards the upstream's frames untouched.

Measured in one process, interleaved ``--rounds`` times, on a coding-agent-shaped request (a two-block
system prompt, 16 tools with JSON schemas, 24 turns of text, tool_use and tool_result) and a 200-chunk
stream (thinking, then text, then a tool call's arguments):

* per request — passthrough: ``decode_head`` of the body; translation: ``decode_messages`` +
  ``to_chat_request`` + encoding the chat body;
* per chunk — passthrough: decoding the chunk's JSON (what the measurement core already does for every
  frame); translation: the same decode + ``StreamTranslator.feed`` (frames out, encoded);
* per answer — ``to_message`` of a whole chat completion + encoding it.

This is the wire layer alone; the gateway's own per-request cost of the route comes with the route.
Usage: ``python benchmarks/bench_anthropic_translate.py [--rounds R] [--quick]``. Exits 1 if a translated
stream does not reassemble to what went in.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from typing import Any

import msgspec

from tailgate.wire.anthropic import decode_head, decode_messages
from tailgate.wire.anthropic_stream import StreamTranslator
from tailgate.wire.anthropic_translate import to_chat_request, to_message
from tailgate.wire.types import encode

_enc = msgspec.json.Encoder()


def agent_request() -> bytes:
    """A Claude-Code-shaped request: long system prompt, many tools, a long tool-using conversation."""
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Absolute path of the file to read " * 3},
            "offset": {"type": "integer"},
            "limit": {"type": "integer"},
        },
        "required": ["path"],
    }
    tools = [
        {"name": f"tool_{i}", "description": "Does a thing with files. " * 20, "input_schema": schema}
        for i in range(16)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Fix the failing test. " * 40}]}
    ]
    for i in range(11):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should look at the file. " * 10, "signature": "s" * 200},
                    {"type": "text", "text": "Let me read it."},
                    {"type": "tool_use", "id": f"toolu_{i}", "name": "tool_1", "input": {"path": f"/src/m{i}.py"}},
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "def f():\n    return 1\n" * 60}
                ],
            }
        )
    messages.append({"role": "assistant", "content": "Done."})
    messages.append({"role": "user", "content": "Thanks, now run the tests."})
    body = {
        "model": "claude-sonnet",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "You are a coding agent. " * 200, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Environment: linux. " * 50},
        ],
        "tools": tools,
        "messages": messages,
        "thinking": {"type": "enabled", "budget_tokens": 4000},
        "metadata": {"user_id": "u-1"},
    }
    return _enc.encode(body)


def chunks() -> list[bytes]:
    """A 200-chunk chat stream as the upstream sends the JSON: 60 thinking, 100 text, 40 tool-argument chunks."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _enc.encode(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "up",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
        )

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"reasoning_content": " think"}) for _ in range(60)]
    out += [chunk({"content": " word"}) for _ in range(100)]
    out.append(
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}
                ]
            }
        )
    )
    out += [
        chunk(
            {
                "tool_calls": [
                    {"index": 0, "function": {"arguments": '{"a":1' if i == 0 else ',"b":2' if i < 38 else "}"}}
                ]
            }
        )
        for i in range(39)
    ]
    out.append(chunk({}, finish="tool_calls"))
    out.append(
        _enc.encode(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "up",
                "choices": [],
                "usage": {"prompt_tokens": 9000, "completion_tokens": 200, "total_tokens": 9200},
            }
        )
    )
    return out


def completion() -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "up",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "reasoning_content": "think " * 60,
                    "content": "word " * 100,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 9000, "completion_tokens": 200, "total_tokens": 9200},
    }


def check(frames: list[bytes]) -> None:
    """The translated stream reassembles to what went in (else exit 1)."""
    thinking = text = args = ""
    names = []
    for frame in frames:
        data = msgspec.json.decode(frame.split(b"data: ", 1)[1])
        names.append(data["type"])
        delta = data.get("delta") or {}
        thinking += delta.get("thinking", "")
        text += delta.get("text", "")
        args += delta.get("partial_json", "")
    want_args = '{"a":1' + ',"b":2' * 37 + "}"
    if thinking != " think" * 60 or text != " word" * 100 or args != want_args or names[-1] != "message_stop":
        print("FAILED: the translated stream does not reassemble to its input", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a smoke run: few repetitions, one round")
    args = ap.parse_args()
    n_req, n_stream = (20, 20) if args.quick else (2_000, 2_000)
    if args.quick:
        args.rounds = 1
    body = agent_request()
    raw_chunks = chunks()
    answer = completion()

    def head() -> None:
        decode_head(body)

    def translate_request() -> None:
        encode(to_chat_request(decode_messages(body, strict=True), model="up"))

    def pass_stream() -> None:
        for raw in raw_chunks:
            msgspec.json.decode(raw)

    def translate_stream() -> list[bytes]:
        t = StreamTranslator(model="claude")
        out: list[bytes] = []
        for raw in raw_chunks:
            out += t.feed(msgspec.json.decode(raw))
        out += t.finish()
        return out

    def translate_answer() -> None:
        _enc.encode(to_message(answer, model="claude"))

    check(translate_stream())
    per_chunk = len(raw_chunks)
    runs: dict[str, list[float]] = {k: [] for k in ("head", "request", "pass", "stream", "answer")}
    for _ in range(args.rounds):
        runs["head"].append(timeit.timeit(head, number=n_req) / n_req * 1e6)
        runs["request"].append(timeit.timeit(translate_request, number=n_req) / n_req * 1e6)
        runs["pass"].append(timeit.timeit(pass_stream, number=n_stream) / n_stream / per_chunk * 1e6)
        runs["stream"].append(timeit.timeit(translate_stream, number=n_stream) / n_stream / per_chunk * 1e6)
        runs["answer"].append(timeit.timeit(translate_answer, number=n_req) / n_req * 1e6)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"request body: {len(body)} bytes; stream: {per_chunk} chunks; rounds: {args.rounds}")
    print(f"per request  passthrough (decode_head)          {med['head']:9.2f} µs")
    print(f"per request  translation (decode+translate+enc) {med['request']:9.2f} µs")
    print(f"per chunk    passthrough (decode the JSON)      {med['pass']:9.3f} µs")
    print(f"per chunk    translation (decode + feed)        {med['stream']:9.3f} µs")
    print(f"per answer   translation (to_message + encode)  {med['answer']:9.2f} µs")
    print(f"translation extra per request: {med['request'] - med['head']:.2f} µs")
    print(f"translation extra per chunk: {med['stream'] - med['pass']:.3f} µs")


if __name__ == "__main__":
    main()
