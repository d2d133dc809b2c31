"""The monitor's standardized workloads: the same requests for every provider, so numbers compare.

* ``short``: a one-line chat question, ``max_tokens`` 32: time to first token at its cheapest.
* ``long``: a ~1,000-token prompt (notes to summarise) asking for ~200 tokens, ``max_tokens`` 200:
  the request behind the throughput and E2E columns. Its first line carries the round number and the
  wall-clock time, so a provider's prefix cache cannot make one round look faster than another.
* ``accuracy``: one canary of the canary set (tailgate.accuracy: arithmetic, counting, ordering, format,
  recall, and a tool call against a schema, sent with its tool declared) per round, the same task for every
  provider in a round, graded exactly; ``max_tokens`` 1024 leaves room for a reasoning model.

Every probe streams (TTFT needs a stream) and asks for ``stream_options.include_usage`` (exact tokens).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from tailgate.accuracy import CANARY_KINDS, Task, generate
from tailgate.quality.signals import assemble_chat_stream
from tailgate.wire.sse import content_text

__all__ = ["LONG_MAX_TOKENS", "WORKLOADS", "Probe", "build_probe", "content_text", "long_prompt", "tool_call_of"]

WORKLOADS: tuple[str, ...] = ("short", "long", "accuracy")
SHORT_PROMPT = "In one short sentence: why do people queue?"
SHORT_MAX_TOKENS = 32
LONG_PROMPT_WORDS = 1000
LONG_MAX_TOKENS = 200
ACCURACY_MAX_TOKENS = 1024
_TASKS_SEED = 20261202
_TASK_COUNT = 300

_WORDS = (  # noqa: SIM905 - a word list reads better as running text
    "the service answered every request within a few seconds while the queue stayed short and the team "
    "watched latency throughput errors and price across five providers during the busy morning hours when "
    "traffic doubled and one region slowed down so the scheduler moved weight to the secondary provider "
    "until the primary recovered and the weekly report compared averages minimums and tail percentiles"
).split()


@dataclass(frozen=True, slots=True)
class Probe:
    """One request of a workload: the body without ``model``, its task if graded, its token estimate."""

    workload: str
    body: dict[str, Any]  # reason: a chat request body as sent: free-form JSON the upstream client encodes
    task: Task | None = None
    tokens_estimate: int = 0
    """Prompt + expected output tokens, for the provider's TPM pacing."""


def long_prompt(round_index: int, wall: float, words: int = LONG_PROMPT_WORDS) -> str:
    """About ``words`` tokens of notes with a round-specific first line (defeats prefix caching)."""
    body = " ".join(_WORDS[i % len(_WORDS)] for i in range(words))
    return f"Probe round {round_index} at {wall:.0f}. Summarise these operations notes in about 150 words.\n\n{body}"


def _task(round_index: int, wall: float) -> Task:
    # The minute of the round's start moves through the suite even when every run is a fresh
    # `--once` (round 0); every provider in one round gets the same task.
    tasks = _tasks()
    return tasks[(int(wall // 60) + round_index) % len(tasks)]


@functools.cache
def _tasks() -> tuple[Task, ...]:
    return tuple(generate(_TASK_COUNT, seed=_TASKS_SEED, kinds=CANARY_KINDS))


def build_probe(workload: str, round_index: int, wall: float) -> Probe:
    """The request of ``workload`` for round ``round_index`` started at wall-clock ``wall``."""
    stream = {"stream": True, "stream_options": {"include_usage": True}}
    if workload == "short":
        body = {"messages": [{"role": "user", "content": SHORT_PROMPT}], "max_tokens": SHORT_MAX_TOKENS, **stream}
        return Probe(workload, body, None, 16 + SHORT_MAX_TOKENS)
    if workload == "long":
        prompt = long_prompt(round_index, wall)
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": LONG_MAX_TOKENS, **stream}
        return Probe(workload, body, None, LONG_PROMPT_WORDS + 30 + LONG_MAX_TOKENS)
    if workload == "accuracy":
        task = _task(round_index, wall)
        body = {"messages": [{"role": "user", "content": task.prompt}], "max_tokens": ACCURACY_MAX_TOKENS, **stream}
        if task.tools:
            body["tools"] = [dict(t) for t in task.tools]
        return Probe(workload, body, task, len(task.prompt) // 3 + 16 + 100 * len(task.tools) + ACCURACY_MAX_TOKENS)
    raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")


def tool_call_of(raw: bytes) -> tuple[str | None, str | None]:
    """The first tool call's (name, arguments JSON) in raw SSE frames or a whole body, in either protocol:
    OpenAI's ``tool_calls`` deltas (joined by index) or Anthropic's first ``tool_use`` block with its
    ``input_json_delta`` fragments (a whole message's ``input``). ``(None, None)`` without one."""
    chunks: list[dict[str, Any]] = []  # reason: SSE frames of either protocol, any shape
    name: str | None = None
    block_index: object = None
    parts: list[str] = []
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
        kind = obj.get("type")
        if kind == "content_block_start" and name is None:
            block = obj.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                name, block_index = str(block.get("name")), obj.get("index")
        elif kind == "content_block_delta" and name is not None and obj.get("index") == block_index:
            delta = obj.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "input_json_delta":
                parts.append(str(delta.get("partial_json", "")))
        elif kind == "message" and isinstance(obj.get("content"), list):
            for b in obj["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    return str(b.get("name")), json.dumps(b.get("input"))
            return None, None
        elif obj.get("object") == "chat.completion" and isinstance(obj.get("choices"), list) and obj["choices"]:
            message = obj["choices"][0].get("message") or {}
            calls = message.get("tool_calls") or []
            fn = calls[0].get("function") or {} if calls else {}
            return (fn.get("name"), fn.get("arguments")) if calls else (None, None)
        elif isinstance(obj.get("choices"), list):
            chunks.append(obj)
    if name is not None:
        return name, "".join(parts) or "{}"
    calls = assemble_chat_stream(chunks)["choices"][0]["message"].get("tool_calls") or []
    if not calls:
        return None, None
    return calls[0]["function"]["name"] or None, calls[0]["function"]["arguments"]
