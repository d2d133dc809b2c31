"""The store protocol: one synchronous connection shape over SQLite and PostgreSQL (docs/ledger.md).

Readers (leaderboard, dashboard, ``tailgate usage``), key administration and the roll-up job speak SQL
with ``?`` placeholders through :class:`Queryable`; ``open_store(target)`` returns a
:class:`StoreConn` for a SQLite path or a ``postgresql://`` URL, migrated to the current schema.
A plain ``sqlite3.Connection`` from ``open_db`` is a ``Queryable`` too (its dialect is ``sqlite``).

PostgreSQL goes through psycopg 3 (docs/ledger.md says why): a client-side-binding cursor, so the
``?`` → ``%s`` translation is the only difference the SQL sees, and ``NUMERIC`` sums come back as
``int`` / ``float`` like SQLite's.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tailgate.ledger.errors import StoreError, StoreSetUpError, redact_url
from tailgate.ledger.schema import open_db

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "Dialect",
    "Queryable",
    "StoreConn",
    "StoreError",
    "StoreSetUpError",
    "db_errors",
    "dialect_of",
    "has_table",
    "is_postgres_url",
    "open_store",
    "redact_url",
]

Dialect = Literal["sqlite", "postgres"]


class Queryable(Protocol):
    """What readers need: ``execute(sql, params)`` returning a cursor with ``fetchall`` / ``fetchone``."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Any: ...


def db_errors() -> tuple[type[BaseException], ...]:
    """What reading a store may raise besides bugs: SQLite's and psycopg's errors, StoreError, SchemaError."""
    from tailgate.ledger.schema import SchemaError

    errors: tuple[type[BaseException], ...] = (sqlite3.Error, StoreError, SchemaError)
    try:
        import psycopg
    except ImportError:  # pragma: no cover - a dependency, but the SQLite store works without it
        return errors
    return (*errors, psycopg.Error)


def is_postgres_url(target: str | Path | None) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def dialect_of(conn: Queryable) -> Dialect:
    return "postgres" if getattr(conn, "dialect", "sqlite") == "postgres" else "sqlite"


def has_table(conn: Queryable, name: str) -> bool:
    if dialect_of(conn) == "postgres":
        sql = "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?"
    else:
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return conn.execute(sql, (name,)).fetchone() is not None


class StoreConn:
    """A migrated connection to either backend, in autocommit mode; ``transaction()`` groups writes."""

    dialect: Dialect

    def __init__(self, raw: sqlite3.Connection | psycopg.Connection[Any], dialect: Dialect) -> None:
        self.raw = raw
        self.dialect = dialect

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        if self.dialect == "postgres":
            return self.raw.execute(sql.replace("?", "%s"), parameters)
        return self.raw.execute(sql, parameters)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raw = self.raw
        if isinstance(raw, sqlite3.Connection):
            raw.executemany(sql, rows)
        else:
            with raw.cursor() as cur:
                cur.executemany(sql.replace("?", "%s"), rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[StoreConn]:
        """One atomic unit: SQLite ``BEGIN IMMEDIATE`` (takes the write lock), PostgreSQL a transaction."""
        if self.dialect == "postgres":
            with self.raw.transaction():  # type: ignore[union-attr]
                yield self
            return
        raw = self.raw
        assert isinstance(raw, sqlite3.Connection)
        raw.execute("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            if raw.in_transaction:
                raw.execute("ROLLBACK")
            raise
        raw.execute("COMMIT")

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> StoreConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(target: str | Path, *, connect_timeout: float = 5.0) -> StoreConn:
    """Open (and migrate) the store at ``target``: a SQLite path, or a ``postgresql://`` URL.

    Raises ``SchemaError`` for a store written by a newer tailgate, ``StoreError`` when PostgreSQL
    cannot be reached (the message names the URL without its password).
    """
    if is_postgres_url(target):
        from tailgate.ledger.pg import connect

        return StoreConn(connect(str(target), connect_timeout=connect_timeout), "postgres")
    return StoreConn(open_db(target), "sqlite")
