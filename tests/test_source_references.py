"""What ``src/`` points a reader to must be there: every ``*.md`` a source file names is a file of this repository,
every ``docs/X.md, "Section"`` names a text that page contains, and no comment or docstring sends the reader to an
issue number (``issue 12``, ``#12``) — a comment states its reason itself, the tracker is not shipped.

The checker is tried first on a small tree written into ``tmp_path`` with the defects planted, so a checker that
finds nothing cannot pass."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from planted import write_tree

ROOT = Path(__file__).resolve().parents[1]

TEXT = ("*.py", "*.js", "*.html", "*.css", "*.lua")
VENDORED = "vendor"

MD = re.compile(r"(?<![\w/.:-])((?:\.\./|[\w-]+/)*[\w.-]+\.md)\b")
"""A markdown file named in text; a URL's (``https://…/x.md``) is not one of ours and is skipped."""
SECTION = re.compile(r"((?:[\w-]+/)*[\w.-]+\.md),\s+\"([^\"]+)\"")
"""``docs/X.md, "Section"``: a place inside a page (a heading or a decision's name), quoted."""
ISSUE_WORD = re.compile(r"\b[Ii]ssues?\s+#?\d+")
ISSUE_HASH = re.compile(r"(?<![\w&#/])#\d+[a-z]?\b")
"""``#12`` in a comment or a docstring (a CSS colour in a string such as ``#222`` is neither)."""


def _files(src: Path) -> Iterator[Path]:
    for pattern in TEXT:
        for path in sorted(src.rglob(pattern)):
            if VENDORED not in path.relative_to(src).parts:
                yield path


def _prose(path: Path, text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file."""
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
        else:
            continue
        for i, stmt in enumerate(body):
            # the docstring, and the attribute docstrings (a string statement after an assignment)
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
                and (i == 0 or isinstance(body[i - 1], ast.Assign | ast.AnnAssign))
            ):
                yield stmt.lineno, stmt.value.value


def _line(text: str, start: int) -> int:
    return text.count("\n", 0, start) + 1


def findings(src: Path, repo: Path) -> list[str]:
    """Every reference under ``src`` to a page ``repo`` lacks, to a section its page lacks, or to an issue number."""
    out: list[str] = []
    for path in _files(src):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(repo)
        flat = " ".join(line.strip().lstrip("#").strip() for line in text.splitlines())  # a section name may wrap
        for m in MD.finditer(text):
            name = m.group(1)
            if not ((repo / name).is_file() or (path.parent / name).is_file()):
                out.append(f"{where}:{_line(text, m.start())}: {name} is not in the repository")
        for m in SECTION.finditer(flat):
            page, section = repo / m.group(1), " ".join(m.group(2).split())
            if page.is_file() and section not in " ".join(page.read_text(encoding="utf-8").split()):
                out.append(f'{where}: {m.group(1)} has no "{section}"')
        for m in ISSUE_WORD.finditer(text):
            out.append(f"{where}:{_line(text, m.start())}: {m.group(0)!r}: say the reason, not the issue")
        if path.suffix == ".py":
            for line, prose in _prose(path, text):
                for m in ISSUE_HASH.finditer(prose):
                    out.append(f"{where}:{line}: {m.group(0)!r}: say the reason, not the issue")
    return sorted(out)


# -- the checker on planted defects -------------------------------------------------------------------------------

CLEAN = {
    "docs/guide.md": "# Guide\n\n## The order of the checks\n\n- **A stream is pushed**, once it began.\n",
    "src/pkg/__init__.py": '"""A package (docs/guide.md, "The order of\nthe checks")."""\n',
    "src/pkg/report.py": 'CSS = "body{color:#222} a{color:#0366d6}"\n# see https://example.com/docs/README.md\n',
    "src/pkg/static/app.js": "/* the API in docs/guide.md */\n",
    "src/pkg/static/vendor/lib.js": "/* fixes issue 12, see DESIGN.md */\n",
}


def _plant(tmp_path: Path, changes: dict[str, str]) -> list[str]:
    write_tree(tmp_path, {**CLEAN, **changes})
    return findings(tmp_path / "src", tmp_path)


def test_a_clean_tree_has_no_findings(tmp_path: Path) -> None:
    assert _plant(tmp_path, {}) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            '"""Shaped like DESIGN.md."""\n', "src/pkg/a.py:1: DESIGN.md is not in the repository", id="design"
        ),
        pytest.param(
            "X = 1  # from ../shared/FIELD-NOTES.md\n",
            "src/pkg/a.py:1: ../shared/FIELD-NOTES.md is not in the repository",
            id="field-notes",
        ),
        pytest.param(
            'def f():\n    """Never a silent cut (PEERS.md)."""\n',
            "src/pkg/a.py:2: PEERS.md is not in the repository",
            id="peers",
        ),
        pytest.param(
            "X = 1\n\n# renewed ahead of need (issue 31)\n",
            "src/pkg/a.py:3: 'issue 31': say the reason",
            id="issue-word",
        ),
        pytest.param(
            '"""As Issue #12 asked."""\n', "src/pkg/a.py:1: 'Issue #12': say the reason", id="issue-hash-word"
        ),
        pytest.param("X = 1  # see Portkey #1797\n", "src/pkg/a.py:1: '#1797': say the reason", id="hash"),
        pytest.param(
            'Y = 2\n"""The slot (a cap refused 24, #31c)."""\n', "src/pkg/a.py:2: '#31c': say the reason", id="attr-doc"
        ),
        pytest.param(
            '"""Measured (docs/guide.md, "Run Q")."""\n', 'src/pkg/a.py: docs/guide.md has no "Run Q"', id="section"
        ),
        pytest.param(
            '"""The numbers: docs/bench.md."""\n', "src/pkg/a.py:1: docs/bench.md is not in the repository", id="page"
        ),
    ],
)
def test_planted_references_are_found(tmp_path: Path, text: str, expected: str) -> None:
    found = _plant(tmp_path, {"src/pkg/a.py": text})
    assert any(f.startswith(expected) for f in found), (expected, found)


def test_a_javascript_comment_is_read_too(tmp_path: Path) -> None:
    found = _plant(tmp_path, {"src/pkg/static/app.js": "// the chart of issue 7 (FIELD-NOTES.md)\n"})
    assert found == [
        "src/pkg/static/app.js:1: 'issue 7': say the reason, not the issue",
        "src/pkg/static/app.js:1: FIELD-NOTES.md is not in the repository",
    ]


# -- the real tree --------------------------------------------------------------------------------------------------


def test_src_points_only_to_what_the_repository_has() -> None:
    assert findings(ROOT / "src", ROOT) == []
