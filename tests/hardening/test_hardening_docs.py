"""docs/reliability.md names a test for every row; each named test must exist (the page cannot drift)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_test_named_in_reliability_md_exists() -> None:
    """Each `tests/...py::name` on the page is a test function in that file, and each fault-matrix row
    name (`test_fault_matrix[row-*]`) is a row of the parametrized matrix."""
    text = DOC.read_text(encoding="utf-8")
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)", text)
    assert len(named) >= 20
    for file, name in named:
        assert name in _functions(ROOT / file), f"{file}::{name} named in docs/reliability.md does not exist"
    from test_hardening_faults import ROWS

    rows = {r.name for r in ROWS}
    matrix = re.findall(r"`test_fault_matrix\[(\w+)-\*\]`", text)
    assert len(matrix) >= 19
    assert set(matrix) == rows, set(matrix) ^ rows
    assert "test_client_disconnect" in _functions(ROOT / "tests/hardening/test_hardening_faults.py")
