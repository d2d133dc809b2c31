"""Tests marked ``slow`` (long searches on the simulator) run only when asked for: ``pytest -m slow``."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None and HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)
