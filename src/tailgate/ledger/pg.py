"""The PostgreSQL backend of the store: connection, schema and its versioned migrations.

The tables mirror the SQLite store's (``tailgate.ledger.schema``) version for version, with PostgreSQL
types (``DOUBLE PRECISION`` for SQLite's ``REAL``, ``BIGSERIAL`` ids), plus ``origin`` / ``origin_id`` on
every shipped table: the replica's spool id and the row's id there. ``UNIQUE (origin, origin_id)``
makes shipping idempotent: a batch shipped twice (a replica killed between PostgreSQL's commit and its
own cursor update) is written once. ``migrate`` runs under a transaction-level advisory lock, so replicas
starting together apply each step once; a database newer than this tailgate raises ``SchemaError``.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg.adapt import Loader

from tailgate.ledger.errors import StoreError, StoreSetUpError, redact_url
from tailgate.ledger.schema import SCHEMA_VERSION, Migration, SchemaError, newer_schema_message

__all__ = ["PG_MIGRATIONS", "connect", "migrate", "schema_version"]

_LOCK_ID = 0x7461696C67617465  # "tailgate": the advisory lock that serialises migrations

PG_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "requests: the gateway's usage ledger",
        (
            """
            CREATE TABLE requests (
                id               BIGSERIAL PRIMARY KEY,
                ts               DOUBLE PRECISION NOT NULL,
                request_id       TEXT     NOT NULL,
                key_id           TEXT,
                alias            TEXT     NOT NULL,
                provider         TEXT,
                upstream_model   TEXT,
                endpoint         TEXT     NOT NULL,
                stream           SMALLINT NOT NULL,
                traffic_class    TEXT,
                status           INTEGER  NOT NULL,
                outcome          TEXT     NOT NULL,
                attempts         INTEGER  NOT NULL,
                prompt_tokens    BIGINT,
                output_tokens    BIGINT,
                tokens_estimated SMALLINT NOT NULL,
                ttft_ms          DOUBLE PRECISION,
                e2e_ms           DOUBLE PRECISION,
                overhead_ms      DOUBLE PRECISION,
                cost             DOUBLE PRECISION,
                origin           TEXT     NOT NULL DEFAULT '',
                origin_id        BIGINT,
                UNIQUE (origin, origin_id)
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
                id            BIGSERIAL PRIMARY KEY,
                ts            DOUBLE PRECISION NOT NULL,
                provider      TEXT    NOT NULL,
                model         TEXT    NOT NULL,
                workload      TEXT    NOT NULL,
                status        INTEGER,
                error_class   TEXT,
                ttft_ms       DOUBLE PRECISION,
                e2e_ms        DOUBLE PRECISION,
                output_tokens BIGINT,
                tok_s         DOUBLE PRECISION,
                accuracy_ok   SMALLINT,
                origin        TEXT    NOT NULL DEFAULT '',
                origin_id     BIGINT,
                UNIQUE (origin, origin_id)
            )
            """,
            "CREATE INDEX samples_ts ON samples (ts)",
            "CREATE INDEX samples_pm_ts ON samples (provider, model, ts)",
            """
            CREATE TABLE traffic_minutes (
                id            BIGSERIAL PRIMARY KEY,
                minute        DOUBLE PRECISION NOT NULL,
                provider      TEXT    NOT NULL,
                model         TEXT    NOT NULL,
                requests      BIGINT  NOT NULL,
                errors        BIGINT  NOT NULL,
                output_tokens BIGINT  NOT NULL,
                tok_s_sum     DOUBLE PRECISION NOT NULL,
                tok_s_n       BIGINT  NOT NULL,
                ttft_hist     TEXT,
                e2e_hist      TEXT,
                origin        TEXT    NOT NULL DEFAULT '',
                origin_id     BIGINT,
                UNIQUE (origin, origin_id)
            )
            """,
            "CREATE INDEX traffic_minutes_pm ON traffic_minutes (provider, model, minute)",
        ),
    ),
    Migration(
        3,
        "keys and spend: runtime keys, hourly usage roll-ups",
        (
            """
            CREATE TABLE keys (
                id               TEXT PRIMARY KEY,
                key_sha256       TEXT    NOT NULL UNIQUE,
                created_at       DOUBLE PRECISION NOT NULL,
                updated_at       DOUBLE PRECISION NOT NULL,
                revoked_at       DOUBLE PRECISION,
                expires_at       DOUBLE PRECISION,
                rpm              DOUBLE PRECISION,
                tpm              DOUBLE PRECISION,
                max_concurrency  INTEGER,
                tokens_per_day   BIGINT,
                tokens_per_month BIGINT,
                cost_per_day     DOUBLE PRECISION,
                cost_per_month   DOUBLE PRECISION,
                models           TEXT,
                traffic_class    TEXT,
                metadata         TEXT    NOT NULL DEFAULT '{}'
            )
            """,
            "CREATE TABLE keys_version (id INTEGER PRIMARY KEY CHECK (id = 1), version BIGINT NOT NULL)",
            "INSERT INTO keys_version (id, version) VALUES (1, 0)",
            """
            CREATE TABLE usage_hourly (
                hour          DOUBLE PRECISION NOT NULL,
                key_id        TEXT    NOT NULL,
                alias         TEXT    NOT NULL,
                provider      TEXT    NOT NULL,
                requests      BIGINT  NOT NULL,
                errors        BIGINT  NOT NULL,
                input_tokens  BIGINT  NOT NULL,
                output_tokens BIGINT  NOT NULL,
                cost          DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (hour, key_id, alias, provider)
            )
            """,
            "CREATE TABLE rollup_state (name TEXT PRIMARY KEY, upto BIGINT NOT NULL)",
            "INSERT INTO rollup_state (name, upto) VALUES ('requests', 0)",
            "CREATE INDEX requests_key_ts ON requests (key_id, ts)",
            """
            CREATE TABLE traffic_hours (
                hour          DOUBLE PRECISION NOT NULL,
                provider      TEXT    NOT NULL,
                model         TEXT    NOT NULL,
                requests      BIGINT  NOT NULL,
                errors        BIGINT  NOT NULL,
                output_tokens BIGINT  NOT NULL,
                tok_s_sum     DOUBLE PRECISION NOT NULL,
                tok_s_n       BIGINT  NOT NULL,
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
                id              BIGSERIAL PRIMARY KEY,
                ts              DOUBLE PRECISION NOT NULL,
                provider        TEXT    NOT NULL,
                model           TEXT    NOT NULL,
                profile         TEXT    NOT NULL,
                requests        BIGINT  NOT NULL,
                errors          BIGINT  NOT NULL,
                ttft_p90_ms     DOUBLE PRECISION,
                ttft_p99_ms     DOUBLE PRECISION,
                e2e_p90_ms      DOUBLE PRECISION,
                e2e_p99_ms      DOUBLE PRECISION,
                decay_p99_e2e   DOUBLE PRECISION,
                capacity        DOUBLE PRECISION,
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
            "ALTER TABLE requests ADD COLUMN ttft_answer_ms DOUBLE PRECISION",
            "ALTER TABLE requests ADD COLUMN reasoning_tokens BIGINT",
            "ALTER TABLE samples ADD COLUMN ttft_answer_ms DOUBLE PRECISION",
            "ALTER TABLE samples ADD COLUMN reasoning_tokens BIGINT",
        ),
    ),
    Migration(
        6,
        "requests and usage_hourly: prompt tokens the provider served from its prompt cache",
        (
            "ALTER TABLE requests ADD COLUMN cached_tokens BIGINT",
            "ALTER TABLE usage_hourly ADD COLUMN cached_tokens BIGINT NOT NULL DEFAULT 0",
            "ALTER TABLE usage_hourly ADD COLUMN reported_prompt_tokens BIGINT NOT NULL DEFAULT 0",
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
                bytes       BIGINT  NOT NULL,
                created_at  DOUBLE PRECISION NOT NULL,
                expires_at  DOUBLE PRECISION,
                content     BYTEA   NOT NULL
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
                created_at        DOUBLE PRECISION NOT NULL,
                expires_at        DOUBLE PRECISION,
                in_progress_at    DOUBLE PRECISION,
                finalizing_at     DOUBLE PRECISION,
                completed_at      DOUBLE PRECISION,
                failed_at         DOUBLE PRECISION,
                expired_at        DOUBLE PRECISION,
                cancelling_at     DOUBLE PRECISION,
                cancelled_at      DOUBLE PRECISION,
                total             BIGINT  NOT NULL DEFAULT 0,
                completed         BIGINT  NOT NULL DEFAULT 0,
                failed            BIGINT  NOT NULL DEFAULT 0,
                output_file_id    TEXT,
                error_file_id     TEXT,
                errors            TEXT,
                metadata          TEXT    NOT NULL DEFAULT '{}',
                cost              DOUBLE PRECISION NOT NULL DEFAULT 0
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
                lease_expires   DOUBLE PRECISION,
                attempts        INTEGER NOT NULL DEFAULT 0,
                response_status INTEGER,
                result          TEXT,
                error           TEXT,
                request_id      TEXT,
                lane            TEXT,
                provider        TEXT,
                price_tier      TEXT,
                cost            DOUBLE PRECISION,
                done_at         DOUBLE PRECISION,
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
                hour                   DOUBLE PRECISION NOT NULL,
                key_id                 TEXT    NOT NULL,
                alias                  TEXT    NOT NULL,
                provider               TEXT    NOT NULL,
                lane                   TEXT    NOT NULL DEFAULT 'interactive',
                requests               BIGINT  NOT NULL,
                errors                 BIGINT  NOT NULL,
                input_tokens           BIGINT  NOT NULL,
                output_tokens          BIGINT  NOT NULL,
                cost                   DOUBLE PRECISION NOT NULL,
                cached_tokens          BIGINT  NOT NULL DEFAULT 0,
                reported_prompt_tokens BIGINT  NOT NULL DEFAULT 0,
                PRIMARY KEY (hour, key_id, alias, provider, lane)
            )
            """,
            "INSERT INTO usage_hourly_v9 (hour, key_id, alias, provider, lane, requests, errors, input_tokens, "
            "output_tokens, cost, cached_tokens, reported_prompt_tokens) SELECT hour, key_id, alias, provider, "
            "'interactive', requests, errors, input_tokens, output_tokens, cost, cached_tokens, reported_prompt_tokens "
            "FROM usage_hourly",
            "DROP TABLE usage_hourly",
            "ALTER TABLE usage_hourly_v9 RENAME TO usage_hourly",
            "ALTER INDEX usage_hourly_v9_pkey RENAME TO usage_hourly_pkey",
        ),
    ),
    Migration(
        10,
        "quality_counts: answer-quality signals per hour x provider x model x signal (checked, hits)",
        (
            """
            CREATE TABLE quality_counts (
                hour      DOUBLE PRECISION NOT NULL,
                provider  TEXT    NOT NULL,
                model     TEXT    NOT NULL,
                signal    TEXT    NOT NULL,
                checked   BIGINT  NOT NULL,
                hits      BIGINT  NOT NULL,
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
)
assert [m.version for m in PG_MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1)), "one PostgreSQL step per version"


