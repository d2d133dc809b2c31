"""No secret in any output: every config error path and every start-up/log path, driven with secret-bearing
values (provider keys and headers, the admin, dashboard, metrics and client keys, the passwords in
``ledger.url`` and ``state.url``), prints none of them on stdout or stderr, nor in a log line.

The sweep's own detector is shown to fail on a planted leak (``test_the_sweep_sees_a_planted_leak``): a
secret interpolated into a field whose errors quote the value.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from _require import require_postgres
from pg_cluster import PostgresCluster
from serve_process import ServeProcess
from tailgate.cli import main

SECRETS = {
    "SWEEP_PROVIDER_KEY": "sk-sweep-provider-7f3a9c1e5b",
    "SWEEP_PROVIDER_HEADER": "hdr-sweep-9a8b7c6d5e",
    "SWEEP_ADMIN_KEY": "adm-sweep-4c2e8a6f1d",
    "SWEEP_DASHBOARD_KEY": "dash-sweep-3b5d7f9a1c",
    "SWEEP_METRICS_KEY": "met-sweep-8e6c4a2f0b",
    "SWEEP_CLIENT_KEY": "cli-sweep-1a3c5e7b9d",
    "SWEEP_PG_PASSWORD": "pgpw-sweep-5f1e",
    "SWEEP_REDIS_PASSWORD": "rdpw-sweep-6a2b",
}


def _leaks(*texts: str) -> list[str]:
    """The names of the secrets that appear, whole, in any of ``texts``."""
    joined = "\n".join(texts)
    return sorted(name for name, value in SECRETS.items() if value in joined)


@pytest.fixture
def closed_port() -> Iterator[Callable[[], int]]:
    """Factory of loopback ports nothing listens on, each held bound (never listening) until the test ends: a
    connection to it is refused, and no other process — another xdist worker's redis-server, say — can take it
    meanwhile (a port bound and released was once taken by one, and a command under test connected to it)."""
    held: list[socket.socket] = []

    def factory() -> int:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        held.append(s)
        return int(s.getsockname()[1])

    yield factory
    for s in held:
        s.close()


def _config(*, ledger_url: str | None, redis_port: int, port: int = 0, extra: str = "") -> str:
    """A complete config holding every kind of secret, each from the environment."""
    ledger = f'ledger: {{url: "{ledger_url}"}}\n' if ledger_url else ""
    return (
        f"listen: {{host: 127.0.0.1, port: {port}}}\n"
        "keys:\n"
        '  - {id: app, key: "${SWEEP_CLIENT_KEY}"}\n'
        'admin_key: "${SWEEP_ADMIN_KEY}"\n'
        'dashboard_key: "${SWEEP_DASHBOARD_KEY}"\n'
        'metrics: {key: "${SWEEP_METRICS_KEY}"}\n'
        "providers:\n"
        '  p: {base_url: "http://127.0.0.1:9/v1", api_keys: ["${SWEEP_PROVIDER_KEY}"],\n'
        '      headers: {X-Team-Token: "${SWEEP_PROVIDER_HEADER}"}}\n'
        "models:\n"
        "  m: {routes: [{provider: p, model: x}]}\n"
        f"{ledger}"
        f'state: {{backend: redis, url: "redis://:${{SWEEP_REDIS_PASSWORD}}@127.0.0.1:{redis_port}/0"}}\n'
        f"{extra}"
    )


def _pg_url(port: int, database: str = "tailgate", user: str = "tailgate") -> str:
    return f"postgresql://{user}:${{SWEEP_PG_PASSWORD}}@127.0.0.1:{port}/{database}"


# Each breaks the valid config one way; every one must be refused (exit 2) without printing a secret.
_BROKEN: dict[str, tuple[str, str]] = {
    # name: (text to replace in the valid config, its replacement)
    "ledger.url in SQLAlchemy's spelling": ("postgresql://tailgate:", "postgresql+psycopg://tailgate:"),
    "ledger.url not a URL": ('ledger: {url: "postgresql://', 'ledger: {url: "tailgate:${SWEEP_PG_PASSWORD}@'),
    "state.url with a wrong scheme": ('url: "redis://:', 'url: "http://:'),
    "api_keys a string, not a list": ('api_keys: ["${SWEEP_PROVIDER_KEY}"]', 'api_keys: "${SWEEP_PROVIDER_KEY}"'),
    "a provider key with a space": ('["${SWEEP_PROVIDER_KEY}"]', '["${SWEEP_PROVIDER_KEY} x"]'),
    "a key pasted as its hash": ('key: "${SWEEP_CLIENT_KEY}"', 'key_sha256: "${SWEEP_CLIENT_KEY}"'),
    "a key and its hash": (
        'key: "${SWEEP_CLIENT_KEY}"',
        'key: "${SWEEP_CLIENT_KEY}", key_sha256: "${SWEEP_ADMIN_KEY}"',
    ),
    "admin_key a list": ('admin_key: "${SWEEP_ADMIN_KEY}"', 'admin_key: ["${SWEEP_ADMIN_KEY}"]'),
    "dashboard_key a mapping": (
        'dashboard_key: "${SWEEP_DASHBOARD_KEY}"',
        'dashboard_key: {k: "${SWEEP_DASHBOARD_KEY}"}',
    ),
    "metrics with an unknown field": (
        'metrics: {key: "${SWEEP_METRICS_KEY}"}',
        'metrics: {key: "${SWEEP_METRICS_KEY}", x: 1}',
    ),
    "a header value with a line break": ('"${SWEEP_PROVIDER_HEADER}"}', '"${SWEEP_PROVIDER_HEADER}\\n"}'),
    "a header named badly": ("X-Team-Token:", '"X Team Token":'),
    "base_url an endpoint with a password": (
        '"http://127.0.0.1:9/v1"',
        '"http://u:${SWEEP_PG_PASSWORD}@127.0.0.1:9/v1/chat/completions"',
    ),
    "an unknown preset": ("base_url:", "preset: nope, base_url:"),
    "a route to an unknown provider": ("provider: p,", "provider: q,"),
    "an environment variable unset": ("${SWEEP_ADMIN_KEY}", "${SWEEP_NOT_SET}"),
    "not YAML": ("models:\n", "models: [\n"),
    "secrets written in the file, then a typo": (
        "${SWEEP_PROVIDER_KEY}",
        SECRETS["SWEEP_PROVIDER_KEY"] + '"], apikeys: ["x',
    ),
}


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


def _commands(path: Path) -> list[list[str]]:
    """Every command that reads a gateway config."""
    p = str(path)
    return [
        ["config", "check", p],
        ["config", "check", "--json", p],
        ["serve", "--config", p],
        ["keys", "list", "--config", p],
        ["keys", "create", "--config", p, "--id", "t"],
        ["usage", "--config", p],
        ["monitor", "--config", p, "--once"],
        ["leaderboard", "--config", p],
        ["bench", "--config", p, "--provider", "p", "--requests", "1", "--duration", "0"],
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(_BROKEN))
def test_no_config_error_prints_a_secret(
    case: str, tmp_path: Path, secret_env: None, caplog: pytest.LogCaptureFixture, closed_port: Callable[[], int]
) -> None:
    """A config broken in this way is refused by every command that reads it, naming the problem, with no
    secret on stdout, stderr or in a log record."""
    caplog.set_level(logging.DEBUG)
    old, new = _BROKEN[case]
    valid = _config(ledger_url=_pg_url(closed_port()), redis_port=closed_port())
    assert old in valid, f"the case {case!r} no longer matches the config"
    path = tmp_path / "gateway.yaml"
    path.write_text(valid.replace(old, new, 1), encoding="utf-8")
    for argv in _commands(path):
        result = CliRunner().invoke(main, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert "gateway.yaml" in result.stderr + result.stdout, (argv, result.output)
        assert _leaks(result.stdout, result.stderr, caplog.text) == [], (argv, result.stderr)


def test_the_sweep_sees_a_planted_leak(tmp_path: Path, secret_env: None, closed_port: Callable[[], int]) -> None:
    """The detector is not blind: a secret interpolated into a field whose error quotes the value (a port)
    is reported as a leak by the same check the sweep makes."""
    valid = _config(ledger_url=None, redis_port=closed_port())
    planted = valid.replace("port: 0}", 'port: "${SWEEP_PG_PASSWORD}"}', 1)
    assert planted != valid
    path = tmp_path / "gateway.yaml"
    path.write_text(planted, encoding="utf-8")
    result = CliRunner().invoke(main, ["config", "check", str(path)])
    assert result.exit_code == 2
    assert _leaks(result.stdout, result.stderr) == ["SWEEP_PG_PASSWORD"]


def _tailgate(*argv: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailgate", "-v", *argv], capture_output=True, text=True, env=env, timeout=timeout
    )


@pytest.fixture
def env() -> dict[str, str]:
    return {**os.environ, **SECRETS}


@pytest.mark.timeout(120)
def test_config_check_and_store_commands_print_no_secret(
    tmp_path: Path, env: dict[str, str], closed_port: Callable[[], int]
) -> None:
    """A valid config with unreachable Redis and PostgreSQL: config check (text and JSON) shows the state
    and store addresses with the passwords hidden; keys and usage name the store and fail cleanly."""
    path = tmp_path / "gateway.yaml"
    pg_port = closed_port()
    path.write_text(_config(ledger_url=_pg_url(pg_port), redis_port=closed_port()), encoding="utf-8")
    outputs = []
    for argv in (
        ["config", "check", str(path)],
        ["config", "check", "--json", str(path)],
        ["keys", "list", "--config", str(path)],
        ["usage", "--config", str(path)],
    ):
        done = _tailgate(*argv, env=env)
        outputs += [done.stdout, done.stderr]
        assert _leaks(done.stdout, done.stderr) == [], (argv, done.stdout, done.stderr)
    check_text = outputs[0]
    assert "state: redis at redis://:***@127.0.0.1:" in check_text
    assert f"store: postgresql://tailgate:***@127.0.0.1:{pg_port}/tailgate" in check_text
    assert f"postgresql://tailgate:***@127.0.0.1:{pg_port}/tailgate" in outputs[5]  # keys list: the store it used


def _get(url: str, key: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - a loopback http URL we built
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the same
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.timeout(120)
def test_serve_logs_no_secret_from_start_to_stop(
    tmp_path: Path, env: dict[str, str], closed_port: Callable[[], int]
) -> None:
    """``serve -v`` with Redis and PostgreSQL unreachable logs both addresses with the passwords hidden, serves,
    answers the admin, dashboard and metrics endpoints, and stops, without a secret in any line; a second
    gateway on the same port is refused in one line (exit 2), without a secret either."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    pg_port, redis_port = closed_port(), closed_port()
    extra = f"trace: {{path: {tmp_path / 'trace.jsonl'}}}\n"
    path = tmp_path / "gateway.yaml"
    path.write_text(_config(ledger_url=_pg_url(pg_port), redis_port=redis_port, port=port, extra=extra), "utf-8")
    serve = ServeProcess(path, port=None, verbose=True, env=env)  # the config's port
    try:
        root = serve.root_url
        assert _get(f"{root}/admin/providers", SECRETS["SWEEP_ADMIN_KEY"]) == 200
        assert _get(f"{root}/admin/config", SECRETS["SWEEP_ADMIN_KEY"]) == 200
        assert _get(f"{root}/metrics", SECRETS["SWEEP_METRICS_KEY"]) == 200
        assert _get(f"{root}/dashboard/api/live", SECRETS["SWEEP_DASHBOARD_KEY"]) == 200
        assert _get(f"{root}/admin/providers", "wrong-key") in (401, 403)
        second = _tailgate("serve", "--config", str(path), env=env)
    finally:
        serve.stop(timeout_s=60)
        out, err = "".join(serve.out), serve.text()
    assert _leaks(out, err) == [], err
    assert f"Redis unavailable at redis://:***@127.0.0.1:{redis_port}/0" in err
    assert f"postgresql://tailgate:***@127.0.0.1:{pg_port}/tailgate" in err
    assert second.returncode == 2
    assert f"error: cannot listen on 127.0.0.1:{port}" in second.stderr
    assert "Traceback" not in second.stderr
    assert _leaks(second.stdout, second.stderr) == [], second.stderr


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    require_postgres()  # tests/_require.py: a skip here, a failure under CI=true
    c = PostgresCluster()
    try:
        c.start()
        yield c
    finally:
        c.remove()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("user", "database", "says"), [("nobody", "postgres", "role"), ("tailgate", "nodb", "database")]
)
def test_serve_refuses_a_missing_role_or_database_without_a_secret(
    cluster: PostgresCluster,
    tmp_path: Path,
    env: dict[str, str],
    user: str,
    database: str,
    says: str,
    closed_port: Callable[[], int],
) -> None:
    """PostgreSQL answers but the role or database does not exist: serve refuses to start (exit 2) with
    PostgreSQL's reason, the redacted address and where the set-up is documented; no secret printed."""
    path = tmp_path / "gateway.yaml"
    url = _pg_url(cluster.port, database=database, user=user)
    path.write_text(_config(ledger_url=url, redis_port=closed_port()), encoding="utf-8")
    done = _tailgate("serve", "--config", str(path), env=env)
    assert done.returncode == 2, done.stderr
    assert f'{says} "{user if says == "role" else database}" does not exist' in done.stderr
    assert f"postgresql://{user}:***@127.0.0.1:{cluster.port}/{database}" in done.stderr
    assert "docs/ledger.md" in done.stderr
    assert "Traceback" not in done.stderr
    assert _leaks(done.stdout, done.stderr) == []


