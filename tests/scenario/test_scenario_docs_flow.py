"""docs/scenarios.md's commands, copied from the page and run as written (TAILGATE_TIME_SCALE=0.02, as it says).

The block is read from the doc at test time, so a command that changes there is the command that runs
here; the only thing the test adds is the environment variable the page documents for a quick run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from doc_flows import ROOT, doc_commands, doc_env


def test_doc_commands_are_read_from_the_page() -> None:
    """The extraction finds the page's four scenario commands, the continued one joined."""
    commands = doc_commands(ROOT / "docs" / "scenarios.md")
    assert len(commands) == 4, commands
    assert any("--markdown outage.md" in c and "--policy adaptive" in c for c in commands)


@pytest.mark.timeout(300)
def test_the_scenarios_page_flow_runs_as_written(tmp_path: Path) -> None:
    """Every command of docs/scenarios.md's first block runs (exit 0) with TAILGATE_TIME_SCALE=0.02; each
    prints its tables, a verdict per question and the time-scale caveat; the files it names are written."""
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    env = {**doc_env(tmp_path), "TAILGATE_TIME_SCALE": "0.02"}
    for command in doc_commands(ROOT / "docs" / "scenarios.md"):
        done = subprocess.run(  # noqa: S602 - the doc's own command line, as a user pastes it into a shell
            command,
            shell=True,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        if "--check" in command:
            assert ": ok (" in done.stdout
            continue
        assert "verdict: " in done.stdout, (command, done.stdout[-2000:])
        assert "requests that failed for the client" in done.stdout
        assert "run at --time-scale" in done.stderr  # not 1: the caveat
        assert "…" not in done.stdout  # piped: nothing cut
    doc = json.loads((tmp_path / "outage.json").read_text(encoding="utf-8"))
    assert [r["name"] for r in doc["runs"]] == ["weighted", "adaptive"]
    assert "Verdicts" in (tmp_path / "outage.html").read_text(encoding="utf-8")
    md = (tmp_path / "outage.md").read_text(encoding="utf-8")
    assert "- fault on primary at" in md
    assert "Note: run at --time-scale 0.02" in md
