"""``tailgate serve`` as a real subprocess on port 0, for tests that need the gateway's own process (its own
interpreter, event loop and background tasks), with its stderr read to the end so a chatty gateway never
blocks on a full pipe."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path


class ServeProcess:
    """``tailgate serve --config CONFIG --port 0``: started, its URL read from its log; ``log`` keeps every line."""

    def __init__(self, config: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tailgate", "serve", "--config", str(config), "--port", "0", *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.log: list[str] = []
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if match := re.search(r"gateway listening on (http://\S+)", line):
                self.url = match.group(1)
                break
        else:
            self.proc.wait(timeout=30)
            self.proc.stderr.close()
            raise RuntimeError("tailgate serve did not start:\n" + "".join(self.log))
        self._reader = threading.Thread(target=self._drain, name="serve-stderr", daemon=True)
        self._reader.start()

    @property
    def root_url(self) -> str:
        return self.url.removesuffix("/v1")

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=30)
        self._reader.join(timeout=10)
        if self.proc.stderr is not None and not self._reader.is_alive():
            self.proc.stderr.close()
        return code


@contextlib.contextmanager
def running_serve(config: Path, *args: str) -> Iterator[ServeProcess]:
    """A ``tailgate serve`` for the block; stopped (SIGTERM, then its exit awaited) however the block ends."""
    sp = ServeProcess(config, *args)
    try:
        yield sp
    finally:
        sp.stop()
