"""The store's schema: versioned migrations, WAL, and readers beside a writer."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from ledger_support import make_row

from tailgate.ledger import open_db, read_rows
from tailgate.ledger.schema import MIGRATIONS, SCHEMA_VERSION, SchemaError, schema_version
from tailgate.ledger.sqlite import _INSERT, _params


def _insert(conn: sqlite3.Connection, *rows: object) -> None:
    conn.execute("BEGIN")
    conn.executemany(_INSERT, map(_params, rows))
    conn.execute("COMMIT")


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    """Migration versions run 1, 2, 3 … and SCHEMA_VERSION is the last."""
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert SCHEMA_VERSION == MIGRATIONS[-1].version == 11


def test_migration_runs_once_and_reopen_keeps_data(tmp_path: Path) -> None:
    """Re-opening a database applies nothing again: each migration recorded once, rows kept."""
    path = tmp_path / "t.db"
    with closing(open_db(path)) as conn:
        _insert(conn, make_row(1))
    for _ in range(3):
        with closing(open_db(path)) as conn:
            assert schema_version(conn) == SCHEMA_VERSION
            assert conn.execute("SELECT version, description FROM schema_version ORDER BY version").fetchall() == [
                (m.version, m.description) for m in MIGRATIONS
            ]
    assert read_rows(path) == [make_row(1)]


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A database written by a newer tailgate is not touched."""
    path = tmp_path / "t.db"
    with closing(open_db(path)) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, 0, 'from the future')")
    with pytest.raises(SchemaError, match="99"):
        open_db(path)


def test_wal_mode_is_on(tmp_path: Path) -> None:
    """open_db leaves the file in WAL mode, which persists for every later connection."""
    path = tmp_path / "t.db"
    with closing(open_db(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
    with closing(sqlite3.connect(path)) as plain:
        assert plain.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_reader_is_not_blocked_by_an_open_write(tmp_path: Path) -> None:
    """While another connection holds the write lock mid-transaction, read_rows returns the committed rows."""
    path = tmp_path / "t.db"
    with closing(open_db(path)) as writer:
        _insert(writer, make_row(1))
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(_INSERT, _params(make_row(2)))
        assert read_rows(path) == [make_row(1)]
        writer.execute("COMMIT")
    assert read_rows(path) == [make_row(1), make_row(2)]


def test_read_rows_orders_by_arrival_and_limits_to_newest(tmp_path: Path) -> None:
    """Rows come back oldest first by ts (not insertion order); limit keeps the newest."""
    path = tmp_path / "t.db"
    with closing(open_db(path)) as conn:
        _insert(conn, make_row(3), make_row(1), make_row(4), make_row(2))
    assert [r.request_id for r in read_rows(path)] == ["req-00000001", "req-00000002", "req-00000003", "req-00000004"]
    assert [r.request_id for r in read_rows(path, limit=2)] == ["req-00000003", "req-00000004"]
    assert read_rows(path, limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        read_rows(path, limit=-1)


def test_read_rows_does_not_create_a_missing_database(tmp_path: Path) -> None:
    """Reading a path with no database raises instead of leaving an empty file behind."""
    with pytest.raises(FileNotFoundError):
        read_rows(tmp_path / "nope" / "t.db")
    assert not (tmp_path / "nope").exists()
