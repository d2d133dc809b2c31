"""Start a throw-away ``redis-server`` (or ``valkey-server``) for the demo, scenarios, tests and benchmarks.

A free loopback port, its own temporary directory, no persistence, stopped with the object. Production
fleets run their own Redis (deploy/compose.yaml); this is for running a fleet on one machine.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["RedisServer", "find_redis_server"]


def find_redis_server() -> str | None:
    """Path of ``redis-server`` (or ``valkey-server``) on PATH or in /usr/bin, or None."""
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """``with RedisServer() as r: r.url`` — a private redis-server on 127.0.0.1 and a free port."""

    def __init__(self, executable: str | None = None, *, port: int | None = None) -> None:
        exe = executable or find_redis_server()
        if exe is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
        self.executable = exe
        self.port = port or _free_port()
        self._dir = tempfile.TemporaryDirectory(prefix="tailgate-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        args = [
            self.executable,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            self._dir.name,
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ]
        # The executable is redis-server found on PATH (or given by the caller); the arguments are ours.
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode} (port {self.port})")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout_s:g}s")

    def stop(self) -> None:
        """Stop the server (SIGKILL after 5 s); the port stays ours to ``start()`` again."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
