"""The traffic trace the gateway writes when ``trace.path`` is set, for ``tailgate bench --replay``.

One JSON line per request: ``{"t": seconds since the trace started, "alias", "class", "input_tokens",
"output_tokens", "stream", "status"}`` — arrival time and lengths only, never prompt or completion text.
Lines go through a buffered file (a syscall per ~8 KiB, not per request) and are flushed on close.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO

import msgspec


class TraceLine(msgspec.Struct, omit_defaults=True):
    t: float
    alias: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    stream: bool = False
    status: int = 200
    cls: str | None = msgspec.field(default=None, name="class")


class TraceWriter:
    """Appends trace lines; ``t`` is measured from when this writer was opened."""

    def __init__(self, path: str | Path) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] | None = target.open("ab")
        self._t0 = time.perf_counter()
        self._encode = msgspec.json.Encoder().encode

    def record(
        self,
        arrived: float,
        alias: str,
        traffic_class: str | None,
        input_tokens: int | None,
        output_tokens: int | None,
        stream: bool,
        status: int,
    ) -> None:
        """``arrived`` is the request's ``time.perf_counter()`` at arrival."""
        if self._file is None:
            return
        line = TraceLine(
            round(arrived - self._t0, 6), alias, input_tokens, output_tokens, stream, status, traffic_class
        )
        self._file.write(self._encode(line) + b"\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