def _raw(port: int, data: bytes) -> bytes:
    """``data`` sent as is on a fresh connection; everything the gateway answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _malformed(path: str, secret: str) -> list[bytes]:
    """Requests the HTTP parser refuses, each carrying ``secret`` in a header: a CR (a key file with CRLF line
    endings), a bare LF, an oversize header, too many headers, a bad request line."""
    body = b'{"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}'
    key = secret.encode()
    method = b"GET" if path.startswith("/admin") else b"POST"
    start = method + b" " + path.encode() + b" HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
    end = b"Content-Length: %d\r\n\r\n" % len(body) + body
    return [
        start + b"Authorization: Bearer " + key + b"\r\r\n" + end,
        start + b"x-api-key: " + key + b"\rx\r\n" + end,
        start + b"Authorization: Bearer " + key + b"\nX-Other: 1\r\n" + end,
        start + b"Authorization: Bearer " + key + b"x" * 9000 + b"\r\n" + end,
        start + b"Authorization: Bearer " + key + b"\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(200)) + end,
        method + b" " + path.encode() + b"\x00" + key + b" HTTP/1.1\r\nAuthorization: Bearer " + key + b"\r\n\r\n",
    ]


@pytest.mark.timeout(120)
def test_malformed_requests_log_one_line_without_a_secret(
    tmp_path: Path, env: dict[str, str], closed_port: Callable[[], int]
) -> None:
    """Requests the parser refuses, with the client or admin key in a header, on chat, /v1/messages and /admin:
    each a JSON 4xx (Anthropic's shape under /v1/messages, 431 for too many headers), and the log gets one
    warning line per request — no traceback, no key."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    path = tmp_path / "gateway.yaml"
    path.write_text(_config(ledger_url=None, redis_port=closed_port(), port=port), "utf-8")
    serve = ServeProcess(path, port=None, verbose=True, env=env)  # the config's port
    answers: list[tuple[str, bytes]] = []
    try:
        for where, secret in (
            ("/v1/chat/completions", SECRETS["SWEEP_CLIENT_KEY"]),
            ("/v1/messages", SECRETS["SWEEP_CLIENT_KEY"]),
            ("/admin/providers", SECRETS["SWEEP_ADMIN_KEY"]),
        ):
            answers += [(where, _raw(port, data)) for data in _malformed(where, secret)]
    finally:
        serve.stop(timeout_s=60)
        out, err = "".join(serve.out), serve.text()
    assert _leaks(out, err) == [], err
    assert "Traceback" not in err, err
    assert err.count("refused a malformed HTTP request") == len(answers), err
    for where, raw in answers:
        head, _, body = raw.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1])
        assert status in (400, 431), (where, raw[:200])
        obj = json.loads(body)
        if where == "/v1/messages":
            assert obj["type"] == "error", raw[:300]
        else:
            assert set(obj) == {"error"}, raw[:300]
        assert _leaks(body.decode()) == [], body
    too_many = [raw for where, raw in answers if b"header fields" in raw]
    assert len(too_many) == 3, [a[1][:120] for a in answers]
    assert [int(raw.split(b" ")[1]) for raw in too_many] == [431, 431, 431]
