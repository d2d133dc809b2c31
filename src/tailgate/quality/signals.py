"""Quality signals: what one chat answer says about the provider that served it, at no upstream cost.

Pure functions over JSON objects in OpenAI's chat shape: the request body the client sent and the answer —
a non-stream body, or a stream put back together by :func:`assemble_chat_stream`. Nothing here does I/O or
keeps state but a bounded cache of compiled tool schemas, so the request path can call :func:`check_chat`
after an answer and count what it returns.

Each signal is *checked* only where it can apply (the tool-call signals only on an answer with tool calls,
``json_invalid`` only when the request asked for ``response_format: json_object``), so a count has its own
denominator: :class:`Observation` says whether a signal was checked and whether it hit.

Signals (the names are the store's, the leaderboard's and the ``signal`` label's):

* ``tool_args_invalid_json``: a tool call whose ``arguments`` do not parse as a JSON object.
* ``tool_args_schema_mismatch``: arguments that parse but do not match the declared function's
  ``parameters`` JSON Schema (draft 2020-12 semantics unless the schema names its draft; a schema that is
  itself invalid is the client's problem and is not judged). The keywords tool schemas use are checked by
  plain Python compiled once per schema (:func:`_fast`, cross-checked against ``jsonschema`` in the tests);
  any other keyword hands the schema to ``jsonschema``.
* ``tool_unknown_name``: a tool call naming a function the request did not declare.
* ``empty_answer``: finish ``stop`` (or none) with no content, no tool call (reasoning alone does not
  count as an answer). An answer cut by ``length`` is the client's budget and is not judged.
* ``content_filtered``: finish ``content_filter`` (OpenAI, Azure) or ``sensitive`` (DeepSeek) with no
  output at all.
* ``json_invalid``: ``response_format`` ``json_object`` / ``json_schema`` asked, the answer (finished by
  ``stop``) does not parse as JSON.
* ``reasoning_missing``: thinking was asked for (see :func:`thinking_requested`) and the answer has no
  reasoning text and reports no reasoning tokens.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import msgspec
from jsonschema import exceptions as jsonschema_exceptions

__all__ = [
    "SIGNALS",
    "Observation",
    "assemble_chat_stream",
    "check_chat",
    "content_filtered",
    "empty_answer",
    "hits",
    "json_invalid",
    "reasoning_missing",
    "thinking_requested",
    "tool_call_problems",
]

TOOL_ARGS_INVALID_JSON = "tool_args_invalid_json"
TOOL_ARGS_SCHEMA_MISMATCH = "tool_args_schema_mismatch"
TOOL_UNKNOWN_NAME = "tool_unknown_name"
EMPTY_ANSWER = "empty_answer"
CONTENT_FILTERED = "content_filtered"
JSON_INVALID = "json_invalid"
REASONING_MISSING = "reasoning_missing"

SIGNALS: tuple[str, ...] = (
    TOOL_ARGS_INVALID_JSON,
    TOOL_ARGS_SCHEMA_MISMATCH,
    TOOL_UNKNOWN_NAME,
    EMPTY_ANSWER,
    CONTENT_FILTERED,
    JSON_INVALID,
    REASONING_MISSING,
)
"""Every live-traffic signal, in the order tables show them."""

FILTER_REASONS = frozenset({"content_filter", "sensitive"})
_EFFORTS_THAT_THINK = frozenset({"low", "medium", "high"})


@dataclass(frozen=True, slots=True)
class Observation:
    """One signal checked on one answer: ``hit`` when the answer shows the problem."""

    signal: str
    hit: bool
    detail: str = ""
    """Why it hit (for logs and tests; never prompt text, at most a tool name and a schema path)."""


# ---- the answer's parts ------------------------------------------------------------------------


def _choice(response: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return choices[0]
    return {}


def _message(response: Mapping[str, Any]) -> Mapping[str, Any]:
    message = _choice(response).get("message")
    return message if isinstance(message, Mapping) else {}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return "".join(str(p.get("text", "")) for p in value if isinstance(p, Mapping))
    return ""


def _reasoning_text(message: Mapping[str, Any]) -> str:
    return _text(message.get("reasoning_content")) or _text(message.get("reasoning"))


def _reasoning_tokens(response: Mapping[str, Any]) -> int:
    usage = response.get("usage")
    if not isinstance(usage, Mapping):
        return 0
    details = usage.get("completion_tokens_details")
    n = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    if n is None:
        n = usage.get("reasoning_tokens")
    return n if isinstance(n, int) and not isinstance(n, bool) else 0


def _tool_calls(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []


# ---- the signals, one function each -------------------------------------------------------------


def declared_tools(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request's function tools: name → its ``parameters`` schema (``None`` when it declared none)."""
    out: dict[str, Any] = {}
    tools = request.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        # dict first: a decoded request's objects are dicts, and an isinstance against the Mapping ABC costs
        # ~5x more (16 tools: half the cost of checking a tool call)
        if not (type(tool) is dict or isinstance(tool, Mapping)):
            continue
        fn = tool.get("function")
        if (
            tool.get("type", "function") == "function"
            and (type(fn) is dict or isinstance(fn, Mapping))
            and isinstance(name := fn.get("name"), str)
        ):
            out[name] = fn.get("parameters")
    return out


