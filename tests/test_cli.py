"""The `tailgate` command line: mock (presets, configs, errors), demo, and a real subprocess start."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from conftest import MockProcess
from tailgate.cli import main


def test_list_presets_shows_every_preset() -> None:
    """--list-presets prints all eight presets."""
    result = CliRunner().invoke(main, ["mock", "--list-presets"])
    assert result.exit_code == 0, result.output
    for name in ("instant", "provider-a", "provider-e", "aggregator", "naive"):
        assert name in result.output


def test_mock_needs_exactly_one_source() -> None:
    """Neither or both of --preset/--config is a usage error (exit 2) that says what to do."""
    result = CliRunner().invoke(main, ["mock"])
    assert result.exit_code == 2
    assert "exactly one of --preset" in result.output
    result = CliRunner().invoke(main, ["mock", "--preset", "instant", "--config", "x.yaml"])
    assert result.exit_code == 2


def test_unknown_preset_exit_2() -> None:
    """An unknown preset name is exit 2 listing the known ones."""
    result = CliRunner().invoke(main, ["mock", "--preset", "provider-z", "--check"])
    assert result.exit_code == 2
    assert "known presets" in result.output


def test_bad_config_exit_2_with_located_errors(tmp_path: Path) -> None:
    """A bad simulator config exits 2 and prints file:line: path: problem."""
    path = tmp_path / "sim.yaml"
    path.write_text("providers:\n  b:\n    engine: {slots: 0}\n")
    result = CliRunner().invoke(main, ["mock", "--config", str(path)])
    assert result.exit_code == 2
    assert f"{path}:3: providers.b.engine.slots" in result.output


def test_check_prints_the_providers(tmp_path: Path) -> None:
    """--check validates and lists providers with their faults, without starting anything."""
    path = tmp_path / "sim.yaml"
    path.write_text("providers:\n  fast: {preset: instant, port: 9901}\n  flaky: {faults: {error_rate: 0.1}}\n")
    result = CliRunner().invoke(main, ["mock", "--config", str(path), "--check"])
    assert result.exit_code == 0, result.output
    assert "fast" in result.output
    assert "9901" in result.output
    assert "error_rate" in result.output


def test_mock_subprocess_serves_and_stops_cleanly_on_sigint(mock_process: Callable[..., MockProcess]) -> None:
    """`tailgate mock --preset instant --port 0` logs its URL, answers /health and chat, exits 0 on Ctrl-C."""
    mp = mock_process("--preset", "instant", "--port", "0", "--seed", "3")
    assert mp.urls["instant"].startswith("http://127.0.0.1:")
    with urllib.request.urlopen(mp.url.removesuffix("/v1") + "/health", timeout=5) as resp:  # noqa: S310
        assert json.load(resp)["status"] == "ok"
    req = urllib.request.Request(  # noqa: S310 - loopback URL we just started
        mp.url + "/chat/completions",
        data=json.dumps({"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310
        assert json.load(resp)["usage"]["completion_tokens"] == 3
    assert mp.stop() == 0  # stop() sends one SIGINT (Ctrl-C) and waits


def test_mock_config_with_several_providers_and_control_port(
    mock_process: Callable[..., MockProcess], tmp_path: Path
) -> None:
    """--config starts each provider on its own port and a control port serving /sim/<name>/faults."""
    path = tmp_path / "sim.yaml"
    path.write_text("control_port: 0\nproviders:\n  a: {preset: instant}\n  b: {preset: instant}\n")
    mp = mock_process("--config", str(path))
    assert set(mp.urls) == {"a", "b"}
    assert mp.urls["a"] != mp.urls["b"]
    control = next(line for line in mp.log if "control API" in line).split("control API on ")[1].split("/sim")[0]
    with urllib.request.urlopen(control + "/sim/b/faults", timeout=5) as resp:  # noqa: S310
        assert json.load(resp)["active"] is False


def test_demo_runs_and_prints_both_providers() -> None:
    """`tailgate demo --duration 0` starts two simulated providers, gets answers from both and exits."""
    result = CliRunner().invoke(main, ["demo", "--duration", "0", "--requests", "3", "--time-scale", "0.05"])
    assert result.exit_code == 0, result.output
    assert "primary" in result.output
    assert "secondary" in result.output
    assert "3/3" in result.output
    assert "from openai import OpenAI" in result.output
