"""The store's two migration lists — SQLite's ``schema.MIGRATIONS`` and PostgreSQL's ``pg.PG_MIGRATIONS``, written
once per dialect — agree: the same versions with the same descriptions, and after every version the same tables
with the same columns (name, kind, nullability, default) and the same indexes, on a real SQLite file and a real
PostgreSQL database.

The differences are the documented ones (docs/ledger.md, "One store for the fleet"), listed here so that any other
one fails: the rows PostgreSQL receives from the replicas' spools carry ``origin`` / ``origin_id``, ids are
``BIGSERIAL`` (a default of ``nextval(...)``), and ``spool_state`` (where a replica's spool keeps its origin and
cursors) exists only in SQLite. A column's kind compares by SQLite's type affinity: ``BIGINT`` and ``INTEGER`` are
integers, ``DOUBLE PRECISION`` and ``REAL`` are reals.

The comparison is tried first on a planted disagreement (a column added in a different version, another default),
so a comparison that finds nothing cannot pass."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tailgate.ledger import pg
from tailgate.ledger.pg import PG_MIGRATIONS
from tailgate.ledger.schema import MIGRATIONS, SCHEMA_VERSION, Migration, open_db

Column = tuple[str, str, bool, str | None]
"""(name, kind: integer | real | text, not null, default)."""
Tables = dict[str, list[Column]]

SQLITE_ONLY_TABLES = {"spool_state"}
PG_ONLY_COLUMNS = {"origin", "origin_id"}
ROWID_TABLES = {"traffic_minutes"}
"""Shipped tables whose SQLite rows have only the implicit ``rowid`` (what ``origin_id`` refers to), and which
PostgreSQL numbers with an ``id BIGSERIAL`` of its own."""
SPOOL_DESCRIPTION = ", the spool's shipping state"
"""Version 3's SQLite description names ``spool_state`` too, which PostgreSQL has not."""


def _kind(declared: str) -> str:
    t = declared.upper()
    if "INT" in t or "SERIAL" in t:
        return "integer"
    if "REAL" in t or "DOUBLE" in t or "FLOA" in t or "NUMERIC" in t:
        return "real"
    return "text"


def _default(value: str | None) -> str | None:
    """A default as both write it: PostgreSQL's ``'openai'::text`` is SQLite's ``'openai'``; a ``BIGSERIAL``'s
    ``nextval(...)`` is SQLite's rowid alias (no default)."""
    if value is None or value.startswith("nextval("):
        return None
    return value.split("::", 1)[0]


def sqlite_tables(conn: sqlite3.Connection) -> Tables:
    names = [
        r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    ]
    return {
        name: [
            (col, _kind(declared), bool(notnull) or bool(pk), _default(default))
            for _, col, declared, notnull, default, pk in conn.execute(f"PRAGMA table_info({name})")
        ]
        for name in sorted(names)
    }


