"""Before the first byte: is this chat stream an answer, or a non-answer that another route could replace?

A provider's content-filter refusal with no output, or an empty answer, is decided in its first chunks — before
anything worth showing reached the client. :class:`FirstByteGate` reads a stream's decoded chunks one by one while
the caller holds them back, and says when to release them (an answer) or that the stream ended as a non-answer
(the caller may then retry on another route, having sent the client nothing). :func:`non_answer` says the same of
a non-stream body. Pure: no I/O, no clock; the caller decides what to do with a verdict.

What counts as output: content (not whitespace alone), a tool call, a refusal — and reasoning. A thinking model's
reasoning is released as it comes (holding it would hold the time to first token for the whole thinking), so a
stream that thinks and then ends empty is an answer here; ``signals.empty_answer`` still counts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from tailgate.quality.signals import FILTER_REASONS, content_filtered, empty_answer

__all__ = ["FirstByteGate", "Verdict", "non_answer"]

Verdict = Literal["hold", "answer", "content_filtered", "empty_answer"]
"""``hold``: nothing decided yet, keep holding; ``answer``: release everything held and relay the rest;
``content_filtered`` / ``empty_answer``: the stream ended with no output for that reason."""


class FirstByteGate:
    """Feed a chat stream's decoded chunks in order; the first verdict other than ``hold`` is final."""

    __slots__ = ("verdict",)

    def __init__(self) -> None:
        self.verdict: Verdict = "hold"

    def feed(self, chunk: Mapping[str, Any]) -> Verdict:
        if self.verdict != "hold":
            return self.verdict
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, Mapping):
                continue
            delta = choice.get("delta")
            if isinstance(delta, Mapping) and _has_output(delta):
                self.verdict = "answer"
                return self.verdict
            reason = choice.get("finish_reason")
            if reason is not None:
                if reason in FILTER_REASONS:
                    self.verdict = "content_filtered"
                elif reason == "stop":
                    self.verdict = "empty_answer"
                else:  # length (the client's budget), tool_calls, anything else: not ours to replace
                    self.verdict = "answer"
                return self.verdict
        return self.verdict

    def end(self) -> Verdict:
        """The stream ended (``[DONE]`` or the connection): a stream still held without any finish reason is
        empty."""
        if self.verdict == "hold":
            self.verdict = "empty_answer"
        return self.verdict


def _has_output(delta: Mapping[str, Any]) -> bool:
    content = delta.get("content")
    if isinstance(content, str) and content.strip():
        return True
    if delta.get("tool_calls") or delta.get("refusal"):
        return True
    return any(isinstance(delta.get(k), str) and delta[k] for k in ("reasoning_content", "reasoning"))


def non_answer(response: Mapping[str, Any]) -> Literal["content_filtered", "empty_answer"] | None:
    """The non-stream verdict: ``content_filtered`` or ``empty_answer`` (as the signals judge them), else ``None``."""
    if content_filtered(response).hit:
        return "content_filtered"
    empty = empty_answer(response)
    if empty is not None and empty.hit:
        message = (response.get("choices") or [{}])[0].get("message") or {}
        if not (message.get("reasoning_content") or message.get("reasoning")):
            return "empty_answer"
    return None
