"""What reading an answer's quality signals costs, for the request path that will call it (issue 42).

Measured in one process, interleaved ``--rounds`` times, against a baseline the request path already pays:

* **text answer** — baseline: ``json.loads`` of a 300-token non-stream chat body; signals: ``check_chat`` on the
  decoded body (no tools: the filter and empty checks);
* **tool answer** — baseline: ``json.loads`` of a body with one tool call; signals: ``check_chat`` against a request
  declaring 16 tools with JSON schemas (the validator compiled once, then cached);
* **stream** — baseline: ``json.loads`` of each of 200 chunks (what the measurement core decodes anyway); signals:
  ``assemble_chat_stream`` over the decoded chunks + ``check_chat``.

Usage: ``python benchmarks/bench_quality_signals.py [--rounds R] [--quick]``. Exits 1 if a signal misreads
its fixture (a good answer that hits, or a broken one that does not).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import timeit
from collections.abc import Callable
from typing import Any

from tailgate.quality.signals import assemble_chat_stream, check_chat, hits

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "offset": {"type": "integer", "minimum": 0},
        "limit": {"type": "integer", "minimum": 1},
        "mode": {"type": "string", "enum": ["read", "write", "append"]},
    },
    "required": ["path", "mode"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": SCHEMA}} for i in range(16)]
ARGS = json.dumps({"path": "/src/app/main.py", "offset": 10, "limit": 200, "mode": "read"})


def text_body() -> bytes:
    content = "The gateway answered every request within a few seconds. " * 30
    message = {"role": "assistant", "content": content}
    return json.dumps(
        {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    ).encode()


def tool_body(args: str = ARGS) -> bytes:
    call = {"id": "call_1", "type": "function", "function": {"name": "tool_7", "arguments": args}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    return json.dumps({"object": "chat.completion", "choices": [choice]}).encode()


def stream_chunks() -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode()

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"reasoning_content": " thinking"}) for _ in range(100)]
    out += [chunk({"content": " word"}) for _ in range(98)]
    out.append(chunk({}, "stop"))
    return out


def hook_cases(
    text: bytes, tool: bytes, chunks: list[bytes], plain: dict[str, Any], with_tools: dict[str, Any], number: int
) -> dict[str, tuple[Callable[[], object], Callable[[], object], int]]:
    """The gateway's hook (gateway/request_path/answer_quality.py) per answer: ``begin`` + what the attempt does
    (``Observed.unary``: the small decode of the gate) + the books' ``judge`` (signals, counters, tally, board).
    Baseline: ``json.loads`` of the body, as above; for a stream without tools nothing is decoded at all (the
    judgement reads the call's result), so its baseline is one ``json.loads`` of a single chunk."""
    from prometheus_client import CollectorRegistry, Counter

    from tailgate.gateway.request_path.answer_quality import AnswerQuality
    from tailgate.quality.metrics import QualityMetrics
    from tailgate.routing import Route
    from tailgate.routing.quality import QualityBoard
    from tailgate.upstream import CallResult

    registry = CollectorRegistry()
    hook = AnswerQuality(
        QualityBoard(), QualityMetrics(registry), Counter("r", "r", ["alias", "provider", "reason"], registry=registry)
    )
    route = Route("m", "p", "up", 1.0)
    result = CallResult(200, None, 0.0, True, ttft_ms=1.0, ttft_answer_ms=1.0, output_tokens=100)
    frames = [b"data: " + c + b"\n\n" for c in chunks]

    def unary(req: dict[str, Any], body: bytes) -> None:
        obs = hook.begin("m", route, req, True)
        obs.unary(body)
        hook.judge(obs, result)
        hook.flush()  # a batch of one: the books flush after each batch

    def gate(body: bytes) -> None:  # what runs before the first byte: the rest waits for the books
        hook.begin("m", route, plain, True).unary(body)

    def stream_plain() -> None:
        hook.judge(hook.begin("m", route, plain, True), result)
        hook.flush()

    def stream_tools() -> None:
        obs = hook.begin("m", route, with_tools, True)
        obs.frames = frames
        hook.judge(obs, result)
        hook.flush()

    one = chunks[0]
    return {
        "hook: text, inline": (lambda: json.loads(text), lambda: gate(text), number),
        "hook: text": (lambda: json.loads(text), lambda: unary(plain, text), number),
        "hook: tool": (lambda: json.loads(tool), lambda: unary(with_tools, tool), number),
        "hook: stream": (lambda: json.loads(one), stream_plain, number),
        "hook: stream+tools": (lambda: [json.loads(c) for c in chunks], stream_tools, max(1, number // 20)),
    }


def per_call_us(fn: Callable[[], object], number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="few iterations (a smoke test)")
    args = parser.parse_args()
    rounds, number = (2, 200) if args.quick else (args.rounds, 5000)

    text, tool, chunks = text_body(), tool_body(), stream_chunks()
    plain: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    with_tools: dict[str, Any] = {**plain, "tools": TOOLS}
    thinking: dict[str, Any] = {**plain, "enable_thinking": True}
    decoded_text, decoded_tool = json.loads(text), json.loads(tool)
    decoded_chunks = [json.loads(c) for c in chunks]

    ok = hits(check_chat(plain, decoded_text)) == [] and hits(check_chat(with_tools, decoded_tool)) == []
    ok &= hits(check_chat(thinking, assemble_chat_stream(decoded_chunks))) == []
    ok &= hits(check_chat(with_tools, json.loads(tool_body('{"path": 3}')))) == ["tool_args_schema_mismatch"]
    ok &= hits(check_chat(with_tools, json.loads(tool_body("{")))) == ["tool_args_invalid_json"]
    if not ok:
        print("a signal misread its fixture", file=sys.stderr)
        return 1

    cases: dict[str, tuple[Callable[[], object], Callable[[], object], int]] = {
        "text answer": (lambda: json.loads(text), lambda: check_chat(plain, decoded_text), number),
        "tool answer": (lambda: json.loads(tool), lambda: check_chat(with_tools, decoded_tool), number),
        "stream": (
            lambda: [json.loads(c) for c in chunks],
            lambda: check_chat(thinking, assemble_chat_stream(decoded_chunks)),
            max(1, number // 20),
        ),
    }
    cases.update(hook_cases(text, tool, chunks, plain, with_tools, number))
    results: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in cases}
    for _ in range(rounds):
        for name, (base, signals, n) in cases.items():
            results[name][0].append(per_call_us(base, n))
            results[name][1].append(per_call_us(signals, n))
    for name, (base_us, sig_us) in results.items():
        b, s = statistics.median(base_us), statistics.median(sig_us)
        print(f"{name:<19} baseline {b:8.2f} µs  signals {s:8.2f} µs  ratio {s / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