Check = Callable[[Any, str], "str | None"]
"""A compiled schema: ``(value, path) → None`` when valid, else why not (``path: keyword value``)."""

_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "format", "deprecated", "readOnly", "writeOnly"}
)
_FAST_KEYWORDS = _ANNOTATIONS | {
    "type", "properties", "required", "enum", "const", "additionalProperties", "items", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems",
}  # fmt: skip
_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
}


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _fast(schema: Any) -> Check | None:
    """The schema compiled to plain Python when it uses only the keywords tool schemas use (type, properties,
    required, enum, const, additionalProperties, items, numeric and length bounds, annotations); ``None`` for
    anything else (``$ref``, ``anyOf``, ``pattern`` …, or a ``$schema`` naming a draft): jsonschema decides."""
    if isinstance(schema, bool):
        return (lambda v, p: None) if schema else (lambda v, p: f"{p}: false schema")
    if not isinstance(schema, dict) or not set(schema) <= _FAST_KEYWORDS:
        return None
    checks: list[Check] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not kinds or not all(isinstance(k, str) and k in _TYPES for k in kinds):
            return None
        tests = [_TYPES[k] for k in kinds]
        checks.append(lambda v, p: None if any(t(v) for t in tests) else f"{p}: type {kind!r}")
    if "enum" in schema:
        enum = schema["enum"]
        if not isinstance(enum, list):
            return None
        checks.append(lambda v, p: None if any(_json_equal(v, e) for e in enum) else f"{p}: enum {enum!r}")
    if "const" in schema:
        const = schema["const"]
        checks.append(lambda v, p: None if _json_equal(v, const) else f"{p}: const {const!r}")
    for key, cmp in (
        ("minimum", lambda v, b: v >= b),
        ("maximum", lambda v, b: v <= b),
        ("exclusiveMinimum", lambda v, b: v > b),
        ("exclusiveMaximum", lambda v, b: v < b),
    ):
        if key in schema:
            bound = schema[key]
            if isinstance(bound, bool) or not isinstance(bound, int | float):
                return None
            checks.append(_bound(key, bound, cmp, _TYPES["number"]))
    for key, of, at_least in (
        ("minLength", str, True),
        ("maxLength", str, False),
        ("minItems", list, True),
        ("maxItems", list, False),
    ):
        if key in schema:
            size = schema[key]
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                return None
            checks.append(_size(key, size, of, at_least))
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        props = schema.get("properties", {})
        required = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        if not isinstance(props, dict) or not isinstance(required, list):
            return None
        compiled = {name: _fast(sub) for name, sub in props.items()}
        extra_check = _fast(extra)
        if any(c is None for c in compiled.values()) or extra_check is None:
            return None
        checks.append(_object(compiled, required, extra_check))  # type: ignore[arg-type]
    if "items" in schema:
        item = _fast(schema["items"])
        if item is None:
            return None
        checks.append(_items(item))

    def check(value: Any, path: str) -> str | None:
        for c in checks:
            if (why := c(value, path)) is not None:
                return why
        return None

    return check


def _bound(key: str, bound: float, cmp: Callable[[Any, float], bool], number: Callable[[Any], bool]) -> Check:
    return lambda v, p: None if not number(v) or cmp(v, bound) else f"{p}: {key} {bound!r}"