def sqlite_indexes(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    """(table, index) of the indexes a migration created (not those SQLite makes for a key)."""
    rows = conn.execute("SELECT tbl_name, name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
    return {(t, n) for t, n in rows}


def pg_indexes(conn: psycopg.Connection[Any]) -> set[tuple[str, str]]:
    """(table, index) of the indexes a migration created (not those of a primary key or a ``UNIQUE``)."""
    rows = conn.execute(
        "SELECT i.tablename, i.indexname FROM pg_indexes i WHERE i.schemaname = current_schema()"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)"
    )
    return {(t, n) for t, n in rows}


def pg_tables(conn: psycopg.Connection[Any]) -> Tables:
    out: Tables = {}
    for table, col, declared, nullable, default in conn.execute(
        "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns"
        " WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
    ):
        out.setdefault(table, []).append((col, _kind(declared), nullable == "NO", _default(default)))
    return out


def differences(sqlite: Tables, postgres: Tables) -> list[str]:
    """What the two schemas disagree on, beyond the documented differences."""
    out: list[str] = []
    for table in sorted(set(sqlite) - set(postgres) - SQLITE_ONLY_TABLES):
        out.append(f"{table}: only in SQLite")
    for table in sorted(set(postgres) - set(sqlite)):
        out.append(f"{table}: only in PostgreSQL")
    for table in sorted(set(sqlite) & set(postgres)):
        lite = sqlite[table]
        post = [
            c for c in postgres[table] if c[0] not in PG_ONLY_COLUMNS and not (table in ROWID_TABLES and c[0] == "id")
        ]
        if lite != post:
            only_lite = [c for c in lite if c not in post]
            only_pg = [c for c in post if c not in lite]
            out.append(
                f"{table}: SQLite {only_lite} / PostgreSQL {only_pg}"
                if only_lite or only_pg
                else f"{table}: column order"
            )
    return out


def _apply_sqlite(conn: sqlite3.Connection, step: Migration) -> None:
    for statement in step.statements:
        conn.execute(statement)


def _apply_pg(conn: psycopg.Connection[Any], step: Migration) -> None:
    for statement in step.statements:
        conn.execute(statement)


def step_by_step(tmp_path: Path, pg_url: str, lite: Sequence[Migration], post: Sequence[Migration]) -> list[str]:
    """Apply both lists one version at a time to an empty SQLite file and an empty PostgreSQL database; the
    disagreements after each version, prefixed with it."""
    out: list[str] = []
    with (
        closing(sqlite3.connect(tmp_path / "steps.db", isolation_level=None)) as lconn,
        psycopg.connect(pg_url, autocommit=True) as pconn,
    ):
        for a, b in zip(lite, post, strict=True):
            _apply_sqlite(lconn, a)
            _apply_pg(pconn, b)
            out += [f"v{a.version}: {d}" for d in differences(sqlite_tables(lconn), pg_tables(pconn))]
            lite_ix, pg_ix = sqlite_indexes(lconn), pg_indexes(pconn)
            out += [f"v{a.version}: index {t}.{n}: only in SQLite" for t, n in sorted(lite_ix - pg_ix)]
            out += [f"v{a.version}: index {t}.{n}: only in PostgreSQL" for t, n in sorted(pg_ix - lite_ix)]
    return out


def test_the_same_versions_with_the_same_descriptions() -> None:
    lite = [(m.version, m.description.replace(SPOOL_DESCRIPTION, "")) for m in MIGRATIONS]
    assert lite == [(m.version, m.description) for m in PG_MIGRATIONS]
    assert MIGRATIONS[2].description.endswith(SPOOL_DESCRIPTION)
    assert PG_MIGRATIONS[-1].version == SCHEMA_VERSION


def test_after_every_version_the_same_tables_and_columns(tmp_path: Path, pg_url: str) -> None:
    assert step_by_step(tmp_path, pg_url, MIGRATIONS, PG_MIGRATIONS) == []


def test_the_stores_tailgate_opens_agree(tmp_path: Path, pg_url: str) -> None:
    """Through the code that migrates for real (``open_db``, ``pg.connect``): the same schema at the same version,
    ``schema_version`` included."""
    with closing(open_db(tmp_path / "store.db")) as lconn, pg.connect(pg_url) as pconn:
        lite, post = sqlite_tables(lconn), pg_tables(pconn)
        assert differences(lite, post) == []
        assert "requests" in lite
        assert "schema_version" in lite
        assert pg.schema_version(pconn) == SCHEMA_VERSION
        assert lconn.execute("SELECT MAX(version) FROM schema_version").fetchone() == (SCHEMA_VERSION,)


# -- the comparison on planted disagreements --------------------------------------------------------------------------


def _plant(steps: tuple[Migration, ...], plants: dict[int, tuple[str, ...]]) -> tuple[Migration, ...]:
    return tuple(replace(m, statements=plants[m.version]) if m.version in plants else m for m in steps)


@pytest.mark.parametrize(
    ("plants", "expected"),
    [
        pytest.param(
            {8: ("ALTER TABLE samples ADD COLUMN api TEXT NOT NULL DEFAULT 'anthropic'",)},
            "v8: samples: SQLite [('api', 'text', True, \"'anthropic'\")]"
            " / PostgreSQL [('api', 'text', True, \"'openai'\")]",
            id="another-default",
        ),
        pytest.param(
            {
                7: (
                    "ALTER TABLE requests ADD COLUMN api TEXT NOT NULL DEFAULT 'openai'",
                    "ALTER TABLE samples ADD COLUMN api TEXT NOT NULL DEFAULT 'openai'",
                ),
                8: (),
            },
            "v7: samples: SQLite [('api', 'text', True, \"'openai'\")] / PostgreSQL []",
            id="a-column-a-version-early",
        ),
        pytest.param(
            {
                6: (
                    "ALTER TABLE requests ADD COLUMN cached_tokens REAL",
                    "ALTER TABLE usage_hourly ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0",
                    "ALTER TABLE usage_hourly ADD COLUMN reported_prompt_tokens INTEGER NOT NULL DEFAULT 0",
                )
            },
            "v6: requests: SQLite [('cached_tokens', 'real', False, None)] / PostgreSQL [('cached_tokens', 'integer'",
            id="another-kind",
        ),
        pytest.param(
            {3: tuple(st for st in MIGRATIONS[2].statements if "requests_key_ts" not in st)},
            "v3: index requests.requests_key_ts: only in PostgreSQL",
            id="a-missing-index",
        ),
        pytest.param(
            {4: ("CREATE TABLE load_tests (id INTEGER PRIMARY KEY)",)},
            "v4: load_tests: SQLite [] / PostgreSQL [('ts', 'real', True, None)",
            id="a-missing-column",
        ),
    ],
)
def test_a_planted_disagreement_is_found(
    tmp_path: Path, pg_url: str, plants: dict[int, tuple[str, ...]], expected: str
) -> None:
    found = step_by_step(tmp_path, pg_url, _plant(MIGRATIONS, plants), PG_MIGRATIONS)
    assert any(f.startswith(expected) for f in found), (expected, found)
