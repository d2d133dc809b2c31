"""Every relative link in the repository's documentation resolves: the file exists, and an anchor (``#section``)
names a heading of that file as GitHub renders it (lower case, punctuation dropped, spaces to hyphens, ``-1``, ``-2``
for repeated headings) or an explicit ``<a id>``. Read: README*.md, CONTRIBUTING.md, benchmarks/README.md and every
page under docs/; links inside code (fenced blocks, inline code) are not links.

The checker is tried first on pages written into ``tmp_path`` with a broken link and a broken anchor planted, so a
checker that finds nothing cannot pass."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def pages(root: Path) -> list[Path]:
    found = [*root.glob("README*.md"), root / "CONTRIBUTING.md", root / "benchmarks" / "README.md"]
    found += (root / "docs").rglob("*.md")
    return sorted(p for p in found if p.is_file())


def _prose(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code, inline code blanked out."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        marker = stripped[:3]
        if marker in ("```", "~~~"):
            fence = None if fence == marker else fence or marker
            continue
        if fence is None:
            yield number, re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: " " * len(m.group(0)), line)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"<[^>]+>", "", heading)  # tags
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text stays
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set(EXPLICIT.findall(text))
    fence: str | None = None
    for line in text.splitlines():
        marker = line.lstrip()[:3]
        if marker in ("```", "~~~"):
            fence = None if fence == marker else fence or marker
            continue
        if fence is None and (m := HEADING.match(line)):
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def findings(root: Path, files: list[Path]) -> list[str]:
    """Every relative link or anchor in ``files`` that does not resolve."""
    out: list[str] = []
    cache: dict[Path, set[str]] = {}
    for page in files:
        text = page.read_text(encoding="utf-8")
        where = page.relative_to(root)
        targets = [(n, m.group(1)) for n, line in _prose(text) for m in LINK.finditer(line)]
        targets += [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in REFERENCE.finditer(text)]
        for number, target in targets:
            if EXTERNAL.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                out.append(f"{where}:{number}: {target}: no such file")
                continue
            if anchor and dest.suffix == ".md":
                known = cache.setdefault(dest, anchors(dest.read_text(encoding="utf-8")))
                if anchor not in known:
                    out.append(f"{where}:{number}: {target}: no such anchor")
    return out


# -- the checker on planted defects -------------------------------------------------------------------------------

GUIDE = """# Guide

## The order of the checks

## Store (schema version 2): `samples`

## Notes

## Notes

<a id="kept"></a>

```
[not a link](nowhere.md)
```
"""


def _plant(tmp_path: Path, readme: str) -> list[str]:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(GUIDE, encoding="utf-8")
    (tmp_path / "README.md").write_text(readme, encoding="utf-8")
    return findings(tmp_path, pages(tmp_path))


def test_links_that_resolve_have_no_findings(tmp_path: Path) -> None:
    readme = (
        "[guide](docs/guide.md) · [checks](docs/guide.md#the-order-of-the-checks) · "
        "[store](docs/guide.md#store-schema-version-2-samples) · [notes again](docs/guide.md#notes-1) · "
        "[kept](docs/guide.md#kept) · [site](https://example.com/x.md#y) · `[code](gone.md)`\n\n[ref]: docs/guide.md\n"
    )
    assert _plant(tmp_path, readme) == []


@pytest.mark.parametrize(
    ("readme", "expected"),
    [
        pytest.param(
            "See [the numbers](docs/benchmarks.md).\n", "README.md:1: docs/benchmarks.md: no such file", id="file"
        ),
        pytest.param(
            "\nSee [hardening](docs/guide.md#issue-14-hardening).\n",
            "README.md:2: docs/guide.md#issue-14-hardening: no such anchor",
            id="anchor",
        ),
        pytest.param(
            "[third notes](docs/guide.md#notes-2)\n", "README.md:1: docs/guide.md#notes-2: no such anchor", id="repeat"
        ),
        pytest.param("[img]: docs/img/gone.png\n", "README.md:1: docs/img/gone.png: no such file", id="reference"),
    ],
)
def test_a_planted_broken_link_is_found(tmp_path: Path, readme: str, expected: str) -> None:
    assert _plant(tmp_path, readme) == [expected]


def test_a_page_of_docs_links_within_itself(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Kept\n\n[up](#kept) [gone](#lost)\n", encoding="utf-8")
    assert findings(tmp_path, pages(tmp_path)) == ["docs/a.md:5: #lost: no such anchor"]


# -- the real documentation -------------------------------------------------------------------------------------------


def test_every_relative_link_in_the_docs_resolves() -> None:
    assert findings(ROOT, pages(ROOT)) == []
