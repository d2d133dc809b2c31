"""The small things a new user trips over on the first day, each found by trying it (issue 29): keys for
aliases the config does not have, a duration in weeks, an open gateway that must say so, help texts that
hide what a flag does."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from click.testing import CliRunner

from conftest import GatewayHandle, SimFactory
from serve_process import ServeProcess
from tailgate.cli import main

_CONFIG = """\
providers:
  p: {base_url: "http://127.0.0.1:9/v1"}
models:
  chat: {routes: [{provider: p, model: m}]}
  code: {routes: [{provider: p, model: m}]}
ledger: {path: store.db}
"""


def test_keys_refuse_aliases_the_config_does_not_have(tmp_path: Path) -> None:
    """`keys create|update --models` with --config accept its aliases and name the known ones for a typo."""
    config = tmp_path / "gateway.yaml"
    config.write_text(_CONFIG, encoding="utf-8")
    runner = CliRunner()
    bad = runner.invoke(main, ["keys", "create", "--config", str(config), "--id", "a", "--models", "chat,cdoe"])
    assert bad.exit_code == 2
    assert "--models: no alias 'cdoe'" in bad.stderr
    assert "(known: chat, code)" in bad.stderr
    good = runner.invoke(main, ["keys", "create", "--config", str(config), "--id", "a", "--models", "chat,code"])
    assert good.exit_code == 0, good.stderr
    bad = runner.invoke(main, ["keys", "update", "--config", str(config), "a", "--models", "chatt"])
    assert bad.exit_code == 2
    assert "no alias 'chatt'" in bad.stderr
    assert runner.invoke(main, ["keys", "update", "--config", str(config), "a", "--models", "all"]).exit_code == 0


async def test_admin_keys_refuse_aliases_the_gateway_does_not_serve(
    sim: SimFactory, gateway: Callable[..., Awaitable[GatewayHandle]]
) -> None:
    """POST and PATCH /admin/keys answer 400 naming an unknown alias and the known ones; nothing is stored."""
    provider = await sim("instant", models=("m",))
    admin = "admin-secret-0123456789"
    gw = await gateway(
        {
            "admin_key": admin,
            "providers": {"p": {"base_url": provider.url}},
            "models": {"chat": {"routes": [{"provider": "p", "model": "m"}]}},
        }
    )
    headers = {"Authorization": f"Bearer {admin}"}
    async with aiohttp.ClientSession() as session:
        body = {"id": "team-a", "models": ["chat", "chta"]}
        async with session.post(f"{gw.root_url}/admin/keys", json=body, headers=headers) as r:
            assert r.status == 400
            assert "no alias 'chta' in the config (known: chat)" in (await r.json())["error"]["message"]
        async with session.get(f"{gw.root_url}/admin/keys", headers=headers) as r:
            assert (await r.json())["keys"] == []
        async with session.post(f"{gw.root_url}/admin/keys", json={"id": "team-a"}, headers=headers) as r:
            assert r.status == 201
        patch = {"models": ["nope"]}
        async with session.patch(f"{gw.root_url}/admin/keys/team-a", json=patch, headers=headers) as r:
            assert r.status == 400


def test_a_duration_error_lists_the_units_days_included(tmp_path: Path) -> None:
    """`usage --since 1w` says which units exist, days among them."""
    result = CliRunner().invoke(main, ["usage", "--db", str(tmp_path / "x.db"), "--since", "1w"])
    assert result.exit_code == 2
    assert "units ms, s, m, h, d" in result.stderr
    assert "7d" in result.stderr


def test_an_open_gateway_says_so_at_start(tmp_path: Path) -> None:
    """No keys in the config or the store: `serve` warns that any bearer is accepted, on loopback only."""
    config = tmp_path / "gateway.yaml"
    config.write_text(_CONFIG + "listen: {port: 0}\n", encoding="utf-8")
    serve = ServeProcess(config, port=None)  # the config's port 0
    serve.stop()
    text = serve.text()
    assert "no gateway keys configured: any bearer is accepted (listening on loopback 127.0.0.1 only)" in text
    assert f"store: {tmp_path / 'store.db'}" in text


def test_help_says_what_each_flag_does() -> None:
    """--find-max says it is repeatable, --by and --tokenizer have help, leaderboard --sort lists every sort."""
    from tailgate.ledger.leaderboard import SORTS

    bench = CliRunner().invoke(main, ["bench", "--help"], terminal_width=200).stdout
    flat = " ".join(bench.split())
    assert "repeatable (all must hold)" in flat
    assert "What --find-max varies" in flat
    assert "exactly --input-tokens long" in flat
    board = " ".join(CliRunner().invoke(main, ["leaderboard", "--help"], terminal_width=200).stdout.split())
    for sort in SORTS:
        assert sort in board
    assert "answer_p90" in board
    keys = " ".join(CliRunner().invoke(main, ["keys", "update", "--help"], terminal_width=200).stdout.split())
    assert "keeps the key's others" in keys


def test_a_config_for_a_newer_tailgate_says_which_version_reads_it(tmp_path: Path) -> None:
    """A field this version does not know is located like a typo, and the check says which tailgate read it."""
    from tailgate import __version__

    config = tmp_path / "gateway.yaml"
    config.write_text(_CONFIG + "routing: {policy: adaptive, future_knob: 3}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["config", "check", str(config)])
    assert result.exit_code == 2
    assert f"{config}:7: routing.future_knob: unknown field" in result.stderr
    assert f"this is tailgate {__version__}: a field documented for a newer version is unknown here" in result.stderr


def _wait_for_line(serve: ServeProcess, text: str, what: str) -> str:
    """The first log line of ``serve`` containing ``text`` (the reader thread appends; 20 s at most)."""
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        found = [line for line in list(serve.log) if text in line]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"{what}: no {text!r} in the log:\n" + "".join(serve.log))


def _status(url: str, bearer: str) -> int:
    request = urllib.request.Request(url + "/models", headers={"Authorization": f"Bearer {bearer}"})  # noqa: S310 - 127.0.0.1 only
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 - 127.0.0.1 only
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.timeout(60)
def test_the_log_says_when_the_first_key_closes_the_gateway(tmp_path: Path) -> None:
    """`tailgate keys create` while `serve` runs open: the log says the gateway is now closed, and any bearer
    then gets 401 (the log said nothing: the demo's clients got 401 from an "any bearer" gateway)."""
    config = tmp_path / "gateway.yaml"
    config.write_text(_CONFIG, encoding="utf-8")
    serve = ServeProcess(config)
    try:
        assert "any bearer is accepted" in "".join(serve.log)
        assert _status(serve.url, "any") == 200
        created = subprocess.run(
            [sys.executable, "-m", "tailgate", "keys", "create", "--config", str(config), "--id", "a"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert created.returncode == 0, created.stdout + created.stderr
        line = _wait_for_line(serve, "gateway closed", "after keys create")
        assert "requests without a valid key get 401" in line
        assert _status(serve.url, "any") == 401
    finally:
        serve.stop()


@pytest.mark.timeout(60)
def test_the_log_says_when_the_last_key_opens_the_gateway(tmp_path: Path) -> None:
    """A reload that removes the config's last key (no store keys): the log says any bearer is accepted again."""
    config = tmp_path / "gateway.yaml"
    keyed = _CONFIG + "keys: [{id: a, key: sk-first-day-0123456789abcdef}]\n"
    config.write_text(keyed, encoding="utf-8")
    serve = ServeProcess(config)
    try:
        assert "any bearer is accepted" not in "".join(serve.log)
        assert _status(serve.url, "any") == 401
        config.write_text(_CONFIG, encoding="utf-8")
        serve.proc.send_signal(signal.SIGHUP)
        line = _wait_for_line(serve, "gateway open", "after a reload without keys")
        assert "any bearer is accepted again" in line
        assert _status(serve.url, "any") == 200
    finally:
        serve.stop()
