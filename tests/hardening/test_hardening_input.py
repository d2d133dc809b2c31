"""Hostile requests against every endpoint of the gateway and the simulator: an OpenAI-shaped 4xx each."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hardening_support import ALIAS, MSG, Stack, assert_openai_error, post_json, raw_socket, recv_all, request

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("input"))
    yield s
    s.close()


def _ports(stack: Stack) -> dict[str, int]:
    return {"gateway": stack.port, "sim": stack.sim_port}


def _model(face: str) -> str:
    return ALIAS if face == "gateway" else "up-model"


def _body(face: str, **fields: object) -> bytes:
    return json.dumps({"model": _model(face), "messages": MSG, "max_tokens": 2, **fields}).encode()


FACES = ["gateway", "sim"]


@pytest.mark.parametrize("face", FACES)
def test_invalid_utf8_anywhere_is_a_400(stack: Stack, face: str) -> None:
    """The issue's 500: bad UTF-8 in a known field, an unknown field, a nested vendor field — all 400."""
    port = _ports(stack)[face]
    model = _model(face).encode()
    bodies = [
        b'{"model":"' + model + b'","messages":[{"role":"user","content":"\xff\xfe"}]}',
        b'{"model":"' + model + b'","vendor":"\xc3\x28","messages":[{"role":"user","content":"x"}]}',
        b'{"model":"' + model + b'","messages":[{"role":"user","content":"x","prefix":"\xed\xa0\x80"}]}',
        b'{"model":"' + model + b'","messages":[{"role":"user","content":[{"type":"text","text":"\x80"}]}]}',
    ]
    for i, body in enumerate(bodies):
        status, _, raw = post_json(port, CHAT, body)
        if face == "sim" and i == 2:
            # The simulator skips nested vendor fields without decoding them (as vLLM does): no 5xx is the bar.
            assert status in (200, 400), raw
            continue
        assert status == 400, (body, raw)
        message = assert_openai_error(status, raw)["message"]
        assert "UTF-8" in message or "Unrecognized request argument supplied: vendor" in message  # the sim is strict


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": 10**30}, "max_tokens"),
        ({"seed": -(10**30)}, "seed"),
        ({"max_tokens": "3"}, "max_tokens"),
        ({"temperature": 1e300}, "temperature"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"messages": "hello"}, "messages"),
        ({"stream": "yes"}, "stream"),
        ({"n": 0}, "n"),
    ],
)
def test_wrong_types_and_absurd_numbers_name_the_field(
    stack: Stack, face: str, fields: dict[str, object], param: str
) -> None:
    """A wrong type or an absurd number is a 400 whose ``param`` names the field."""
    status, _, raw = post_json(_ports(stack)[face], CHAT, _body(face, **fields))
    assert status == 400, raw
    assert assert_openai_error(status, raw)["param"] == param


@pytest.mark.parametrize("face", FACES)
def test_deep_nesting_and_non_json(stack: Stack, face: str) -> None:
    """JSON 100,000 levels deep, truncated JSON, an empty body, a JSON array: 400 each, no traceback."""
    port = _ports(stack)[face]
    deep = _body(face)[:-1] + b',"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for body in (deep, _body(face)[:-5], b"", b"[1,2]", b"\x00\x01\x02", b"null"):
        status, _, raw = post_json(port, CHAT, body)
        assert status == 400, (body[:40], raw)
        assert_openai_error(status, raw)


@pytest.mark.parametrize("face", FACES)
def test_size_type_path_and_method_refusals(stack: Stack, face: str) -> None:
    """413 over the size limit, 415 for a non-JSON content type, 404 unknown path, 405 with Allow."""
    port = _ports(stack)[face]
    limit = stack.config.max_body_bytes if face == "gateway" else 32 * 1024 * 1024
    status, _, raw = post_json(port, CHAT, b" " * (limit + 1))
    assert status == 413
    assert str(limit) in assert_openai_error(status, raw)["message"]
    status, _, raw = request(port, "POST", CHAT, b"<xml/>", {"Content-Type": "application/xml"})
    assert status == 415
    assert assert_openai_error(status, raw)["param"] == "Content-Type"
    status, _, raw = request(port, "GET", "/v1/nothing-here")
    assert status == 404
    assert "GET /v1/nothing-here" in assert_openai_error(status, raw)["message"]
    status, headers, raw = request(port, "DELETE", CHAT)
    assert status == 405
    assert headers["allow"] == "POST"
    assert_openai_error(status, raw)
    # curl -d sends a form content type; the body is still read as JSON (and served)
    status, _, raw = request(port, "POST", CHAT, _body(face), {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200, raw


@pytest.mark.parametrize("face", FACES)
def test_embeddings_and_completions_refuse_in_the_same_shape(stack: Stack, face: str) -> None:
    """The other POST endpoints: wrong input types and absurd sizes are 400s naming the field."""
    port = _ports(stack)[face]
    model = _model(face)
    cases = [
        ("/v1/embeddings", {"model": model, "input": ["a", 1]}, "input.1"),
        ("/v1/embeddings", {"model": model, "input": "x", "dimensions": 10**12}, "dimensions"),
        ("/v1/embeddings", {"model": model, "input": []}, "input"),
        ("/v1/completions", {"model": model, "prompt": {"a": 1}}, "prompt"),
        ("/v1/completions", {"model": model, "prompt": "x", "max_tokens": 2**64}, "max_tokens"),
    ]
    for path, body, param in cases:
        status, _, raw = post_json(port, path, json.dumps(body).encode())
        assert status == 400, (path, body, raw)
        assert assert_openai_error(status, raw)["param"] == param, (path, body)


def test_sim_control_api_refuses_bad_bodies(stack: Stack) -> None:
    """/sim/faults: bad JSON, deep nesting, bad UTF-8, unknown fields and absurd values are 400s."""
    port = stack.sim_port
    for body, param in [
        (b"{", None),
        (b"[" * 50_000, None),
        (b'{"error_rate": "\xff"}', None),
        (b'{"bogus": 1}', "bogus"),
        (b'{"error_rate": 1e300}', "error_rate"),
    ]:
        status, _, raw = post_json(port, "/sim/faults", body)
        assert status == 400, (body[:30], raw)
        assert assert_openai_error(status, raw)["param"] == param
    status, _, raw = request(port, "GET", "/sim/truth?limit=-1")
    assert status == 400
    assert assert_openai_error(status, raw)["param"] == "limit"


@pytest.mark.parametrize("face", FACES)
def test_parser_level_garbage_gets_json_errors(stack: Stack, face: str) -> None:
    """Before any handler runs: an oversized header is a 431, a broken request line a 400 — both JSON,
    neither echoing the offending bytes (a header may carry a key)."""
    port = _ports(stack)[face]
    secret = "sk-" + "s" * 9000
    status, _, raw = request(port, "GET", "/v1/models", headers={"Authorization": f"Bearer {secret}"})
    if face == "gateway":  # the simulator keeps aiohttp's defaults (8190) too, through the same handler
        assert status == 431
    assert status in (400, 431)
    err = assert_openai_error(status, raw)
    assert "sss" not in err["message"]
    sock = raw_socket(port)
    try:
        sock.sendall(b"\x16\x03\x01\x02\x00 not http at all\r\n\r\n")
        answer = recv_all(sock)
    finally:
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith((b"HTTP/1.1 400", b"HTTP/1.0 400")), answer[:200]
    assert_openai_error(400, body)
