"""The tailgate SQLite store: its schema, its migrations, and how to open it.

One file holds everything tailgate persists (path: ``default_db_path()``, ``--db`` / ``$TAILGATE_DB``). Each table
and column is described in docs/ledger.md, "Schema", with the version that added it; ``ledger/pg.py`` keeps the same
versions for PostgreSQL (tests/ledger/test_migrations_agree.py holds the two to the same tables and columns).

``MIGRATIONS`` is append-only: a released migration is never edited, a change is a new version. The
database's version is ``MAX(schema_version.version)``; ``open_db`` applies the missing ones in order,
in one ``BEGIN IMMEDIATE`` transaction, so two processes opening a fresh file cannot both apply them.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step: the statements that take the database from ``version - 1`` to ``version``."""

    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "requests: the gateway's usage ledger",
        (
            """
            CREATE TABLE requests (
                id               INTEGER PRIMARY KEY,
                ts               REAL    NOT NULL,
                request_id       TEXT    NOT NULL,
                key_id           TEXT,
                alias            TEXT    NOT NULL,
                provider         TEXT,
                upstream_model   TEXT,
                endpoint         TEXT    NOT NULL,
                stream           INTEGER NOT NULL,
                traffic_class    TEXT,
                status           INTEGER NOT NULL,
                outcome          TEXT    NOT NULL,
                attempts         INTEGER NOT NULL,
                prompt_tokens    INTEGER,
                output_tokens    INTEGER,
                tokens_estimated INTEGER NOT NULL,
                ttft_ms          REAL,
                e2e_ms           REAL,
                overhead_ms      REAL,
                cost             REAL
            )
            """,
            "CREATE INDEX requests_ts ON requests (ts)",
            "CREATE INDEX requests_provider_ts ON requests (provider, ts)",
        ),
    ),
    Migration(
        2,
        "samples: the monitor's probes; traffic_minutes: the gateway's per-minute aggregates",
        (
            """
            CREATE TABLE samples (
                id            INTEGER PRIMARY KEY,
                ts            REAL    NOT NULL,
                provider      TEXT    NOT NULL,
                model         TEXT    NOT NULL,
                workload      TEXT    NOT NULL,
                status        INTEGER,
                error_class   TEXT,
                ttft_ms       REAL,
                e2e_ms        REAL,
                output_tokens INTEGER,
                tok_s         REAL,
                accuracy_ok   INTEGER
            )
            """,
            "CREATE INDEX samples_ts ON samples (ts)",
            "CREATE INDEX samples_pm_ts ON samples (provider, model, ts)",
            """
            CREATE TABLE traffic_minutes (
                minute        REAL    NOT NULL,
                provider      TEXT    NOT NULL,
                model         TEXT    NOT NULL,
                requests      INTEGER NOT NULL,
                errors        INTEGER NOT NULL,
                output_tokens INTEGER NOT NULL,
                tok_s_sum     REAL    NOT NULL,
                tok_s_n       INTEGER NOT NULL,
                ttft_hist     TEXT,
                e2e_hist      TEXT
            )
            """,
            "CREATE INDEX traffic_minutes_pm ON traffic_minutes (provider, model, minute)",
        ),
    ),
    Migration(
        3,
        "keys and spend: runtime keys, hourly usage roll-ups, the spool's shipping state",
        (
            """
            CREATE TABLE keys (
                id               TEXT PRIMARY KEY,
                key_sha256       TEXT    NOT NULL UNIQUE,
                created_at       REAL    NOT NULL,
                updated_at       REAL    NOT NULL,
                revoked_at       REAL,
                expires_at       REAL,
                rpm              REAL,
                tpm              REAL,
                max_concurrency  INTEGER,
                tokens_per_day   INTEGER,
                tokens_per_month INTEGER,
                cost_per_day     REAL,
                cost_per_month   REAL,
                models           TEXT,
                traffic_class    TEXT,
                metadata         TEXT    NOT NULL DEFAULT '{}'
            )
            """,
            "CREATE TABLE keys_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)",
            "INSERT INTO keys_version (id, version) VALUES (1, 0)",
            """
            CREATE TABLE usage_hourly (
                hour          REAL    NOT NULL,
                key_id        TEXT    NOT NULL,
                alias         TEXT    NOT NULL,
                provider      TEXT    NOT NULL,
                requests      INTEGER NOT NULL,
                errors        INTEGER NOT NULL,
                input_tokens  INTEGER NOT NULL,
                output_tokens INTEGER NOT NULL,
                cost          REAL    NOT NULL,
                PRIMARY KEY (hour, key_id, alias, provider)
            )
            """,
            "CREATE TABLE rollup_state (name TEXT PRIMARY KEY, upto INTEGER NOT NULL)",
            "INSERT INTO rollup_state (name, upto) VALUES ('requests', 0)",
            "CREATE TABLE spool_state (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "INSERT INTO spool_state (name, value) VALUES ('origin', lower(hex(randomblob(16))))",
            "CREATE INDEX requests_key_ts ON requests (key_id, ts)",
            """
            CREATE TABLE traffic_hours (
                hour          REAL    NOT NULL,
                provider      TEXT    NOT NULL,
                model         TEXT    NOT NULL,
                requests      INTEGER NOT NULL,
                errors        INTEGER NOT NULL,
                output_tokens INTEGER NOT NULL,
                tok_s_sum     REAL    NOT NULL,
                tok_s_n       INTEGER NOT NULL,
                ttft_hist     TEXT,
                e2e_hist      TEXT,
                PRIMARY KEY (hour, provider, model)
            )
            """,
            "INSERT INTO rollup_state (name, upto) VALUES ('traffic', 0)",
        ),
    ),
    Migration(
        4,
        "load_tests: the monitor's scheduled peak-hour load tests (docs/monitor.md)",
        (
            """
            CREATE TABLE load_tests (
                id              INTEGER PRIMARY KEY,
                ts              REAL    NOT NULL,
                provider        TEXT    NOT NULL,
                model           TEXT    NOT NULL,
                profile         TEXT    NOT NULL,
                requests        INTEGER NOT NULL,
                errors          INTEGER NOT NULL,
                ttft_p90_ms     REAL,
                ttft_p99_ms     REAL,
                e2e_p90_ms      REAL,
                e2e_p99_ms      REAL,
                decay_p99_e2e   REAL,
                capacity        REAL,
                capacity_by     TEXT,
                detail          TEXT
            )
            """,
            "CREATE INDEX load_tests_pm_ts ON load_tests (provider, model, ts)",
        ),
    ),
    Migration(
        5,
        "requests and samples: time to first answer token and reasoning tokens (thinking models)",
        (
            "ALTER TABLE requests ADD COLUMN ttft_answer_ms REAL",
            "ALTER TABLE requests ADD COLUMN reasoning_tokens INTEGER",
            "ALTER TABLE samples ADD COLUMN ttft_answer_ms REAL",
            "ALTER TABLE samples ADD COLUMN reasoning_tokens INTEGER",
        ),
    ),
    Migration(
        6,
        "requests and usage_hourly: prompt tokens the provider served from its prompt cache",
        (
            "ALTER TABLE requests ADD COLUMN cached_tokens INTEGER",
            "ALTER TABLE usage_hourly ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE usage_hourly ADD COLUMN reported_prompt_tokens INTEGER NOT NULL DEFAULT 0",
        ),
    ),
    Migration(
        7,
        "requests: the client's API (openai | anthropic)",
        ("ALTER TABLE requests ADD COLUMN api TEXT NOT NULL DEFAULT 'openai'",),
    ),
    Migration(
        8,
        "samples: the protocol the monitor probed with (openai | anthropic)",
        ("ALTER TABLE samples ADD COLUMN api TEXT NOT NULL DEFAULT 'openai'",),
    ),
    Migration(
        9,
        "the batch lane: files, batches, batch_lines; requests.lane and price_tier; usage_hourly by lane",
        (
            """
            CREATE TABLE files (
                id          TEXT    PRIMARY KEY,
                key_id      TEXT,
                purpose     TEXT    NOT NULL,
                filename    TEXT    NOT NULL,
                bytes       INTEGER NOT NULL,
                created_at  REAL    NOT NULL,
                expires_at  REAL,
                content     BLOB    NOT NULL
            )
            """,
            "CREATE INDEX files_key_created ON files (key_id, created_at)",
            """
            CREATE TABLE batches (
                id                TEXT    PRIMARY KEY,
                key_id            TEXT,
                endpoint          TEXT    NOT NULL,
                input_file_id     TEXT    NOT NULL,
                completion_window TEXT    NOT NULL,
                status            TEXT    NOT NULL,
                created_at        REAL    NOT NULL,
                expires_at        REAL,
                in_progress_at    REAL,
                finalizing_at     REAL,
                completed_at      REAL,
                failed_at         REAL,
                expired_at        REAL,
                cancelling_at     REAL,
                cancelled_at      REAL,
                total             INTEGER NOT NULL DEFAULT 0,
                completed         INTEGER NOT NULL DEFAULT 0,
                failed            INTEGER NOT NULL DEFAULT 0,
                output_file_id    TEXT,
                error_file_id     TEXT,
                errors            TEXT,
                metadata          TEXT    NOT NULL DEFAULT '{}',
                cost              REAL    NOT NULL DEFAULT 0
            )
            """,
            "CREATE INDEX batches_key_created ON batches (key_id, created_at)",
            "CREATE INDEX batches_status ON batches (status)",
            """
            CREATE TABLE batch_lines (
                batch_id        TEXT    NOT NULL,
                line            INTEGER NOT NULL,
                custom_id       TEXT    NOT NULL,
                method          TEXT    NOT NULL,
                url             TEXT    NOT NULL,
                body            TEXT    NOT NULL,
                state           TEXT    NOT NULL DEFAULT 'pending',
                lease_owner     TEXT,
                lease_expires   REAL,
                attempts        INTEGER NOT NULL DEFAULT 0,
                response_status INTEGER,
                result          TEXT,
                error           TEXT,
                request_id      TEXT,
                lane            TEXT,
                provider        TEXT,
                price_tier      TEXT,
                cost            REAL,
                done_at         REAL,
                done_by         TEXT,
                PRIMARY KEY (batch_id, line),
                UNIQUE (batch_id, custom_id)
            )
            """,
            "CREATE INDEX batch_lines_state ON batch_lines (batch_id, state, line)",
            "ALTER TABLE requests ADD COLUMN lane TEXT NOT NULL DEFAULT 'interactive'",
            "ALTER TABLE requests ADD COLUMN price_tier TEXT",
            """
            CREATE TABLE usage_hourly_v9 (
                hour                   REAL    NOT NULL,
                key_id                 TEXT    NOT NULL,
                alias                  TEXT    NOT NULL,
                provider               TEXT    NOT NULL,
                lane                   TEXT    NOT NULL DEFAULT 'interactive',
                requests               INTEGER NOT NULL,
                errors                 INTEGER NOT NULL,
                input_tokens           INTEGER NOT NULL,
                output_tokens          INTEGER NOT NULL,
                cost                   REAL    NOT NULL,
                cached_tokens          INTEGER NOT NULL DEFAULT 0,
                reported_prompt_tokens INTEGER NOT NULL DEFAULT 0,
                PRIMARY KEY (hour, key_id, alias, provider, lane)
            )
            """,
            "INSERT INTO usage_hourly_v9 (hour, key_id, alias, provider, lane, requests, errors, input_tokens, "
            "output_tokens, cost, cached_tokens, reported_prompt_tokens) SELECT hour, key_id, alias, provider, "
            "'interactive', requests, errors, input_tokens, output_tokens, cost, cached_tokens, reported_prompt_tokens "
            "FROM usage_hourly",
            "DROP TABLE usage_hourly",
            "ALTER TABLE usage_hourly_v9 RENAME TO usage_hourly",
        ),
    ),
    Migration(
        10,
        "quality_counts: answer-quality signals per hour x provider x model x signal (checked, hits)",
        (
            """
            CREATE TABLE quality_counts (
                hour      REAL    NOT NULL,
                provider  TEXT    NOT NULL,
                model     TEXT    NOT NULL,
                signal    TEXT    NOT NULL,
                checked   INTEGER NOT NULL,
                hits      INTEGER NOT NULL,
                PRIMARY KEY (hour, provider, model, signal)
            )
            """,
        ),
    ),
    Migration(
        11,
        "batch_lines: the provider batch job a line was sent in (job_provider, job_file, job_id)",
        (
            "ALTER TABLE batch_lines ADD COLUMN job_provider TEXT",
            "ALTER TABLE batch_lines ADD COLUMN job_file TEXT",
            "ALTER TABLE batch_lines ADD COLUMN job_id TEXT",
        ),
    ),
    # Retention (DELETE ... WHERE ts < ?) needs no migration.
)

