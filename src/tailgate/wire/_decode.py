"""Request decoding: one msgspec pass, and OpenAI-style 400s that name the offending field.

The error path may re-parse the body to quote the bad value; it runs only for bad requests.
Messages follow the wording api.openai.com uses (``'messages' is a required property``,
``-1 is less than the minimum of 1 - 'n'``); ``param`` is the dotted path (``messages.0.role``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

import msgspec
import msgspec.inspect

from tailgate.wire.errors import WireError, invalid_request

_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_MISSING = re.compile(r"Object missing required field `(?P<field>[^`]+)`")
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<field>[^`]+)`")
_TYPE = re.compile(r"Expected `(?P<want>[^`]+)`, got `(?P<got>[^`]+)`")
_BOUND = re.compile(r"Expected `(?P<kind>\w+)` (?P<op>>=|>|<=|<) (?P<bound>\S+)")
_LENGTH = re.compile(r"Expected `(?P<kind>\w+)` of length (?P<op>>=|<=) (?P<n>\d+)")
_ENUM = re.compile(r"Invalid enum value (?P<value>.+)")
_JSON_POS = re.compile(r"^(?:JSON is malformed: )?(?P<what>.*?) \(byte (?P<pos>\d+)\)$")

_ARTICLE = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "a boolean",
    "object": "an object",
    "array": "an array",
    "null": "null",
}
_BOUND_TEXT = {
    ">=": "is less than the minimum of",
    ">": "is less than or equal to the minimum of",
    "<=": "is greater than the maximum of",
    "<": "is greater than or equal to the maximum of",
}
_PY_ARTICLE: dict[type, str] = {str: "a string", int: "an integer", list: "an array"}
_MAX_QUOTE = 80

_UNSET: Any = object()


def param_from_path(path: str) -> str | None:
    """``.messages[0].role`` → ``messages.0.role``; a dict value (``[...]``) names its dict."""
    parts: list[str] = []
    for match in _SEGMENT.finditer(path):
        key, index = match.groups()
        if key is None and index == "...":
            break  # msgspec does not say which key; naming the dict is the most we can do
        parts.append(key if key is not None else index)
    return ".".join(parts) or None


def _quote(value: Any) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= _MAX_QUOTE else text[: _MAX_QUOTE - 1] + "…"


def _value_at(body: bytes, param: str | None) -> Any:
    try:
        value: Any = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return _UNSET
    for part in param.split(".") if param else ():
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _UNSET
    return value


def _describe(types: str) -> str:
    names = [name.strip() for name in types.split("|")]
    if len(names) > 1 and "null" in names:
        names.remove("null")  # `int | null` reads as "expected an integer", as OpenAI words it
    return " or ".join(_ARTICLE.get(name, name) for name in names)


def _join(parent: str | None, child: str) -> str:
    return f"{parent}.{child}" if parent else child


def validation_error(exc: msgspec.ValidationError, body: bytes, enums: Mapping[str, Sequence[str]]) -> WireError:
    """A 400 for a body that is valid JSON but not a valid request."""
    at = _AT.match(str(exc))
    msg, path = (at["msg"], at["path"] or "") if at else (str(exc), "")
    param = param_from_path(path)
    where = f"'{param}'" if param else "the request body"

    if missing := _MISSING.fullmatch(msg):
        field = missing["field"]
        suffix = f" - '{param}'" if param else ""
        return invalid_request(f"'{field}' is a required property{suffix}", _join(param, field))
    if unknown := _UNKNOWN.fullmatch(msg):
        name = _join(param, unknown["field"])
        return invalid_request(f"Unrecognized request argument supplied: {name}", name)
    if wrong := _TYPE.fullmatch(msg):
        want, got = _describe(wrong["want"]), _describe(wrong["got"])
        return invalid_request(f"Invalid type for {where}: expected {want}, but got {got} instead.", param)
    if bound := _BOUND.fullmatch(msg):
        limit = bound["bound"].removesuffix(".0")
        value = _value_at(body, param)
        shown = _quote(value) if value is not _UNSET else "The value"
        return invalid_request(f"{shown} {_BOUND_TEXT[bound['op']]} {limit} - {where}", param)
    if length := _LENGTH.fullmatch(msg):
        kind, n = ("array", "an array") if length["kind"] == "array" else ("string", "a string")
        if length["op"] == ">=" and length["n"] == "1":
            return invalid_request(
                f"Invalid {where}: empty {kind}. Expected {n} with minimum length 1, but got an empty {kind} instead.",
                param,
            )
        bound_word = "minimum" if length["op"] == ">=" else "maximum"
        return invalid_request(f"Invalid {where}: expected {n} with {bound_word} length {length['n']}.", param)
    if enum := _ENUM.fullmatch(msg):
        allowed = enums.get(param.rsplit(".", 1)[-1] if param else "")
        hint = f" Supported values are: {', '.join(repr(a) for a in allowed)}." if allowed else ""
        return invalid_request(f"Invalid value for {where}: {enum['value']}.{hint}", param)
    return invalid_request(f"Invalid value for {where}: {msg}.", param)


def json_error(exc: msgspec.DecodeError, body: bytes) -> WireError:
    """A 400 for a body that is not JSON, saying where parsing stopped."""
    if not body.strip():
        return invalid_request("The request body is empty; expected a JSON object.")
    text = str(exc)
    found = _JSON_POS.match(text)
    if found:
        what, pos = found["what"], int(found["pos"])
    elif "truncated" in text:
        what, pos = "unexpected end of input", len(body)
    else:
        return invalid_request(f"The request body is not valid JSON: {text}.")
    line = body.count(b"\n", 0, pos) + 1
    column = pos - (body.rfind(b"\n", 0, pos) + 1) + 1
    return invalid_request(f"The request body is not valid JSON: {what} at line {line} column {column} (byte {pos}).")


MAX_INT = 2**63 - 1
"""The largest integer a request field may carry (int64, as OpenAI's ``seed``); beyond it is a 400."""


def nested_too_deeply() -> WireError:
    """A 400 for JSON nested past the decoder's recursion limit (about 1,000 levels)."""
    return invalid_request("The request body is nested too deeply to parse (JSON deeper than about 1000 levels).")


def parse_json(body: bytes) -> Any:
    """Any JSON document, or a 400 ``WireError`` saying what is wrong (not JSON, not UTF-8, too deep)."""
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise json_error(exc, body) from exc
    except RecursionError:
        raise nested_too_deeply() from None


def _int_fields(cls: type[msgspec.Struct]) -> tuple[str, ...]:
    """The top-level fields of ``cls`` that may hold an integer."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    names = []
    for f in info.fields:
        kinds = f.type.types if isinstance(f.type, msgspec.inspect.UnionType) else (f.type,)
        if any(isinstance(k, msgspec.inspect.IntType) for k in kinds):
            names.append(f.name)
    return tuple(names)


def check_int_range(request: msgspec.Struct, fields: Sequence[str]) -> None:
    """Integers beyond int64 in ``fields`` are refused: they overflow providers, pacers and counters."""
    for name in fields:
        value = getattr(request, name)
        if type(value) is int and not -MAX_INT - 1 <= value <= MAX_INT:
            if value > 0:
                raise invalid_request(f"{_quote(value)} is greater than the maximum of {MAX_INT} - '{name}'", name)
            raise invalid_request(f"{_quote(value)} is less than the minimum of {-MAX_INT - 1} - '{name}'", name)


def check_prompt(value: str | list[str | int | list[int]], name: str) -> None:
    """A prompt/input must be a string, or a non-empty list of strings, of tokens, or of token lists.

    msgspec allows one list type per union, so ``list[str | int | list[int]]`` also admits
    ``["a", 1]``; OpenAI refuses that, and so do we.
    """
    if isinstance(value, str):
        return
    if not value:
        raise invalid_request(
            f"Invalid '{name}': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            name,
        )
    kind = type(value[0])
    for i, item in enumerate(value):
        if type(item) is not kind:
            want, got = (_PY_ARTICLE.get(t, t.__name__) for t in (kind, type(item)))
            raise invalid_request(
                f"Invalid type for '{name}.{i}': expected {want}, but got {got} instead.", f"{name}.{i}"
            )
        if kind is list and not item:
            raise invalid_request(f"Invalid '{name}.{i}': empty array of tokens.", f"{name}.{i}")


_S = TypeVar("_S", bound=msgspec.Struct)


class RequestDecoder(Generic[_S]):
    """Decodes one request type; ``strict`` additionally refuses unknown top-level fields."""

    # Strict mode first reads only the top-level keys (values stay unparsed Raw slices, ~1 µs). A
    # `forbid_unknown_fields` subclass would need one pass only, but would hand callers a different
    # class that never compares equal to the lenient result.
    _keys = msgspec.json.Decoder(dict[str, msgspec.Raw])

    def __init__(self, cls: type[_S], enums: Mapping[str, Sequence[str]], prompt_field: str | None = None) -> None:
        self._decoder = msgspec.json.Decoder(cls)
        self._fields = frozenset(cls.__struct_fields__)
        self._int_fields = _int_fields(cls)
        self._enums = enums
        self._prompt_field = prompt_field

    def decode(self, body: bytes, *, strict: bool) -> _S:
        """Decode ``body``; raise a 400 ``WireError`` on any problem."""
        try:
            if strict:
                keys = self._keys.decode(body)
                if not self._fields.issuperset(keys):
                    name = next(key for key in keys if key not in self._fields)
                    raise invalid_request(f"Unrecognized request argument supplied: {name}", name)
            request = self._decoder.decode(body)
        except msgspec.ValidationError as exc:
            raise validation_error(exc, body, self._enums) from exc
        except msgspec.DecodeError as exc:
            raise json_error(exc, body) from exc
        except RecursionError:
            raise nested_too_deeply() from None
        check_int_range(request, self._int_fields)
        if self._prompt_field is not None:
            check_prompt(getattr(request, self._prompt_field), self._prompt_field)
        return request
