"""Running a doc's flows copy-pasted: its ``tailgate`` command lines and an environment to run them in
(tests/monitor/test_monitor_docs_flow.py, tests/scenario/test_scenario_docs_flow.py)."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def section(doc: Path, heading: str) -> str:
    """The text of the doc's section under ``heading`` (a whole Markdown heading line), up to the next heading
    of the same or a higher level (``#`` lines inside code blocks are not headings)."""
    level = len(heading.split(" ", 1)[0])
    lines = doc.read_text(encoding="utf-8").splitlines(keepends=True)
    first = lines.index(f"{heading}\n")
    code = False
    for i in range(first + 1, len(lines)):
        if lines[i].startswith("```"):
            code = not code
        elif not code and re.match(rf"#{{1,{level}}} ", lines[i]):
            return "".join(lines[first:i])
    return "".join(lines[first:])


def doc_commands(doc: Path, program: str = "tailgate", *, text: str | None = None) -> list[str]:
    """The ``program`` command lines of the doc's ```bash blocks (or of ``text``, a part of it), continuation
    lines joined, comments dropped; a trailing ``&`` (run in the background) is kept as the last word."""
    out: list[str] = []
    body = doc.read_text(encoding="utf-8") if text is None else text
    for block in re.findall(r"```bash\n(.*?)```", body, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == program:
                background = words[-1] == "&"
                words = words[:-1] if background else words
                cmd = shlex.join(words) if ">" not in words else line.split("#")[0].strip()
                out.append(f"{cmd} &" if background else cmd)
    return out


def doc_env(tmp: Path) -> dict[str, str]:
    """This environment without tailgate's own variables or a width, ``tailgate`` on PATH, and the default
    store under ``tmp`` (kept apart from a config's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAILGATE_", "COLUMNS"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_DATA_HOME"] = str(tmp / "xdg")
    return env
