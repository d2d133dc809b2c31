"""Fuzzing the gateway and the simulator: no 5xx, ever, and every refusal a well-formed OpenAI error body.

Two generators, both bounded and reproducible (``derandomize``): hypothesis builds request objects field
by field with values of every JSON type (huge and negative numbers, lone surrogates, deep lists), and a
byte mutator damages valid bodies (flips, inserts, cuts, invalid UTF-8, duplicated spans); odd query strings
hit the GET endpoints. About 3,200 requests in all; each answer is read to its end (streams included).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hardening_support import ALIAS, UPSTREAM_MODEL, Stack, assert_openai_error, post_json, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
FUZZ = settings(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("fuzz"))
    yield s
    s.close()


def _check(status: int, raw: bytes, sent: bytes) -> None:
    assert status < 500, (status, sent[:300], raw[:300])
    if status >= 400:
        assert_openai_error(status, raw)


# ---- structured: request objects with values of every shape ---------------------------------------

_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
)
_text = st.one_of(st.text(max_size=20), st.sampled_from(["\ud800", "\udfff", "\x00", "😀" * 3, "a" * 5000]))
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _text)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)
_message = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "system", "assistant", "tool"]), _values)},
    optional={"content": st.one_of(_text, _values), "name": _values, "tool_calls": _values},
)
_FIELDS = {
    "messages": st.one_of(st.lists(_message, max_size=3), _values),
    "prompt": st.one_of(_text, st.lists(st.integers(-5, 2**40), max_size=4), _values),
    "input": st.one_of(_text, st.lists(_text, max_size=3), _values),
    "max_tokens": st.one_of(st.integers(-10, 40), _values),
    "max_completion_tokens": st.one_of(st.integers(-10, 40), _values),
    "stream": st.one_of(st.booleans(), _values),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": st.booleans()}), _values),
    "temperature": _values,
    "top_p": _values,
    "n": st.one_of(st.integers(-3, 3), _values),
    "seed": _values,
    "stop": _values,
    "logit_bias": _values,
    "tools": _values,
    "tool_choice": _values,
    "response_format": _values,
    "dimensions": st.one_of(st.integers(-5, 20_000), _values),
    "encoding_format": st.one_of(st.sampled_from(["float", "base64", "nope"]), _values),
    "x-vendor": _values,
}


@st.composite
def _request(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    path = draw(st.sampled_from(PATHS))
    obj: dict[str, Any] = {}
    model = draw(st.one_of(st.just("<model>"), _values))
    if draw(st.integers(0, 9)) > 0:
        obj["model"] = model
    for name in draw(st.lists(st.sampled_from(sorted(_FIELDS)), max_size=6, unique=True)):
        obj[name] = draw(_FIELDS[name])
    return path, obj


def _send(stack: Stack, face: str, path: str, obj: dict[str, Any]) -> None:
    port, model = (stack.port, ALIAS) if face == "gateway" else (stack.sim_port, UPSTREAM_MODEL)
    if obj.get("model") == "<model>":
        obj = {**obj, "model": model}
    body = json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
    status, _, raw = post_json(port, path, body)
    _check(status, raw, body)


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=700)
@given(req=_request())
def test_fuzz_structured_requests_gateway(stack: Stack, req: tuple[str, dict[str, Any]]) -> None:
    """Request objects with wrong types and absurd values: never a 5xx from the gateway."""
    _send(stack, "gateway", *req)


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=500)
@given(req=_request())
def test_fuzz_structured_requests_sim(stack: Stack, req: tuple[str, dict[str, Any]]) -> None:
    """The same against the simulator: never a 5xx, always a well-formed error body."""
    _send(stack, "sim", *req)


# ---- byte mutations of valid bodies ----------------------------------------------------------------


def _valid(model: str) -> list[tuple[str, bytes]]:
    msg = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there, 你好"}]
    bodies: list[tuple[str, dict[str, Any]]] = [
        (PATHS[0], {"model": model, "messages": msg, "max_tokens": 4}),
        (PATHS[0], {"model": model, "messages": msg, "max_tokens": 3, "stream": True}),
        (
            PATHS[0],
            {
                "model": model,
                "messages": msg,
                "max_tokens": 2,
                "stream": True,
                "stream_options": {"include_usage": True},
                "temperature": 0.5,
                "stop": ["\n"],
            },
        ),
        (PATHS[1], {"model": model, "prompt": "once upon", "max_tokens": 3}),
        (PATHS[1], {"model": model, "prompt": [1, 2, 3], "max_tokens": 2, "stream": True}),
        (PATHS[2], {"model": model, "input": ["a", "b"], "dimensions": 8}),
    ]
    return [(path, json.dumps(obj, ensure_ascii=False).encode()) for path, obj in bodies]


_BAD_BYTES = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\\", b'"', b"{", b"[", b"}", b"]", b",", b"1e999"]


_Op = tuple[str, int, int, int]
_ops = st.lists(
    st.tuples(
        st.sampled_from(["flip", "insert", "delete", "dup", "bad", "truncate"]),
        st.integers(0, 10_000),
        st.integers(0, 255),
        st.integers(0, len(_BAD_BYTES) - 1),
    ),
    min_size=1,
    max_size=4,
)
_mutated = st.tuples(st.integers(0, 5), _ops)


def _apply(body: bytes, ops: list[_Op]) -> bytes:
    out = bytearray(body)
    for op, pos, byte, bad in ops:
        at = pos % (len(out) + 1)
        if op == "flip" and out:
            out[at % len(out)] ^= 1 << (byte % 8)
        elif op == "insert":
            out[at:at] = bytes([byte])
        elif op == "delete":
            del out[at : at + 1 + byte % 8]
        elif op == "dup":
            out[at:at] = out[at : at + 1 + byte % 16]
        elif op == "bad":
            out[at:at] = _BAD_BYTES[bad]
        elif op == "truncate":
            del out[at:]
    return bytes(out)


def _mutate_and_send(stack: Stack, face: str, case: tuple[int, list[_Op]]) -> None:
    port, model = (stack.port, ALIAS) if face == "gateway" else (stack.sim_port, UPSTREAM_MODEL)
    index, ops = case
    path, body = _valid(model)[index]
    mutated = _apply(body, ops)
    status, _, raw = post_json(port, path, mutated)
    _check(status, raw, mutated)


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=900)
@given(case=_mutated)
def test_fuzz_byte_mutations_gateway(stack: Stack, case: tuple[int, list[_Op]]) -> None:
    """Valid bodies with bytes flipped, inserted, cut or made invalid UTF-8: never a 5xx from the gateway."""
    _mutate_and_send(stack, "gateway", case)


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=500)
@given(case=_mutated)
def test_fuzz_byte_mutations_sim(stack: Stack, case: tuple[int, list[_Op]]) -> None:
    """The same mutations against the simulator."""
    _mutate_and_send(stack, "sim", case)


# ---- query strings and paths of the GET endpoints ---------------------------------------------------

_GETS = (
    "/dashboard/api/leaderboard",
    "/dashboard/api/series",
    "/dashboard/api/heatmap",
    "/dashboard/api/compare",
    "/dashboard/api/catalog",
    "/dashboard/api/live",
    "/admin/providers",
    "/v1/models",
    "/metrics",
)
_QUERY_KEYS = ("window", "now", "model", "sort", "provider", "workload", "tz", "limit", "x")
_query_values = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["1e999", "-1", "nan", "inf", "0", "99999999999999999999", "7d", "1h", "%ff", "%00", "p90"]),
)


@settings(FUZZ, max_examples=300)
@given(
    path=st.sampled_from(_GETS),
    query=st.dictionaries(st.sampled_from(_QUERY_KEYS), _query_values, max_size=4),
    tail=st.one_of(st.just(""), st.text(max_size=6)),
)
def test_fuzz_get_endpoints(stack: Stack, path: str, query: dict[str, str], tail: str) -> None:
    """Dashboard, admin, models and metrics with odd query strings and path tails: never a 5xx."""
    from urllib.parse import quote, urlencode

    target = path + quote(tail) + ("?" + urlencode(query) if query else "")
    status, _, raw = request(stack.port, "GET", target)
    _check(status, raw, target.encode())
    status, _, raw = request(stack.sim_port, "GET", "/sim/truth?" + urlencode({"limit": query.get("limit", "x")}))
    _check(status, raw, b"/sim/truth")
