"""A small tree of files written for a checker's planted-defect fixtures (the layer, reference, link and import
checkers are each tried first on a tree with the defect planted, so a checker that finds nothing cannot pass)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    """Write each ``relative path → text`` under ``root`` (folders made as needed); ``root``."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root
