"""Store fixtures: a real PostgreSQL cluster for the session (initdb in a temp folder, free port) and a
``store`` fixture that runs each contract test on SQLite and on PostgreSQL."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from pg_cluster import PostgresCluster, postgres_available
from tailgate.ledger.store import StoreConn, open_store

_names = itertools.count()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    if not postgres_available():
        pytest.skip("PostgreSQL binaries not installed (Debian package 'postgresql'; .ci/run installs it)")
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def pg_url(pg_cluster: PostgresCluster) -> str:
    """A fresh, empty database on the session's cluster."""
    return pg_cluster.fresh_database(f"t{next(_names)}")


@pytest.fixture(params=["sqlite", "postgres"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store location for each backend: a SQLite path, or a fresh PostgreSQL database URL."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    cluster: PostgresCluster = request.getfixturevalue("pg_cluster")
    return cluster.fresh_database(f"t{next(_names)}")


@pytest.fixture
def store(store_target: str) -> Iterator[StoreConn]:
    conn = open_store(store_target)
    try:
        yield conn
    finally:
        conn.close()
