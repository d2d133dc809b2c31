"""The answer-quality faults (``accuracy``, ``tool_call_break_rate``, ``content_filter_rate``,
``empty_answer_rate``): how one answer is degraded, decided when its sequence is built.

Every draw comes from the provider's seeded ``rng`` and only while such a fault is set, so a healthy
provider's answers (and their random stream) are exactly what they were without this module. What was
served is named as the quality signal that should catch it (``tailgate.quality.signals``) and lands in
the truth row's ``degraded``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence as Seq
from typing import Any

from tailgate.accuracy import solve_call, wrong_call
from tailgate.sim.faults import Faults

__all__ = ["accuracy", "break_tool_call", "canary_call", "no_output"]


def accuracy(faults: Faults, preset: float) -> float:
    """The share of canary questions answered right now: the ``accuracy`` fault while set, else the preset's."""
    return faults.accuracy if faults.active and faults.accuracy is not None else preset


def canary_call(prompt: str, name: str, right: float, rng: random.Random) -> tuple[str, bool] | None:
    """The arguments JSON of a ``tool`` canary's call of ``name`` (``None`` when the prompt asks no such call)
    and whether it was answered wrong (with probability ``1 - right``)."""
    asked = solve_call(prompt)
    if asked is None or asked[0] != name:
        return None
    args, wrong = asked[1], rng.random() >= right
    if wrong:
        args = wrong_call(args, rng)
    return json.dumps(args), wrong


def no_output(faults: Faults, rng: random.Random) -> tuple[str, str | None] | None:
    """``(degradation, forced finish reason)`` when this answer is to be filtered or empty, else ``None``."""
    if not faults.active or not (faults.content_filter_rate or faults.empty_answer_rate):
        return None
    draw = rng.random()
    if draw < faults.content_filter_rate:
        return "content_filtered", faults.content_filter_reason
    if draw < faults.content_filter_rate + faults.empty_answer_rate:
        return "empty_answer", None
    return None


def break_tool_call(
    faults: Faults, tools: Seq[Any] | None, name: str, arguments: str, rng: random.Random
) -> tuple[str, str, str] | None:
    """``(name, arguments, degradation)`` of a call served broken (``tool_call_break_rate``), else ``None``."""
    if not faults.active or not faults.tool_call_break_rate or rng.random() >= faults.tool_call_break_rate:
        return None
    kind = rng.choice(faults.tool_call_break_kinds)
    if kind == "unknown_tool":
        declared = {_name(t) for t in tools or ()}
        wrong = name + "_v2"
        while wrong in declared:
            wrong += "x"
        return wrong, arguments, "tool_unknown_name"
    if kind == "schema_mismatch" and (broken := _mismatch(_schema(tools, name), arguments)) is not None:
        return name, broken, "tool_args_schema_mismatch"
    # invalid_json, or a schema with nothing to break: the arguments cut in half (never a whole object).
    return name, arguments[: max(1, len(arguments) // 2)].rstrip("}") or "{", "tool_args_invalid_json"


def _name(tool: Any) -> str | None:
    fn = tool.get("function") if isinstance(tool, dict) else None
    return fn.get("name") if isinstance(fn, dict) else None


def _schema(tools: Seq[Any] | None, name: str) -> dict[str, Any] | None:
    for tool in tools or ():
        if _name(tool) == name:
            params = tool["function"].get("parameters")
            return params if isinstance(params, dict) else None
    return None


def _mismatch(schema: dict[str, Any] | None, arguments: str) -> str | None:
    """Valid JSON that the schema refuses: a required property dropped, else one given the wrong type."""
    if schema is None:
        return None
    try:
        args = json.loads(arguments)
    except ValueError:
        return None
    if not isinstance(args, dict):
        return None
    required = [r for r in schema.get("required") or () if isinstance(r, str)]
    if required:
        args.pop(required[0], None)
        return json.dumps(args)
    props = schema.get("properties")
    for prop, sub in props.items() if isinstance(props, dict) else ():
        kind = sub.get("type") if isinstance(sub, dict) else None
        if kind is not None:
            args[prop] = 12345 if kind == "string" else "not-a-" + str(kind)
            return json.dumps(args)
    return None
