"""The docs say the schema version the code writes, and list every migration as the code describes it: the number
and the list are read from ``ledger/schema.py``, so a new migration without its line in docs/ledger.md fails here."""

from __future__ import annotations

import re
from pathlib import Path

from tailgate.ledger.schema import MIGRATIONS, SCHEMA_VERSION

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _versions_said(text: str) -> list[int]:
    """Every "schema version N" / "schema vN" a page says (the current version, by this page's convention)."""
    return [int(n) for n in re.findall(r"schema (?:version |v)(\d+)", text, flags=re.IGNORECASE)]


def _table(text: str) -> list[tuple[int, str]]:
    """The rows of the "| version | what it added |" table."""
    start = text.index("| version | what it added |")
    rows: list[tuple[int, str]] = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        version, what = (c.strip() for c in line.strip("|").split("|", 1))
        rows.append((int(version), what))
    return rows


def test_docs_architecture_and_ledger_say_the_version_the_code_writes() -> None:
    for page in ("architecture.md", "ledger.md"):
        said = _versions_said((DOCS / page).read_text(encoding="utf-8"))
        assert said, page
        assert set(said) == {SCHEMA_VERSION}, (page, said)


def test_docs_ledger_lists_every_migration_as_the_code_describes_it() -> None:
    assert _table((DOCS / "ledger.md").read_text(encoding="utf-8")) == [(m.version, m.description) for m in MIGRATIONS]


def test_a_page_behind_the_code_is_caught() -> None:
    """The readers on a planted page: an old number and a missing row are seen."""
    page = "The store is at **schema version 6**.\n\n| version | what it added |\n|---|---|\n| 1 | requests |\n\nmore\n"
    assert _versions_said(page) == [6]
    assert _table(page) == [(1, "requests")]
    assert _table(page) != [(m.version, m.description) for m in MIGRATIONS]
