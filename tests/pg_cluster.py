"""A real PostgreSQL server for tests: ``initdb`` in a temporary folder, started on a free loopback port.

Debian's ``postgresql`` package provides the binaries (``.ci/run`` installs it). ``initdb`` refuses to run
as root, so when the tests run as root the server runs as the unprivileged ``postgres`` user (via
``runuser``); the cluster's folder, socket folder included, is created for that user and removed after.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PostgresCluster", "find_bin", "postgres_available"]


def find_bin(name: str) -> str | None:
    """A PostgreSQL binary: Debian keeps them in /usr/lib/postgresql/<major>/bin, not on PATH."""
    base = Path("/usr/lib/postgresql")
    if base.is_dir():
        for major in sorted(base.iterdir(), key=lambda p: p.name, reverse=True):
            candidate = major / "bin" / name
            if candidate.exists():
                return str(candidate)
    return shutil.which(name)


def postgres_available() -> bool:
    return find_bin("initdb") is not None and find_bin("pg_ctl") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    """One throw-away cluster. ``start()``, ``url``, ``stop()`` / ``restart()`` (outage drills), ``remove()``."""

    def __init__(self, superuser: str = "tailgate") -> None:
        self.superuser = superuser
        """The cluster's superuser (``initdb -U``); ``postgres`` where a test creates the role ``tailgate``."""
        self.root = Path(tempfile.mkdtemp(prefix="tailgate-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            if runuser is None:
                raise RuntimeError("running as root and no runuser to start PostgreSQL as 'postgres'")
            self._as_user = [runuser, "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres", "postgres")
        self.root.chmod(0o700)
        initdb = find_bin("initdb")
        if initdb is None:
            raise RuntimeError("initdb not found (install Debian's postgresql package)")
        subprocess.run(
            [*self._as_user, initdb, "-D", str(self.data), "-U", superuser, "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.url = f"postgresql://{superuser}@127.0.0.1:{self.port}/postgres"

    def _pg_ctl(self, *args: str, timeout: float = 60) -> None:
        pg_ctl = find_bin("pg_ctl")
        assert pg_ctl is not None
        subprocess.run(
            [*self._as_user, pg_ctl, "-D", str(self.data), *args], check=True, capture_output=True, timeout=timeout
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} "
            "-c fsync=off -c full_page_writes=off -c max_connections=200"
        )
        self._pg_ctl("-o", options, "-l", str(self.root / "log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-m", mode, "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def fresh_database(self, name: str) -> str:
        """Create an empty database and return its URL (each test gets its own)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://tailgate@127.0.0.1:{self.port}/{name}"

    def wait_ready(self, timeout: float = 30.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@contextlib.contextmanager
def running_cluster() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()
