"""docs/monitor.md's commands, copied from the page and run as written against simulated providers.

The ```bash blocks are read from the doc at test time. The test writes the ``gateway.yaml`` the page talks
about (two simulated providers, ``ledger.path`` set, as a gateway that keeps a ledger has), and changes only
what the page itself says: a command that runs until Ctrl-C gets Ctrl-C (SIGINT) after its first round,
and ``--serve`` gets ``--port 0`` (tests never bind a fixed port).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import ThreadedSim
from doc_flows import ROOT, doc_commands, doc_env


def _until_first_round(command: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Start a command that runs until Ctrl-C; after its first round (≤ 15 s), press Ctrl-C."""
    log = cwd / "run.log"
    with log.open("w") as out:
        # The words the shell would pass (no redirection in these lines); no shell in between, so the
        # exit code is the command's own, not a shell's killed by the same Ctrl-C.
        proc = subprocess.Popen(
            shlex.split(command), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 15.0
            while time.monotonic() < deadline and proc.poll() is None:
                text = log.read_text()
                if "round 0:" in text or "peak-hour load test due" in text:
                    break
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the terminal's whole process group
            rc = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return rc, log.read_text()


@pytest.mark.timeout(240)
def test_the_monitor_page_flow_runs_as_written(tmp_path: Path, threaded_sim: Callable[..., ThreadedSim]) -> None:
    """Monitor (until Ctrl-C, --once, --serve, --peak-at) then every leaderboard command of the page: each
    exits 0, the leaderboards read the store the monitor wrote (the config's ledger.path) and show rows."""
    primary, secondary = threaded_sim("instant"), threaded_sim("instant")
    (tmp_path / "gateway.yaml").write_text(
        "providers:\n"
        f"  primary: {{base_url: '{primary.url}'}}\n"
        f"  secondary: {{base_url: '{secondary.url}'}}\n"
        "models:\n"
        "  deepseek-v3.2:\n"
        "    routes:\n"
        "      - {provider: primary, model: deepseek-v3.2, weight: 80}\n"
        "      - {provider: secondary, model: deepseek-v3.2, weight: 20}\n"
        "ledger: {path: ./gateway.db}\n",
        encoding="utf-8",
    )
    env = doc_env(tmp_path)
    commands = doc_commands(ROOT / "docs" / "monitor.md")
    assert sum(c.startswith("tailgate leaderboard") for c in commands) >= 4, commands
    assert any("--peak-at" in c for c in commands)
    ran: list[str] = []
    for command in commands:
        if command.startswith("tailgate monitor") and "--once" not in command:
            rc, text = _until_first_round(command + (" --port 0" if "--serve" in command else ""), tmp_path, env)
        else:
            done = subprocess.run(  # noqa: S602 - the doc's own command line, as a user pastes it into a shell
                command,
                shell=True,
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            rc, text = done.returncode, done.stdout + done.stderr
        assert rc == 0, (command, text[-3000:])
        ran.append(command)
        if command.startswith("tailgate leaderboard") and "--json" not in command:
            assert "primary" in text, (command, text)
            assert "…" not in text
    assert (tmp_path / "gateway.db").exists()
    assert not (tmp_path / "xdg").exists()  # nothing went to the default store
    board = json.loads((tmp_path / "board.json").read_text(encoding="utf-8"))
    assert {r["provider"] for r in board["rows"]} == {"primary", "secondary"}
    assert all(r["samples"] >= 3 for r in board["rows"])
    assert len(ran) == len(commands)


def test_a_bare_leaderboard_after_a_configured_monitor_says_how_to_find_the_store(tmp_path: Path) -> None:
    """The flow the docs used to show (monitor --config, then a bare leaderboard) fails with a hint naming
    --config: the store is the config's ledger.path, not the default one."""
    env = doc_env(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "tailgate", "leaderboard"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--config" in done.stderr
    assert "ledger.path" in done.stderr
