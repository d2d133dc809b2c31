"""The gateway's house rules, read from the source with ``ast`` (docs/architecture.md, "The gateway's house"):
no import circle in ``gateway/`` (nor in ``sim/``, ``ledger/``, ``routing/``), type-only and function-level
imports included, and nothing but the composition roots and the process entry points imports ``gateway.app``.

The checker is tried first on packages written into ``tmp_path`` with the defects planted (a circle through a
``TYPE_CHECKING`` import and a relative import; an owner reaching up to ``app``), so a checker that finds
nothing cannot pass."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from planted import write_tree

SRC = Path(__file__).resolve().parents[2] / "src"

APP = "tailgate.gateway.app"
APP_IMPORTERS = (
    "tailgate.cli",  # `tailgate serve` / `tailgate reload`: the command line, a composition
    "tailgate.demo",  # the demo's stack starts a real gateway
    "tailgate.scenario",  # the scenario runner starts in-process gateways
    "tailgate.gateway.process.serve",  # the process entry point: bind, signals, workers
    "tailgate.gateway.process.replicas",  # LocalFleet: N gateways in one process (demo, scenarios)
)
"""Who may import ``gateway.app``: a module named here or inside a package named here."""


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module under ``root`` (the directory of ``package``), by dotted name; a package by its own name."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package, *parts])] = path
    return out


def imported(name: str, path: Path) -> Iterator[str]:
    """Every module ``name`` (at ``path``) imports anywhere in its body: top level, ``if TYPE_CHECKING:``, inside
    functions; relative imports resolved; ``from a import b`` yields ``a`` and ``a.b`` (b may be a module)."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target
            for alias in node.names:
                yield f"{target}.{alias.name}"


def graph(root: Path, package: str) -> dict[str, set[str]]:
    """module → the modules of the same package it imports."""
    mods = modules(root, package)
    return {name: {m for m in imported(name, path) if m in mods and m != name} for name, path in mods.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def importers(root: Path, package: str, target: str) -> set[str]:
    """Modules under ``root`` that import ``target`` (or a name from it)."""
    return {
        name
        for name, path in modules(root, package).items()
        if name != target and any(m == target or m.startswith(target + ".") for m in imported(name, path))
    }


def forbidden_app_importers(root: Path, package: str = "tailgate") -> set[str]:
    """Importers of ``gateway.app`` that are neither a composition nor an entry point (``APP_IMPORTERS``)."""
    return {m for m in importers(root, package, APP) if not any(m == a or m.startswith(a + ".") for a in APP_IMPORTERS)}


# -- the checker on planted defects -------------------------------------------------------------------------------


def _plant(root: Path, files: dict[str, str]) -> Path:
    return write_tree(root, files)


def test_the_checker_finds_a_planted_circle_through_type_only_and_relative_imports(tmp_path: Path) -> None:
    """A circle a → b → a made of a ``TYPE_CHECKING`` import and a relative import is found; cut it and none is."""
    pkg = _plant(
        tmp_path / "pkg",
        {
            "__init__.py": "",
            "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
            "b.py": "def f():\n    from .a import x\n",
            "c.py": "from . import a\n",
        },
    )
    assert circles(graph(pkg, "pkg")) == [["pkg.a", "pkg.b"]]
    (pkg / "b.py").write_text("X = 1\n", encoding="utf-8")
    assert circles(graph(pkg, "pkg")) == []


def test_the_checker_finds_an_owner_importing_the_app(tmp_path: Path) -> None:
    """An owner under ``gateway/`` that imports ``app`` only for a type annotation is reported; the entry points
    and the compositions that import it are not."""
    src = _plant(
        tmp_path / "tailgate",
        {
            "__init__.py": "",
            "cli.py": "from tailgate.gateway.app import Gateway\n",
            "demo/__init__.py": "",
            "demo/stack.py": "from tailgate.gateway.app import Gateway\n",
            "gateway/__init__.py": "",
            "gateway/app.py": "class Gateway: ...\n",
            "gateway/process/serve.py": "from ..app import Gateway\n",
            "gateway/request_path/proxy.py": (
                "import typing\nif typing.TYPE_CHECKING:\n    from ...gateway.app import Gateway\n"
            ),
            "gateway/request_path/routes.py": "from tailgate.gateway import app\n",
            "bench/__init__.py": "def run():\n    import tailgate.gateway.app\n",
        },
    )
    assert forbidden_app_importers(src) == {
        "tailgate.gateway.request_path.proxy",
        "tailgate.gateway.request_path.routes",
        "tailgate.bench",
    }


# -- the rules on the real source ---------------------------------------------------------------------------------


@pytest.mark.parametrize("package", ["gateway", "sim", "ledger", "routing"])
def test_no_import_circle(package: str) -> None:
    """No module of the package imports, directly or not, a module that imports it (type-only imports count)."""
    assert circles(graph(SRC / "tailgate" / package, f"tailgate.{package}")) == []


def test_only_the_composition_roots_and_entry_points_import_the_gateway_app() -> None:
    """Nothing below the composition root imports ``gateway.app``; who does is exactly the listed compositions."""
    assert forbidden_app_importers(SRC / "tailgate") == set()
    found = importers(SRC / "tailgate", "tailgate", APP)
    assert {"tailgate.gateway.process.serve", "tailgate.gateway.process.replicas", "tailgate.cli"} <= found
