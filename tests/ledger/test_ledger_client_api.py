"""The client's API in the store (schema v7, issue 32), on a real SQLite file and a real PostgreSQL: the migration
from version 6 keeps every old row and reads it as ``openai``; new rows carry ``anthropic`` or ``openai``."""

from __future__ import annotations

import sqlite3

import psycopg
from ledger_support import BASE_TS, insert_rows, make_row

from tailgate.ledger.pg import PG_MIGRATIONS
from tailgate.ledger.samples import read_samples
from tailgate.ledger.schema import MIGRATIONS, SCHEMA_VERSION
from tailgate.ledger.store import open_store

DDL = "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL, description TEXT NOT NULL)"
OLD = "ts, request_id, alias, endpoint, stream, status, outcome, attempts, prompt_tokens, tokens_estimated, cost"
ROW = (BASE_TS, "old", "chat", "chat", 1, 200, "ok", 1, 1000, 0, 0.002)


def _at_version_6(target: str, upto: int = 6) -> None:
    """A store as tailgate wrote it before the api column: the migrations up to 6 (``upto``), one row."""
    if target.startswith("postgresql://"):
        with psycopg.connect(target, autocommit=True) as pg:
            pg.execute(DDL)
            for step in PG_MIGRATIONS[:upto]:
                for statement in step.statements:
                    pg.execute(statement)
                pg.execute("INSERT INTO schema_version VALUES (%s, 0, %s)", (step.version, step.description))
            pg.execute(f"INSERT INTO requests ({OLD}) VALUES ({', '.join(['%s'] * 11)})", ROW)  # noqa: S608
        return
    conn = sqlite3.connect(target, isolation_level=None)
    try:
        conn.execute(DDL)
        for step in MIGRATIONS[:upto]:
            for statement in step.statements:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, 0, ?)", (step.version, step.description))
        conn.execute(f"INSERT INTO requests ({OLD}) VALUES ({', '.join('?' * 11)})", ROW)  # noqa: S608
    finally:
        conn.close()


def test_migration_to_version_7_reads_old_rows_as_openai(store_target: str) -> None:
    """Opening a version-6 store applies version 7 once; the old row reads ``api = 'openai'`` with its other
    values kept; new rows keep the api they were written with."""
    assert SCHEMA_VERSION >= 7
    _at_version_6(store_target)
    with open_store(store_target) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        insert_rows(conn, [make_row(1, request_id="ant", api="anthropic"), make_row(2, request_id="oai")])
        got = conn.execute("SELECT request_id, api, prompt_tokens FROM requests ORDER BY id").fetchall()
    assert [tuple(r) for r in got] == [("old", "openai", 1000), ("ant", "anthropic", 123), ("oai", "openai", 123)]
    with open_store(store_target) as conn:  # reopened: nothing applied twice
        (count,) = conn.execute("SELECT COUNT(*) FROM schema_version WHERE version = 7").fetchone()
    assert count == 1


SAMPLE_COLS = "ts, provider, model, workload, status, ttft_ms, e2e_ms, output_tokens"


def test_migration_to_version_8_reads_old_samples_as_openai(store_target: str) -> None:
    """Opening a version-7 store with a monitor sample applies version 8 (``samples.api``) once: the old sample
    reads ``api = 'openai'`` with its values kept; a sample written with ``anthropic`` reads back so."""
    assert SCHEMA_VERSION >= 8
    _at_version_6(store_target, upto=7)
    old = (BASE_TS, "p1", "m1", "short", 200, 120.0, 900.0, 32)
    if store_target.startswith("postgresql://"):
        with psycopg.connect(store_target, autocommit=True) as pg:
            pg.execute(f"INSERT INTO samples ({SAMPLE_COLS}) VALUES ({', '.join(['%s'] * 8)})", old)  # noqa: S608
    else:
        raw = sqlite3.connect(store_target, isolation_level=None)
        try:
            raw.execute(f"INSERT INTO samples ({SAMPLE_COLS}) VALUES ({', '.join('?' * 8)})", old)  # noqa: S608
        finally:
            raw.close()
    with open_store(store_target) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        conn.execute(
            f"INSERT INTO samples ({SAMPLE_COLS}, api) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
            (BASE_TS + 1, "p1", "m1", "short", 200, 80.0, 700.0, 16, "anthropic"),
        )
        got = read_samples(conn)
    assert [(s.api, s.ttft_ms, s.output_tokens) for s in got] == [("openai", 120.0, 32), ("anthropic", 80.0, 16)]
    with open_store(store_target) as conn:  # reopened: nothing applied twice
        (count,) = conn.execute("SELECT COUNT(*) FROM schema_version WHERE version = 8").fetchone()
    assert count == 1
