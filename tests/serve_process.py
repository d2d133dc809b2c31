"""``tailgate serve`` as a real subprocess, for tests that need the gateway's own process (its own interpreter,
event loop, signals and background tasks): started, waited for until it logs that it listens, its stderr (and
stdout) read to the end by threads so a chatty gateway never blocks on a full pipe. The one copy of "start
`tailgate serve` and wait"."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

LISTENING = re.compile(r"gateway listening on (http://\S+)")


class ServeProcess:
    """``tailgate [-v] serve --config CONFIG [--port PORT] ARGS…``, started and read until ``listeners`` processes
    (``--workers N``: N) said they listen; ``url`` is the first one's ``…/v1``. ``log`` keeps every stderr line,
    ``out`` every stdout line. ``port=None`` leaves the port to the config; ``ServeError`` if it exits first."""

    def __init__(
        self,
        config: Path,
        *args: str,
        port: int | None = 0,
        verbose: bool = False,
        env: Mapping[str, str] | None = None,
        preexec_fn: Callable[[], None] | None = None,
        listeners: int = 1,
    ) -> None:
        argv = [sys.executable, "-m", "tailgate", *(["-v"] if verbose else []), "serve", "--config", str(config)]
        argv += [*(["--port", str(port)] if port is not None else []), *args]
        self.proc = subprocess.Popen(
            argv,
            stderr=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=None if env is None else dict(env),
            preexec_fn=preexec_fn,
        )
        self.log: list[str] = []
        self.out: list[str] = []
        self.url = ""
        assert self.proc.stderr is not None
        assert self.proc.stdout is not None
        self._out = threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True)
        self._out.start()
        heard = 0
        for line in self.proc.stderr:
            self.log.append(line)
            if match := LISTENING.search(line):
                self.url = self.url or match.group(1)
                heard += 1
                if heard == listeners:
                    break
        else:
            self.proc.wait(timeout=30)
            self._out.join(timeout=10)
            raise ServeError(self.proc.returncode, "".join(self.log))
        self._err = threading.Thread(target=self._read, args=(self.proc.stderr, self.log), daemon=True)
        self._err.start()

    @staticmethod
    def _read(stream: IO[str], into: list[str]) -> None:
        for line in stream:
            into.append(line)

    @property
    def root_url(self) -> str:
        return self.url.removesuffix("/v1")

    @property
    def port(self) -> int:
        return int(self.root_url.rsplit(":", 1)[1])

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        """Signal it (unless it already exited), wait for its exit and the rest of its output; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=5)
        for reader in (self._err, self._out):
            reader.join(timeout=10)
        for stream in (self.proc.stderr, self.proc.stdout):
            if stream is not None:
                stream.close()
        return code

    def text(self) -> str:
        """Everything it wrote to stderr so far."""
        return "".join(self.log)


class ServeError(RuntimeError):
    """``tailgate serve`` exited before it listened: its exit code and its stderr."""

    def __init__(self, code: int, log: str) -> None:
        super().__init__(f"tailgate serve did not start (exit {code}):\n{log}")
        self.code = code
        self.log = log


@contextlib.contextmanager
def running_serve(config: Path, *args: str, **kwargs: Any) -> Iterator[ServeProcess]:
    """A ``tailgate serve`` for the block; stopped (SIGTERM, then its exit awaited) however the block ends."""
    sp = ServeProcess(config, *args, **kwargs)
    try:
        yield sp
    finally:
        sp.stop()
