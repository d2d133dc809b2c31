"""Hostile headers against a real ``tailgate serve`` over the simulator (issue 37): a hypothesis property over
both protocols (chat, ``/v1/messages`` passed through and translated) and every header the gateway reads or
forwards — non-Latin-1, invalid UTF-8, CR/LF, NUL, 8 KB values, duplicates — sent as raw bytes.

What must hold: no 5xx; every refusal is a JSON 4xx in the path's shape; /metrics shows no failed upstream
attempt and no breaker transition (no provider paid for what a client sent); the simulator's record of the
headers it received (``GET /sim/headers``) holds only checked, printable-ASCII values of the allow-listed
headers, never a client header outside the list (the client's credentials included: upstream sees only the
provider's key); the log holds no traceback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hardening_support import MSG, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hardening_hostile_headers import failed_attempts, metrics, raw_post

from conftest import ThreadedSim
from serve_process import ServeProcess

PASSTHROUGH, TRANSLATED = "native", "translated"
CHECKED = ("x-request-id", "anthropic-version", "anthropic-beta", "x-tailgate-class")
NOT_FORWARDED = ("x-tailgate-class", "x-session-id", "x-hostile-extra", "x-evil")
READ_ONLY = ("x-session-id", "authorization", "x-api-key", "x-hostile-extra")
"""Client headers the gateway reads (or ignores) but never forwards: the property sends hostile ones too."""
UPSTREAM_CREDENTIALS = {"Bearer sk-up-1", "sk-up-1", "Bearer sk-up-2"}
_PRINTABLE = re.compile(r"[\x20-\x7e]*")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, ThreadedSim]]:
    from conftest import make_spec

    sim = ThreadedSim(make_spec("instant", models=("up-model",), engine={"max_output_tokens": 8}))
    tmp = tmp_path_factory.mktemp("hostile")
    root = sim.url.removesuffix("/v1")
    config = tmp / "gateway.yaml"
    config.write_text(
        "listen: {host: 127.0.0.1, port: 0}\n"
        "providers:\n"
        f'  native: {{base_url: "{sim.url}", anthropic_base_url: "{root}", api_keys: ["sk-up-1"]}}\n'
        f'  plain: {{base_url: "{sim.url}", api_keys: ["sk-up-2"]}}\n'
        "models:\n"
        f"  {PASSTHROUGH}: {{routes: [{{provider: native, model: up-model}}]}}\n"
        f"  {TRANSLATED}: {{routes: [{{provider: plain, model: up-model}}]}}\n"
        "routing: {probes: {enabled: false}}\n"
        f"ledger: {{path: {tmp / 'ledger.db'}}}\n",
        encoding="utf-8",
    )
    serve = ServeProcess(config, port=None, verbose=True)  # the config's port 0
    try:
        yield serve, sim
    finally:
        serve.stop()
        sim.close()
        assert "Traceback" not in serve.text(), serve.text()


_VALUES = st.one_of(
    st.text(st.characters(codec="ascii", categories=["L", "N", "P", "S", "Zs"]), min_size=1, max_size=40).map(
        str.encode
    ),  # ordinary values: served
    st.text(min_size=1, max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")),  # any script (请求)
    st.binary(min_size=1, max_size=30),  # invalid UTF-8, NUL, control bytes
    st.sampled_from([b"a\rb", b"a\nb", b"a\r\nx-evil: 1", b"a\x00b", b"caf\xe9", "请求-1".encode()]),
    st.integers(7000, 8300).map(lambda n: b"v" * n),  # 8 KB, around the server's field limit
)
_HEADER = st.tuples(st.sampled_from((*CHECKED, *READ_ONLY)), _VALUES, st.integers(1, 2))
_WHERE = st.sampled_from(
    [("/v1/chat/completions", PASSTHROUGH), ("/v1/messages", PASSTHROUGH), ("/v1/messages", TRANSLATED)]
)


def _body(path: str, alias: str) -> bytes:
    return json.dumps({"model": alias, "messages": MSG, "max_tokens": 4}).encode()


def _shape_ok(path: str, raw: bytes) -> bool:
    obj: Any = json.loads(raw)
    if path.startswith("/v1/messages"):
        return obj.get("type") == "error" and isinstance(obj["error"]["message"], str)
    return isinstance(obj["error"]["message"], str)


@pytest.mark.timeout(180)
def test_hostile_headers_never_reach_a_provider_or_a_500(served: tuple[ServeProcess, ThreadedSim]) -> None:
    """Random hostile header sets on both protocols: 200 or a JSON 4xx in the path's shape, never a 5xx; no
    failed upstream attempt, no breaker transition; the upstream received only checked, allow-listed values."""
    serve, sim = served
    statuses: dict[int, int] = {}

    @settings(
        max_examples=120,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(where=_WHERE, headers=st.lists(_HEADER, min_size=1, max_size=3))
    def one(where: tuple[str, str], headers: list[tuple[str, bytes, int]]) -> None:
        path, alias = where
        lines = [name.encode() + b": " + value for name, value, copies in headers for _ in range(copies)]
        status, _, raw = raw_post(serve.port, path, lines, _body(path, alias))
        statuses[status] = statuses.get(status, 0) + 1
        assert status in (200, 400, 431), (status, raw[:300])
        if status != 200:
            assert _shape_ok(path, raw), raw[:300]

    one()
    assert statuses.get(200, 0) > 0, statuses  # the property saw served requests, not only refusals
    assert statuses.get(400, 0) > 0, statuses
    assert failed_attempts(metrics(serve.port)) == []
    seen = json.loads(request(_sim_port(sim), "GET", "/sim/headers")[2])
    received = [h for r in seen["requests"] for h in r["headers"]]
    assert received, seen
    for name, value in received:
        assert name.lower() not in NOT_FORWARDED, (name, value)
        if name.lower() in CHECKED:
            assert _PRINTABLE.fullmatch(value), (name, value)
        if name.lower() in ("authorization", "x-api-key"):  # the provider's key, never the client's
            assert value in UPSTREAM_CREDENTIALS, (name, value)


def _sim_port(sim: ThreadedSim) -> int:
    return int(sim.url.rsplit(":", 1)[1].split("/")[0])
