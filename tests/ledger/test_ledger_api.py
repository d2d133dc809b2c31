"""The ledger's public face, its row type against the table, and where the database lives."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from ledger_support import make_row

import tailgate.ledger
from tailgate.ledger import LedgerRow, default_db_path, open_db


def test_public_names_change_only_on_purpose() -> None:
    """tailgate.ledger exports exactly these five names, all defined inside the package."""
    assert sorted(tailgate.ledger.__all__) == ["LedgerRow", "SQLiteLedger", "default_db_path", "open_db", "read_rows"]
    for name in tailgate.ledger.__all__:
        assert getattr(tailgate.ledger, name).__module__.startswith("tailgate.ledger.")


def test_row_is_frozen_plain_data() -> None:
    """A LedgerRow is immutable and slotted (cheap to build on the hot path)."""
    row = make_row()
    with pytest.raises(AttributeError):  # a frozen msgspec Struct
        row.status = 500  # type: ignore[misc]
    assert not hasattr(row, "__dict__")


def test_table_columns_match_row_fields(tmp_path: Path) -> None:
    """The requests table has an integer primary key plus exactly one column per LedgerRow field, in order."""
    with closing(open_db(tmp_path / "t.db")) as conn:
        info = conn.execute("PRAGMA table_info(requests)").fetchall()
    names = [col[1] for col in info]
    assert names == ["id", *LedgerRow.__struct_fields__]
    assert info[0][2] == "INTEGER"
    assert info[0][5] == 1


def test_no_text_columns_for_prompts_or_completions(tmp_path: Path) -> None:
    """Nothing in the schema could hold prompt or completion text."""
    with closing(open_db(tmp_path / "t.db")) as conn:
        names = {col[1] for col in conn.execute("PRAGMA table_info(requests)")}
    assert not {n for n in names if any(word in n for word in ("prompt_text", "message", "content", "completion"))}


def test_indexes_on_ts_and_provider_ts(tmp_path: Path) -> None:
    """The ledger is indexed by time and by provider then time."""
    with closing(open_db(tmp_path / "t.db")) as conn:
        indexes = {
            name: [c[2] for c in conn.execute(f"PRAGMA index_info({name})")]
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='requests'")
        }
    assert indexes == {
        "requests_ts": ["ts"],
        "requests_provider_ts": ["provider", "ts"],
        "requests_key_ts": ["key_id", "ts"],
    }


def test_default_path_honours_tailgate_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """$TAILGATE_DB wins over everything, with ~ expanded."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TAILGATE_DB", str(tmp_path / "explicit.db"))
    assert default_db_path() == tmp_path / "explicit.db"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TAILGATE_DB", "~/x.db")
    assert default_db_path() == tmp_path / "home" / "x.db"


def test_default_path_honours_xdg_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without $TAILGATE_DB the file lives under $XDG_DATA_HOME/tailgate/."""
    monkeypatch.delenv("TAILGATE_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "tailgate" / "tailgate.db"


def test_default_path_falls_back_to_local_share(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With neither variable set (or an empty or relative XDG_DATA_HOME) it is ~/.local/share/tailgate/tailgate.db."""
    monkeypatch.delenv("TAILGATE_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = tmp_path / ".local" / "share" / "tailgate" / "tailgate.db"
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert default_db_path() == expected
    monkeypatch.setenv("XDG_DATA_HOME", "")
    assert default_db_path() == expected
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")
    assert default_db_path() == expected


def test_default_path_creates_nothing_until_opened(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Resolving the path touches no disk; open_db makes the parent folders."""
    monkeypatch.delenv("TAILGATE_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    path = default_db_path()
    assert not (tmp_path / "xdg").exists()
    with closing(open_db(path)) as conn:
        assert isinstance(conn, sqlite3.Connection)
    assert path.is_file()
