"""One module of tailgate reaches inside aiohttp (``_aiohttp_internals``); every other uses its public API.

"Inside" is a private name aiohttp defines (an attribute its own code sets as ``self._x``, a ``_x`` class
attribute, a ``__slots__`` entry) read or written on an aiohttp object: ``site._server``, ``server._kwargs``, or
``self._x`` in a class derived from an aiohttp class. An aiohttp upgrade then has one module to check.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import aiohttp

SRC = Path(__file__).resolve().parents[2] / "src" / "tailgate"
THE_ONE = SRC / "_aiohttp_internals.py"


@cache
def aiohttp_private_names() -> frozenset[str]:
    """Every single-underscore attribute name aiohttp's own source defines on its objects or classes."""
    names: set[str] = set()
    for path in Path(aiohttp.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    targets = (
                        stmt.targets
                        if isinstance(stmt, ast.Assign)
                        else [stmt.target]
                        if isinstance(stmt, ast.AnnAssign)
                        else []
                    )
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
                    if isinstance(stmt, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets
                    ):
                        names.update(
                            c.value
                            for c in ast.walk(stmt.value)
                            if isinstance(c, ast.Constant) and isinstance(c.value, str)
                        )
    return frozenset(n for n in names if n.startswith("_") and not n.startswith("__"))


def _aiohttp_aliases(tree: ast.Module) -> set[str]:
    """The local names bound to aiohttp or anything imported from it (``web``, ``aiohttp``, ``TCPSite``...)."""
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "aiohttp")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aiohttp":
            aliases.update(a.asname or a.name for a in node.names)
    return aliases


def reaches_inside(source: str) -> list[str]:
    """Where ``source`` touches a private name of aiohttp's (empty when it does not import aiohttp)."""
    tree = ast.parse(source)
    aliases = _aiohttp_aliases(tree)
    if not aliases:
        return []
    private = aiohttp_private_names()
    found: list[str] = []
    derived: list[ast.ClassDef] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and any(ast.unparse(base).split(".")[0] in aliases for base in node.bases)
    ]
    for cls in derived:  # a subclass of an aiohttp class: its self._x and class-level _x
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
                and node.attr in private
            ):
                found.append(f"{cls.name}: {ast.unparse(node)}")
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign):
                found += [f"{cls.name}: {t.id}" for t in stmt.targets if isinstance(t, ast.Name) and t.id in private]
    for node in ast.walk(tree):  # any other object's _x
        if (
            isinstance(node, ast.Attribute)
            and node.attr in private
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(ast.unparse(node))
    return found


def test_only_one_module_reaches_inside_aiohttp() -> None:
    """Across src/tailgate, aiohttp's private names are touched in ``_aiohttp_internals.py`` alone."""
    offenders = {
        str(path.relative_to(SRC)): hits
        for path in sorted(SRC.rglob("*.py"))
        if path != THE_ONE and (hits := reaches_inside(path.read_text()))
    }
    assert offenders == {}
    assert reaches_inside(THE_ONE.read_text())  # the scan sees what the one module does


def test_the_scan_catches_a_planted_reach() -> None:
    """A private attribute read on a site, and one set in a subclass, are both found; public use is not."""
    planted = (
        "from aiohttp import web\n"
        "async def port(site: web.TCPSite) -> int:\n"
        "    return site._server.sockets[0].getsockname()[1]\n"
        "class Quick(web.StreamResponse):\n"
        "    _send_headers_immediately = False\n"
    )
    assert reaches_inside(planted) == ["Quick: _send_headers_immediately", "site._server"]
    assert (
        reaches_inside("from aiohttp import web\nasync def port(site: web.TCPSite) -> int:\n    return site.port\n")
        == []
    )
