"""Message content for a span, only where asked (``telemetry.content.enabled``): redacted by rule, then cut.

:class:`Redactor` holds the rules: the built-in ones (API keys, bearer tokens, e-mail addresses) and the config's
``redact`` patterns; each match becomes ``[REDACTED]``. Each message part is redacted (over its first
``max_chars`` + 256 characters, so a rule never runs over a megabyte and a secret across the cut is matched
whole), then cut to ``max_chars``. The shapes follow the GenAI conventions' JSON for ``gen_ai.input.messages`` /
``gen_ai.output.messages``: ``[{"role", "parts": [{"type": "text", "content"}]}]`` (text parts only: images,
audio and tool calls are named by their type, their data never copied).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

__all__ = ["BUILT_IN", "Redactor", "input_messages", "output_messages"]

BUILT_IN: Final[tuple[str, ...]] = (
    r"sk-[A-Za-z0-9_\-]{12,}",  # OpenAI-style and most vendors' API keys
    r"[Bb][Ee][Aa][Rr][Ee][Rr]\s+[A-Za-z0-9._~+/=\-]{8,}",  # a bearer token pasted into a prompt
    r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}",  # e-mail addresses
)
REDACTED: Final = "[REDACTED]"
_CUT: Final = "…"
_MARGIN: Final = 256


class Redactor:
    """Cut to ``max_chars``, then replace every match of the rules."""

    __slots__ = ("_rule", "max_chars")

    def __init__(self, patterns: Sequence[str] = (), max_chars: int = 2000) -> None:
        self._rule = re.compile("|".join(f"(?:{p})" for p in (*BUILT_IN, *patterns)))
        self.max_chars = max_chars

    def __call__(self, text: str) -> str:
        # Redacted over a window a little longer than what is kept, then cut: a secret across the cut is
        # matched whole (a rule never runs over a megabyte either).
        text = self._rule.sub(REDACTED, text[: self.max_chars + _MARGIN])
        return text if len(text) <= self.max_chars else text[: self.max_chars] + _CUT


def _parts(content: Any, clean: Redactor) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": clean(content)}]
    parts: list[dict[str, Any]] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                parts.append({"type": "text", "content": clean(block)})
            elif isinstance(block, dict):
                kind = block.get("type")
                text = block.get("text")
                if isinstance(text, str) and kind in ("text", "input_text", "output_text", None):
                    parts.append({"type": "text", "content": clean(text)})
                elif isinstance(kind, str):
                    parts.append({"type": kind})  # an image, a tool call…: named, its data never copied
    return parts


def input_messages(body: Any, clean: Redactor) -> str | None:
    """The request's messages as the conventions' JSON: chat and Messages ``messages`` (and Anthropic's ``system``),
    the Responses API's ``instructions`` + ``input``, a completion's ``prompt``; None when there is none."""
    if not isinstance(body, dict):
        return None
    out: list[dict[str, Any]] = []
    system = body.get("system", body.get("instructions"))
    if system is not None:
        out.append({"role": "system", "parts": _parts(system, clean)})
    messages = body.get("messages", body.get("input"))
    if isinstance(messages, str):
        out.append({"role": "user", "parts": _parts(messages, clean)})
    elif isinstance(messages, list):
        for m in messages:
            if isinstance(m, dict):
                role = m.get("role") if isinstance(m.get("role"), str) else "user"
                out.append({"role": role, "parts": _parts(m.get("content"), clean)})
    elif isinstance(prompt := body.get("prompt"), (str, list)):
        out.append({"role": "user", "parts": _parts(prompt, clean)})
    return json.dumps(out, ensure_ascii=False) if out else None


def output_messages(answer: Any, clean: Redactor) -> str | None:
    """A whole answer's messages as the conventions' JSON: chat ``choices[].message`` (completions:
    ``choices[].text``), an Anthropic message's ``content``, a Responses object's ``output``; None otherwise."""
    if not isinstance(answer, dict):
        return None
    out: list[dict[str, Any]] = []
    choices = answer.get("choices")
    if isinstance(choices, list):
        for c in choices:
            if not isinstance(c, dict):
                continue
            message = c.get("message")
            content = message.get("content") if isinstance(message, dict) else c.get("text")
            item: dict[str, Any] = {"role": "assistant", "parts": _parts(content, clean)}
            if isinstance(c.get("finish_reason"), str):
                item["finish_reason"] = c["finish_reason"]
            out.append(item)
    elif isinstance(answer.get("content"), list):  # an Anthropic message
        item = {"role": "assistant", "parts": _parts(answer["content"], clean)}
        if isinstance(answer.get("stop_reason"), str):
            item["finish_reason"] = answer["stop_reason"]
        out.append(item)
    elif isinstance(answer.get("output"), list):  # a Responses object
        for o in answer["output"]:
            if isinstance(o, dict) and o.get("type") == "message":
                out.append({"role": "assistant", "parts": _parts(o.get("content"), clean)})
    return json.dumps(out, ensure_ascii=False) if out else None
