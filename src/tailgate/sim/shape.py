"""What a chat request asks the simulated model to produce: thinking, a tool call, vendor fields.

Each provider dialect (``presets.DIALECTS``) accepts what the real thing accepts: api.openai.com refuses
vLLM's sampling extensions with ``Unrecognized request argument supplied``; vLLM, SGLang and the MaaS
platforms serving DeepSeek/Qwen accept them, and honour ``ignore_eos``, ``min_tokens`` and
``stream_options.continuous_usage_stats``. Thinking is switched by each provider's own field.
"""

from __future__ import annotations

import random
from typing import Any

import msgspec

from tailgate.sim.presets import EngineParams
from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError
from tailgate.wire.types import ChatCompletionRequest, CompletionRequest

VENDOR_FIELDS = (
    "top_k",
    "repetition_penalty",
    "min_p",
    "ignore_eos",
    "min_tokens",
    "enable_thinking",
    "thinking_budget",
    "thinking",
    "chat_template_kwargs",
)
"""Top-level fields vLLM / SGLang / MaaS providers accept and api.openai.com refuses."""

_EFFORT = {"none": 0.0, "minimal": 0.25, "low": 0.5, "medium": 1.0, "high": 2.0}
"""``reasoning_effort`` scales the preset's median reasoning length (``none`` turns thinking off)."""


def refuse_vendor_fields(req: ChatCompletionRequest | CompletionRequest) -> WireError | None:
    """The 400 api.openai.com answers a request carrying a vendor field (the ``openai`` dialect)."""
    for name in VENDOR_FIELDS:
        if getattr(req, name, None) is not None:
            return wire_errors.invalid_request(f"Unrecognized request argument supplied: {name}", name)
    if req.stream_options is not None and req.stream_options.continuous_usage_stats is not None:
        name = "stream_options.continuous_usage_stats"
        return wire_errors.invalid_request(f"Unrecognized request argument supplied: {name}", name)
    return None


def thinking_on(req: ChatCompletionRequest, params: EngineParams) -> bool:
    """Thinking mode for this request: the preset's default, switched by the provider's own fields.

    ``chat_template_kwargs: {enable_thinking | thinking: bool}`` (vLLM / SGLang serving Qwen3 or
    DeepSeek-V3.1+), ``enable_thinking: bool`` (DashScope, SiliconFlow), ``thinking: {type:
    enabled | disabled}`` (Volcengine, Zhipu, DeepSeek), ``reasoning_effort: none``. The openai
    dialect refuses all but the last before this is asked.
    """
    on = params.thinking
    kwargs = req.chat_template_kwargs or {}
    for key in ("enable_thinking", "thinking"):
        if isinstance(kwargs.get(key), bool):
            on = kwargs[key]
    if req.enable_thinking is not None:
        on = req.enable_thinking
    if req.thinking is not None:
        kind = req.thinking.get("type")
        if kind in ("enabled", "auto"):
            on = True
        elif kind == "disabled":
            on = False
    if req.reasoning_effort == "none":
        on = False
    return on


def _budget(req: ChatCompletionRequest) -> int | None:
    kwargs = req.chat_template_kwargs or {}
    for value in (req.thinking_budget, (req.thinking or {}).get("budget_tokens"), kwargs.get("thinking_budget")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def reasoning_tokens(req: ChatCompletionRequest, params: EngineParams, rng: random.Random) -> int:
    """How many tokens this request thinks: lognormal around the preset's median (× ``reasoning_effort``),
    at most the request's thinking budget; 0 with thinking off."""
    if not thinking_on(req, params):
        return 0
    median = params.reasoning_median * _EFFORT.get(req.reasoning_effort or "medium", 1.0)
    draw = median * (rng.lognormvariate(0.0, params.reasoning_sigma) if params.reasoning_sigma > 0 else 1.0)
    n = max(1, round(draw))
    budget = _budget(req)
    return min(n, budget) if budget is not None else n


# ---- tool calls ----------------------------------------------------------------------------------

_WORDS = ("Paris", "Beijing", "tomorrow", "celsius", "report", "latency", "summary", "gateway", "today")


def tool_call(req: ChatCompletionRequest, params: EngineParams, rng: random.Random) -> tuple[str, str] | None:
    """``(function name, arguments JSON)`` when this request is answered with a tool call, else None.

    With ``tools``: ``tool_choice`` ``none`` never calls, ``required`` or a named function always does,
    ``auto`` (the default) does for ``tool_call_rate`` of the user's turns and ``tool_result_call_rate``
    (0 by default) of turns answering a tool result, so an agent's loop ends. Arguments follow the
    function's JSON-schema ``parameters`` (every property, plausible values) — unless ``tool_arguments``
    names a declared function: then the first such, with its given arguments.
    """
    functions = [
        t["function"]
        for t in req.tools or ()
        if isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
    ]
    choice = req.tool_choice
    if not functions or choice == "none":
        return None
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        picked = next((f for f in functions if f["name"] == wanted), None)
        if picked is None:
            return None
    elif choice == "required":
        picked = rng.choice(functions)
    else:
        rate = params.tool_result_call_rate if answers_tool_result(req) else params.tool_call_rate
        if rng.random() >= rate:
            return None
        picked = rng.choice(functions)
    if params.tool_arguments:
        declared = {f["name"] for f in functions}
        for name, arguments in params.tool_arguments:
            if name in declared and (not isinstance(choice, dict) or name == picked["name"]):
                return name, arguments
    args = _value(picked.get("parameters") or {"type": "object", "properties": {}}, rng, 0)
    return picked["name"], msgspec.json.encode(args).decode()


def answers_tool_result(req: ChatCompletionRequest) -> bool:
    """Whether this turn answers a tool result: a ``tool`` message after the last assistant message.

    The whole trailing turn counts, not only the last message: a translated Anthropic turn puts its
    ``tool`` messages first and the user's text blocks (Claude Code's reminders) after them.
    """
    for message in reversed(req.messages):
        if message.role == "tool":
            return True
        if message.role == "assistant":
            return False
    return False


def _value(schema: Any, rng: random.Random, depth: int) -> Any:
    if not isinstance(schema, dict):
        return None
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties") or {}
        if depth > 4 or not isinstance(props, dict):
            return {}
        return {name: _value(sub, rng, depth + 1) for name, sub in props.items()}
    if kind == "array":
        return [] if depth > 4 else [_value(schema.get("items") or {"type": "string"}, rng, depth + 1)]
    if kind == "integer":
        return rng.randint(1, 100)
    if kind == "number":
        return round(rng.uniform(0, 100), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    return rng.choice(_WORDS)


def fragments(arguments: str, size: int = 4) -> list[str]:
    """Split an arguments JSON into the fragments a model streams (one per decoded token)."""
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]