class _NumericLoader(Loader):
    """``NUMERIC`` (what ``SUM(bigint)`` returns) as ``int`` when whole, else ``float``, like SQLite."""

    def load(self, data: Any) -> int | float:
        text = bytes(data).decode()
        if "." in text or "e" in text.lower() or text in ("NaN", "Infinity", "-Infinity"):
            return float(text)
        return int(text)


def schema_version(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return 0
    found = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
    return int(found[0]) if found else 0


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Bring the database up to ``SCHEMA_VERSION``; return the version it started at."""
    current = schema_version(conn)
    if current > SCHEMA_VERSION:
        raise SchemaError(newer_schema_message(current, "PostgreSQL store"))
    if current == SCHEMA_VERSION:
        return current
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            "version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL, description TEXT NOT NULL)"
        )
        started = current = schema_version(conn)  # another replica may have migrated meanwhile
        if current > SCHEMA_VERSION:
            raise SchemaError(newer_schema_message(current, "PostgreSQL store"))
        for step in PG_MIGRATIONS:
            if step.version <= current:
                continue
            for statement in step.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, applied_at, description) VALUES (%s, %s, %s)",
                (step.version, time.time(), step.description),
            )
            current = step.version
    return started


def connect(url: str, *, connect_timeout: float = 5.0, migrate_schema: bool = True) -> psycopg.Connection[Any]:
    """An autocommit, client-side-binding connection to the store at ``url``, migrated (unless told not to).

    Raises ``SchemaError`` (newer schema) or ``StoreError`` (unreachable; the password is never shown).
    """
    try:
        conn = psycopg.connect(
            url,
            autocommit=True,
            cursor_factory=psycopg.ClientCursor,
            connect_timeout=max(1, round(connect_timeout)),
            application_name="tailgate",
        )
    except psycopg.Error as exc:
        reason = _first_line(exc)
        if any(sign in reason for sign in _SET_UP_MISSING):
            raise StoreSetUpError(
                f"PostgreSQL at {redact_url(url)} refused this login: {reason}. Create the role and the database "
                'first (docs/ledger.md, "Setting up PostgreSQL")'
            ) from None
        raise StoreError(f"cannot connect to PostgreSQL at {redact_url(url)}: {reason}") from None
    conn.adapters.register_loader("numeric", _NumericLoader)
    if migrate_schema:
        try:
            migrate(conn)
        except BaseException:
            conn.close()
            raise
    return conn


_SET_UP_MISSING = ("does not exist", "authentication failed", "no password supplied", "no pg_hba.conf entry")
"""What PostgreSQL says when the role or database the URL names is missing or the login is wrong: a set-up
mistake to fix, not an outage to ride out on the spool."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
