"""The plain-Python check of common tool schemas agrees with ``jsonschema`` on every schema and value
hypothesis draws, and hands schemas with other keywords to jsonschema."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from tailgate.quality.signals import _fast, _validator

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.sampled_from([0.0, 1.0, 2.5, -1.5]),
    st.sampled_from(["", "a", "abc"]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), inner, max_size=3)
    ),
    max_leaves=6,
)
TYPES = st.sampled_from(["object", "array", "string", "boolean", "null", "number", "integer"])


def _schemas() -> st.SearchStrategy[Any]:
    def node(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.fixed_dictionaries(
            {},
            optional={
                "type": st.one_of(TYPES, st.lists(TYPES, min_size=1, max_size=2, unique=True)),
                "enum": st.lists(JSON_SCALARS, min_size=1, max_size=3),
                "const": JSON_SCALARS,
                "minimum": st.integers(-2, 2),
                "maximum": st.sampled_from([0, 1.5, 3]),
                "exclusiveMinimum": st.integers(-2, 2),
                "exclusiveMaximum": st.integers(-2, 3),
                "minLength": st.integers(0, 2),
                "maxLength": st.integers(0, 2),
                "minItems": st.integers(0, 2),
                "maxItems": st.integers(0, 2),
                "properties": st.dictionaries(st.sampled_from(["a", "b", "c"]), children, max_size=2),
                "required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=2, unique=True),
                "additionalProperties": st.one_of(st.booleans(), children),
                "items": children,
                "description": st.just("annotation"),
            },
        )

    return st.recursive(st.one_of(st.booleans(), node(st.just({}))), node, max_leaves=4)


@settings(max_examples=400, deadline=None)
@given(_schemas(), JSON_VALUES)
def test_fast_check_agrees_with_jsonschema(schema: Any, value: Any) -> None:
    fast = _fast(schema)
    assert fast is not None  # only fast keywords are drawn
    want = jsonschema.Draft202012Validator(schema).is_valid(value)
    assert (fast(value, "(root)") is None) is want, (schema, value)


def test_other_keywords_go_to_jsonschema() -> None:
    for schema in (
        {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}},
        {"type": "string", "pattern": "^a"},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "minimum": 1},
        {"$ref": "#/$defs/x", "$defs": {"x": {"type": "string"}}},
    ):
        assert _fast(schema) is None
    check = _validator(json.dumps({"type": "string", "pattern": "^a"}))
    assert check is not None
    assert check("abc", "(root)") is None
    assert check("b", "(root)") == "(root): pattern '^a'"