SCHEMA_VERSION: int = MIGRATIONS[-1].version
"""The version this tailgate writes; a database with a higher one was written by a newer tailgate."""


class SchemaError(RuntimeError):
    """The database was written by a newer tailgate (or is not a tailgate database)."""


def newer_schema_message(current: int, where: str = "database") -> str:
    return (
        f"{where} schema version {current} is newer than this tailgate's {SCHEMA_VERSION}: it was written by a "
        "newer tailgate. Upgrade this replica (a replica never writes to a schema it does not know)."
    )


def schema_version(conn: sqlite3.Connection) -> int:
    """The version of the database behind ``conn``; 0 for an empty (or pre-ledger) file."""
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
    if exists is None:
        return 0
    (version,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
    return int(version)


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the database up to ``SCHEMA_VERSION``; return the version it started at.

    ``conn`` must be in autocommit mode (``isolation_level=None``), as ``open_db`` makes it. A current
    database costs two reads and takes no write lock.
    """
    current = schema_version(conn)
    if current > SCHEMA_VERSION:
        raise SchemaError(newer_schema_message(current))
    if current == SCHEMA_VERSION:
        return current
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            "version INTEGER PRIMARY KEY, applied_at REAL NOT NULL, description TEXT NOT NULL)"
        )
        # Re-read under the write lock: another process may have migrated since the first look.
        started = current = schema_version(conn)
        for step in MIGRATIONS:
            if step.version <= current:
                continue
            for statement in step.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, applied_at, description) VALUES (?, ?, ?)",
                (step.version, time.time(), step.description),
            )
            current = step.version
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return started


def open_db(path: str | Path, *, busy_timeout: float = 5.0) -> sqlite3.Connection:
    """Open (creating it and its parent folders if needed) and migrate the tailgate database.

    The connection is in autocommit mode (``isolation_level=None``: write ``BEGIN``/``COMMIT`` yourself),
    with ``journal_mode=WAL`` (readers never block the writer, nor it them) and ``synchronous=NORMAL``
    (a commit survives a killed process; only an OS crash or power loss can roll back the last ones).
    ``busy_timeout`` is how long a statement waits for another connection's lock, in seconds.
    """
    target = str(path)
    if target != ":memory:":
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(target, timeout=busy_timeout, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn
