"""Running a doc's flows copy-pasted: its ``tailgate`` command lines and an environment to run them in
(tests/monitor/test_monitor_docs_flow.py, tests/scenario/test_scenario_docs_flow.py)."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def doc_commands(doc: Path, program: str = "tailgate") -> list[str]:
    """The ``program`` command lines of the doc's ```bash blocks, continuation lines joined, comments dropped."""
    out: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == program:
                out.append(shlex.join(words) if ">" not in words else line.split("#")[0].strip())
    return out


def doc_env(tmp: Path) -> dict[str, str]:
    """This environment without tailgate's own variables or a width, ``tailgate`` on PATH, and the default
    store under ``tmp`` (kept apart from a config's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAILGATE_", "COLUMNS"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_DATA_HOME"] = str(tmp / "xdg")
    return env
