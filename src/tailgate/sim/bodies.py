"""The non-stream answer bodies of chat and completions, shared by the live endpoints (``server``) and batch
lines (``batch_lines``): a leaf, so neither reaches into the other."""

from __future__ import annotations

from typing import Any

from tailgate.sim.engine import Sequence
from tailgate.sim.presets import EngineParams
from tailgate.sim.usage import usage as sim_usage
from tailgate.wire.types import ChatCompletionRequest, CompletionRequest

__all__ = ["chat_prompt", "finish_reason", "unary_object"]


def unary_object(
    params: EngineParams, req: ChatCompletionRequest | CompletionRequest, kind: str, seq: Sequence, created: int
) -> dict[str, Any]:
    """The non-stream body of a finished chat (``kind == "chat"``) or completions sequence."""
    thought = min(seq.reasoning, len(seq.out))
    text = "".join(seq.out[thought:])
    usage = sim_usage(params, seq, len(seq.out), reasoning=thought if seq.reasoning else None)
    if kind == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if seq.reasoning:
            message["reasoning_content"] = "".join(seq.out[:thought])
        if seq.tool_call is not None:
            call_id, name = seq.tool_call
            message["content"] = None
            message["tool_calls"] = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}]
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish_reason(seq),
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": seq.finish_reason}
        obj = "text_completion"
    return {
        "id": seq.id,
        "object": obj,
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": usage,
        "system_fingerprint": "tailgate-sim",
    }


def finish_reason(seq: Sequence) -> str | None:
    """A tool call that ended naturally finishes with ``tool_calls``, as OpenAI's does."""
    return "tool_calls" if seq.tool_call is not None and seq.finish_reason == "stop" else seq.finish_reason


def chat_prompt(req: ChatCompletionRequest) -> str:
    parts: list[str] = []
    for msg in req.messages:
        content = msg.content
        if isinstance(content, str):
            parts.append(content)
        elif content:
            parts.extend(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "\n".join(parts)
