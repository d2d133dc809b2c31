"""Load YAML config files into pydantic models with errors that name the file, line and path.

Every config in tailgate (gateway, simulator, scenarios) goes through :func:`load_model`, so a user
always sees the same kind of message::

    sim.yaml:7: providers.b.engine.slots: Input should be greater than or equal to 1 (got -3)
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

# ${VAR} or ${VAR:-default}; "$${" is a literal "${".
_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(Exception):
    """A config file could not be used. ``problems`` holds one line per error, already located."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(problems))


def format_path(loc: tuple[int | str, ...] | list[int | str]) -> str:
    """``('models', 'x', 'routes', 1, 'weight')`` → ``models.x.routes[1].weight``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def interpolate(value: Any, env: Mapping[str, str], loc: tuple[int | str, ...] = ()) -> Any:
    """Replace ``${VAR}`` / ``${VAR:-default}`` in every string scalar (keys are left alone).

    A reference to an unset variable without a default is an error naming the config path, so a
    missing secret is caught at load time rather than sent upstream as an empty bearer token.
    """
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            if match.group(0) == "$${":
                return "${"
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError("", [f"{format_path(loc)}: environment variable {name} is not set"])

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {k: interpolate(v, env, (*loc, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, (*loc, i)) for i, v in enumerate(value)]
    return value


def _line_index(node: yaml.Node, loc: tuple[int | str, ...], out: dict[tuple[int | str, ...], int]) -> None:
    """Map each config path to the 1-based line where its value starts."""
    out[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, child in node.value:
            out[(*loc, key.value)] = key.start_mark.line + 1
            _line_index(child, (*loc, key.value), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            _line_index(child, (*loc, i), out)


def parse_yaml(text: str, source: str) -> tuple[Any, dict[tuple[int | str, ...], int]]:
    """Parse YAML text; return the data and a path → line map for error messages."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(source, [f"{where}: not valid YAML: {problem}"]) from None
    lines: dict[tuple[int | str, ...], int] = {}
    if node is not None:
        _line_index(node, (), lines)
    return data, lines


def _located(source: str, lines: dict[tuple[int | str, ...], int], loc: tuple[int | str, ...]) -> str:
    probe = loc
    while probe and probe not in lines:
        probe = probe[:-1]
    line = lines.get(probe)
    return f"{source}:{line}" if line is not None else source


def did_you_mean(word: str, known: typing.Iterable[str]) -> str | None:
    """``did you mean 'weight'?`` for the closest of ``known`` (difflib), or None when nothing is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.75)
    return f"did you mean {close[0]!r}?" if close else None


def _fields_at(model: Any, loc: tuple[int | str, ...]) -> list[str]:
    """The field names (and aliases) the model accepts at ``loc``: the mapping an unknown key was found in.

    Walks the annotations: a model's field, a ``dict[str, X]`` value, a ``list[X]`` item, through
    ``Optional`` / ``Annotated`` / unions (the first model among them)."""
    current: Any = model
    for part in (*loc, None):
        current = _a_model(current)
        if current is None:
            return []
        if part is None:
            break
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part)) or next(
                (f for f in current.model_fields.values() if f.alias == part), None
            )
            if field is None:
                return []
            current = field.annotation
        else:  # a dict's value or a list's item
            args = typing.get_args(current)
            current = args[-1] if args else None
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [*current.model_fields, *(f.alias for f in current.model_fields.values() if f.alias)]
    return []


def _a_model(tp: Any) -> Any:
    """``tp`` without ``Annotated`` / ``Optional`` wrappers: a model class, a ``dict`` / ``list`` type, or None."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin is typing.Union or origin is types.UnionType:
            options = [a for a in typing.get_args(tp) if a is not type(None)]
            models = [a for a in options if isinstance(a, type) and issubclass(a, BaseModel)]
            tp = models[0] if models else (options[0] if len(options) == 1 else None)
        else:
            break
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    return tp if typing.get_origin(tp) in (dict, list, tuple) else None


def validate_data(
    data: Any,
    model: type[M],
    source: str,
    *,
    lines: dict[tuple[int | str, ...], int] | None = None,
    env: Mapping[str, str] | None = None,
) -> M:
    """Interpolate env references and validate ``data`` as ``model``; raise :class:`ConfigError`."""
    lines = lines or {}
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"{source}: expected a mapping at the top level, got {type(data).__name__}"])
    try:
        data = interpolate(data, os.environ if env is None else env)
    except ConfigError as exc:
        raise ConfigError(source, [f"{source}: {p}" for p in exc.problems]) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            loc = tuple(err["loc"])
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown field (check the spelling; unknown keys are errors, not ignored)"
                guess = did_you_mean(str(loc[-1]), _fields_at(model, loc[:-1]))
                if guess:
                    msg = f"unknown field: {guess} (unknown keys are errors, not ignored)"
            elif err["type"] != "missing" and "input" in err and not isinstance(err["input"], dict | list):
                msg = f"{msg} (got {err['input']!r})"
            problems.append(f"{_located(source, lines, loc)}: {format_path(loc)}: {msg}")
        raise ConfigError(source, problems) from None


def load_model(path: str | Path, model: type[M], *, env: Mapping[str, str] | None = None) -> M:
    """Read a YAML file and validate it as ``model``; every error names file, line and path."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, [f"{source}: cannot read config file: {exc.strerror}"]) from None
    data, lines = parse_yaml(text, source)
    return validate_data(data, model, source, lines=lines, env=env)
