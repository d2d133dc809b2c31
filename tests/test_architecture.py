"""The layer picture and table of docs/architecture.md, checked against every import in ``src/tailgate``.

The page's picture (the first code block: one line per layer, top first, the names before the first run of three
spaces) says which packages sit above which; its table's "depends on" column names, per package, the tailgate
packages it imports. Both are read from the page and compared with the imports read with ``ast`` — top level,
``TYPE_CHECKING``, inside functions, and ``importlib.import_module("...")`` / ``__import__("...")`` with a literal
name (an import by a computed name is itself a finding: no one can check it). A finding is an import the table
does not declare, a declared dependency no module has, an arrow that points up or sideways in the picture, or a
package the page does not place.

The checker is tried first on a small package written into ``tmp_path`` with the defects planted (an upward import
across packages, a dynamic one, a computed one, an undeclared one), so a checker that finds nothing cannot pass.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from planted import write_tree

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"

DYNAMIC = ("import_module", "__import__")
COMPUTED = "<computed>"


@dataclass(frozen=True)
class Plan:
    """What a page says: ``layers`` top first, ``rows`` member → the table row (named by its first member) it
    belongs to, ``declared`` row → the rows it says it depends on."""

    layers: list[list[str]]
    rows: dict[str, str]
    declared: dict[str, set[str]]


def _short(name: str, package: str) -> str:
    return name.strip("`").removeprefix(package + ".")


def read_plan(markdown: str, package: str) -> Plan:
    """The picture (first fenced block) and the table (rows starting ``| `<package>``) of an architecture page."""
    block = markdown.split("```", 2)[1]
    layers = [re.split(r" {3,}", line.strip(), maxsplit=1)[0].split() for line in block.strip().splitlines()]
    rows: dict[str, str] = {}
    cells: dict[str, str] = {}
    for line in markdown.splitlines():
        if not line.startswith(f"| `{package}"):
            continue
        first, *_, last = [c.strip() for c in line.strip().strip("|").split(" | ")]
        members = [_short(m, package) for m in re.findall(r"`([^`]+)`", first)]
        for m in members:
            rows[m] = members[0]
        cells[members[0]] = last
    known = set(rows)
    declared = {
        row: {rows[t] for t in (_short(w, package) for w in re.findall(r"[\w.]+", cell)) if t in known}
        for row, cell in cells.items()
    }
    return Plan(layers, rows, declared)


def _modules(root: Path, package: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """(module, line) for every import in ``path``: statements anywhere, relative ones resolved (``from a import b``
    gives ``a`` and ``a.b``), and calls to ``import_module`` / ``__import__`` — ``COMPUTED`` where the name is not
    a literal."""
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target, node.lineno
            for alias in node.names:
                yield f"{target}.{alias.name}", node.lineno
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in DYNAMIC and node.args:
                arg = node.args[0]
                literal = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else COMPUTED
                yield literal, node.lineno


def _unit(module: str, package: str) -> str:
    """The top-level package or module under ``package`` that ``module`` belongs to (``__init__`` for the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def findings(root: Path, package: str, plan: Plan) -> list[str]:
    """Everything in the tree under ``root / package`` that the plan does not say, and everything it says wrongly."""
    level = {name: i for i, layer in enumerate(plan.layers) for name in layer}
    out: list[str] = []
    mods = _modules(root, package)
    units = {_unit(m, package) for m in mods}
    for unit in sorted(units):
        if unit not in plan.rows:
            out.append(f"{unit}: not in the table")
    for row in sorted(set(plan.rows.values())):
        if row not in level:
            out.append(f"{row}: not in the picture")
        if not any(plan.rows.get(u) == row for u in units):
            out.append(f"{row}: in the table, not in the tree")
    for row, deps in sorted(plan.declared.items()):
        for dep in sorted(deps):
            if row in level and dep in level and level[dep] <= level[row]:
                out.append(f"{row} -> {dep}: declared, but the picture does not put {dep} below {row}")
    seen: dict[str, set[str]] = {}
    for name, path in mods.items():
        where = path.relative_to(root)
        source = plan.rows.get(_unit(name, package))
        told: set[tuple[int, str]] = set()  # one finding per line and package (``from a import b, c`` is one import)
        for target, line in imports(name, path):
            if target == COMPUTED:
                out.append(f"{where}:{line}: an import by a computed name (the layers cannot be checked)")
                continue
            if target != package and not target.startswith(package + "."):
                continue
            dest = plan.rows.get(_unit(target, package))
            if source is None or dest is None or dest == source or (line, dest) in told:
                continue
            told.add((line, dest))
            seen.setdefault(source, set()).add(dest)
            if dest not in plan.declared.get(source, set()):
                out.append(f"{where}:{line}: {source} -> {dest} ({target}): not in the table")
            if source in level and dest in level and level[dest] <= level[source]:
                out.append(f"{where}:{line}: {source} -> {dest} ({target}): points up or sideways")
    for row, deps in sorted(plan.declared.items()):
        for dep in sorted(deps - seen.get(row, set())):
            out.append(f"{row} -> {dep}: in the table, but no module of {row} imports {dep}")
    return sorted(set(out))


# -- the checker on planted defects -------------------------------------------------------------------------------

FAKE_PAGE = """# fake

```
top                      the top (+ `_top_util`)
mid  side                two faces
low                      the bottom
__init__                 the root
```

| package | what | depends on |
|---|---|---|
| `fake.top` (+ `_top_util`) | the top | mid, side, `__init__` (`__version__`) |
| `fake.mid` | a face | low |
| `fake.side` | a face | low, aiohttp |
| `fake.low` | the bottom | — |
| `fake.__init__` | the root | — |
"""

CLEAN = {
    "fake/__init__.py": '__version__ = "1"\n',
    "fake/top/__init__.py": "from fake import __version__\nfrom fake.mid import a\nfrom fake._top_util import u\n",
    "fake/_top_util.py": "import importlib\n\nside = importlib.import_module('fake.side.b')\nu = 1\n",
    "fake/mid/__init__.py": "",
    "fake/mid/a.py": "from ..low import x\nfrom . import c\n",
    "fake/mid/c.py": "",
    "fake/side/__init__.py": "",
    "fake/side/b.py": "def f():\n    import fake.low.x\n",
    "fake/low/__init__.py": "",
    "fake/low/x.py": "import json\n",
}


def _plant(tmp_path: Path, changes: dict[str, str]) -> list[str]:
    write_tree(tmp_path, {**CLEAN, **changes})
    return findings(tmp_path, "fake", read_plan(FAKE_PAGE, "fake"))


def test_a_clean_tree_has_no_findings(tmp_path: Path) -> None:
    assert _plant(tmp_path, {}) == []


@pytest.mark.parametrize(
    ("rel", "text", "expected"),
    [
        pytest.param(
            "fake/low/x.py",
            "from fake.mid.a import thing\n",
            ["fake/low/x.py:1: low -> mid (fake.mid.a): not in the table", "points up or sideways"],
            id="upward-across-packages",
        ),
        pytest.param(
            "fake/low/x.py",
            "import importlib\n\n\ndef late():\n    return importlib.import_module('fake.top')\n",
            ["fake/low/x.py:5: low -> top (fake.top): not in the table", "points up or sideways"],
            id="dynamic-import_module",
        ),
        pytest.param(
            "fake/low/x.py",
            "def late():\n    return __import__('fake.side.b')\n",
            ["fake/low/x.py:2: low -> side (fake.side.b): not in the table"],
            id="dynamic-__import__",
        ),
        pytest.param(
            "fake/mid/c.py",
            "from fake.side import b\n",
            ["fake/mid/c.py:1: mid -> side (fake.side): not in the table", "points up or sideways"],
            id="faces-import-each-other",
        ),
        pytest.param(
            "fake/low/x.py",
            "from importlib import import_module\n\nNAME = 'fake.top'\nmod = import_module(NAME)\n",
            ["fake/low/x.py:4: an import by a computed name (the layers cannot be checked)"],
            id="computed-name",
        ),
        pytest.param(
            "fake/side/b.py",
            "X = 1\n",
            ["side -> low: in the table, but no module of side imports low"],
            id="stale-declaration",
        ),
        pytest.param(
            "fake/extra.py",
            "",
            ["extra: not in the table"],
            id="unplaced-package",
        ),
    ],
)
def test_planted_defects_are_found(tmp_path: Path, rel: str, text: str, expected: list[str]) -> None:
    found = _plant(tmp_path, {rel: text})
    for want in expected:
        assert any(want in f for f in found), (want, found)


def test_a_declared_arrow_that_points_up_is_found() -> None:
    page = FAKE_PAGE.replace("| `fake.low` | the bottom | — |", "| `fake.low` | the bottom | mid |")
    plan = read_plan(page, "fake")
    assert plan.declared["low"] == {"mid"}
    found = findings(Path("/nonexistent"), "fake", plan)
    assert "low -> mid: declared, but the picture does not put mid below low" in found


# -- the real tree --------------------------------------------------------------------------------------------------


def test_the_page_reads_as_a_plan() -> None:
    plan = read_plan(DOC.read_text(encoding="utf-8"), "tailgate")
    assert plan.layers[0] == ["cli"]
    assert plan.layers[-1] == ["__init__"]
    assert plan.rows["_cli_util"] == "cli"
    assert plan.rows["__main__"] == "cli"
    assert plan.declared["monitor"] >= {"dashboard", "upstream"}
    assert "bench" not in plan.declared["monitor"]
    assert plan.declared["state"] == {"config", "_runtime"}


def test_the_layers_of_docs_architecture_are_the_imports_of_src() -> None:
    assert findings(SRC, "tailgate", read_plan(DOC.read_text(encoding="utf-8"), "tailgate")) == []