def _size(key: str, size: int, of: type[str] | type[list[Any]], at_least: bool) -> Check:
    def check(v: Any, p: str) -> str | None:
        if not isinstance(v, of):
            return None
        n = len(v)  # a string's length in code points, as JSON Schema counts it
        return None if (n >= size if at_least else n <= size) else f"{p}: {key} {size}"

    return check


def _object(props: dict[str, Check], required: list[Any], extra: Check) -> Check:
    def check(v: Any, p: str) -> str | None:
        if not isinstance(v, dict):
            return None
        missing = [r for r in required if r not in v]
        if missing:
            return f"{p}: required {missing[:1]!r}"
        for name, value in v.items():
            sub = props.get(name, extra)
            where = name if p == "(root)" else f"{p}/{name}"
            if (why := sub(value, where)) is not None:
                return why
        return None

    return check


def _items(item: Check) -> Check:
    def check(v: Any, p: str) -> str | None:
        if not isinstance(v, list):
            return None
        for i, x in enumerate(v):
            if (why := item(x, f"{i}" if p == "(root)" else f"{p}/{i}")) is not None:
                return why
        return None

    return check


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str | bytes) -> Check | None:
    """The compiled check of one schema (``None`` when the schema itself is invalid): plain Python for the
    common subset (:func:`_fast`), else a ``jsonschema`` validator of the schema's draft."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema_exceptions.SchemaError:
        return None
    if (fast := _fast(schema)) is not None:
        return fast
    validator = cls(schema)

    def slow(value: Any, path: str) -> str | None:
        error = jsonschema_exceptions.best_match(validator.iter_errors(value))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return f"{where}: {error.validator} {error.validator_value!r}"

    return slow


def _schema_error(schema: Any, value: Any) -> str | None:
    if not isinstance(schema, Mapping) or not schema:
        return None
    try:
        key = msgspec.json.encode(schema)  # the cache key: ~10x cheaper than json.dumps, same key order
    except (TypeError, msgspec.EncodeError):
        return None
    check = _validator(key)
    if check is None:
        return None
    why = check(value, "(root)")
    return None if why is None else why[:200]


def tool_call_problems(request: Mapping[str, Any], response: Mapping[str, Any]) -> list[Observation]:
    """The three tool-call signals, checked once per answer that has tool calls (none otherwise).

    Each hits when *any* call of the answer shows the problem; the detail names the first such call. An answer
    cut by ``length`` is the client's budget: its calls are not judged (their arguments may be cut mid-way)."""
    calls = _tool_calls(_message(response))
    if not calls or _choice(response).get("finish_reason") == "length":
        return []
    declared = declared_tools(request)
    unknown = bad_json = mismatch = ""
    for call in calls:
        fn = call.get("function")
        fn = fn if isinstance(fn, Mapping) else {}
        name = fn.get("name")
        if not isinstance(name, str) or name not in declared:
            unknown = unknown or f"unknown function {str(name)[:64]!r}"
            continue
        raw = fn.get("arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            args = None
        if not isinstance(args, dict):
            bad_json = bad_json or f"{name}: arguments are not a JSON object"
            continue
        if (why := _schema_error(declared[name], args)) is not None:
            mismatch = mismatch or f"{name}: {why}"
    return [
        Observation(TOOL_ARGS_INVALID_JSON, bool(bad_json), bad_json),
        Observation(TOOL_ARGS_SCHEMA_MISMATCH, bool(mismatch), mismatch),
        Observation(TOOL_UNKNOWN_NAME, bool(unknown), unknown),
    ]


def _has_output(message: Mapping[str, Any]) -> bool:
    return bool(_text(message.get("content")).strip() or _tool_calls(message) or _text(message.get("refusal")))


def content_filtered(response: Mapping[str, Any]) -> Observation:
    """``finish_reason`` ``content_filter`` or ``sensitive`` with no output (content, tool call, refusal)."""
    reason = _choice(response).get("finish_reason")
    hit = reason in FILTER_REASONS and not _has_output(_message(response))
    return Observation(CONTENT_FILTERED, hit, f"finish_reason {reason}" if hit else "")


def empty_answer(response: Mapping[str, Any]) -> Observation | None:
    """An answer that ended on its own with nothing in it; ``None`` (not checked) when it was cut by
    ``length`` or filtered (that is :func:`content_filtered`)."""
    reason = _choice(response).get("finish_reason")
    if reason == "length" or reason in FILTER_REASONS:
        return None
    hit = not _has_output(_message(response))
    return Observation(EMPTY_ANSWER, hit, f"finish_reason {reason}, no content" if hit else "")


def json_invalid(request: Mapping[str, Any], response: Mapping[str, Any]) -> Observation | None:
    """``response_format`` asked for JSON and the finished answer does not parse; ``None`` when not asked,
    when the answer is a tool call, or when it was cut short (``length`` / filtered)."""
    fmt = request.get("response_format")
    if not isinstance(fmt, Mapping) or fmt.get("type") not in ("json_object", "json_schema"):
        return None
    message = _message(response)
    if _tool_calls(message) or _choice(response).get("finish_reason") not in ("stop", None):
        return None
    text = _text(message.get("content")).strip()
    try:
        json.loads(text)
    except ValueError:
        return Observation(JSON_INVALID, True, f"{fmt.get('type')} asked, answer does not parse")
    return Observation(JSON_INVALID, False)


def thinking_requested(request: Mapping[str, Any]) -> bool:
    """Did the client ask for thinking in any dialect the gateway forwards?

    ``reasoning_effort`` ``low`` / ``medium`` / ``high`` (OpenAI; ``none`` and ``minimal`` are not asked),
    ``thinking: {type: enabled}`` (DeepSeek, Zhipu, Volcengine, Anthropic), ``enable_thinking: true``
    (DashScope, SiliconFlow), ``chat_template_kwargs.enable_thinking`` / ``.thinking`` true (vLLM, SGLang).
    A model that thinks by default without being asked is not judged."""
    if request.get("reasoning_effort") in _EFFORTS_THAT_THINK:
        return True
    thinking = request.get("thinking")
    if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
        return True
    if request.get("enable_thinking") is True:
        return True
    kwargs = request.get("chat_template_kwargs")
    return isinstance(kwargs, Mapping) and (kwargs.get("enable_thinking") is True or kwargs.get("thinking") is True)


def reasoning_missing(request: Mapping[str, Any], response: Mapping[str, Any]) -> Observation | None:
    """Thinking asked, none shown: no reasoning text and no reasoning tokens; ``None`` when not asked."""
    if not thinking_requested(request):
        return None
    hit = not _reasoning_text(_message(response)) and _reasoning_tokens(response) == 0
    return Observation(REASONING_MISSING, hit, "thinking asked, no reasoning in the answer" if hit else "")


def check_chat(request: Mapping[str, Any], response: Mapping[str, Any]) -> list[Observation]:
    """Every signal that applies to this request and its (non-stream or assembled) answer."""
    out = tool_call_problems(request, response)
    out.append(content_filtered(response))
    for maybe in (empty_answer(response), json_invalid(request, response), reasoning_missing(request, response)):
        if maybe is not None:
            out.append(maybe)
    return out


def hits(observations: Iterable[Observation]) -> list[str]:
    """The names of the signals that hit."""
    return [o.signal for o in observations if o.hit]


# ---- streams ------------------------------------------------------------------------------------


def assemble_chat_stream(chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A chat stream's ``chat.completion.chunk`` objects (decoded ``data:`` payloads) put back together as
    the non-stream body of its first choice: content, reasoning, tool calls (fragments joined by
    ``index``), ``finish_reason`` and the last ``usage`` seen."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: Any = None
    for chunk in chunks:
        if isinstance(chunk.get("usage"), Mapping):
            usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason") is not None:
                finish = choice["finish_reason"]
            delta = choice.get("delta")
            if not isinstance(delta, Mapping):
                continue
            if isinstance(delta.get("content"), str):
                content.append(delta["content"])
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    reasoning.append(delta[key])
            for part in delta.get("tool_calls") or ():
                if not isinstance(part, Mapping):
                    continue
                index = part.get("index", 0)
                call = calls.setdefault(
                    index if isinstance(index, int) else 0,
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if part.get("id"):
                    call["id"] = part["id"]
                fn = part.get("function")
                if isinstance(fn, Mapping):
                    if isinstance(fn.get("name"), str):
                        call["function"]["name"] += fn["name"]
                    if isinstance(fn.get("arguments"), str):
                        call["function"]["arguments"] += fn["arguments"]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) if content else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    body: dict[str, Any] = {"object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    body["choices"][0]["finish_reason"] = finish
    if usage is not None:
        body["usage"] = usage
    return body
