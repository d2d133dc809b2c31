"""Real processes: SIGTERM loses no row; SIGKILL keeps every committed row."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tailgate.ledger import read_rows

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

# The gateway's shutdown in miniature: record rows, wait for a signal, close the ledger in the handler's wake.
# "term": rows stay pending (huge batch and interval) until SIGTERM makes it close.
# "kill": a short interval writes them on its own; the process never closes and is killed.
SCRIPT = """
import asyncio, signal, sys
from tailgate.ledger import LedgerRow, SQLiteLedger

async def main(path, n, mode):
    interval = 3600.0 if mode == "term" else 0.02
    ledger = SQLiteLedger(path, batch_size=n + 1, flush_interval=interval)
    await ledger.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    for i in range(n):
        ledger.record(LedgerRow(
            ts=1.75e9 + i, request_id=f"r{i}", key_id=None, alias="m", provider="p", upstream_model="u",
            endpoint="chat", stream=True, traffic_class=None, status=200, outcome="ok", attempts=1,
            prompt_tokens=1, output_tokens=2, tokens_estimated=False, ttft_ms=1.0, e2e_ms=2.0,
            overhead_ms=0.1, cost=None,
        ))
    if mode == "kill":
        while ledger.written < n:
            await asyncio.sleep(0.01)
    print("ready", ledger.written, ledger.pending, flush=True)
    await stop.wait()
    await ledger.close()
    print("closed", ledger.written, ledger.pending, ledger.dropped, flush=True)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
"""


def _start(db: Path, n: int, mode: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(db), str(n), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def test_sigterm_closes_the_ledger_and_loses_no_row(tmp_path: Path) -> None:
    """N rows pending in memory at SIGTERM are all in the database after the process exits."""
    n = 5000
    db = tmp_path / "t.db"
    proc, ready = _start(db, n, "term")
    try:
        assert ready == f"ready 0 {n}", proc.stderr.read() if proc.stderr else ""
        assert read_rows(db) == []  # nothing written yet: close() has all the work to do
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.strip() == f"closed {n} 0 0"
    rows = read_rows(db)
    assert len(rows) == n
    assert {r.request_id for r in rows} == {f"r{i}" for i in range(n)}


def test_sigkill_keeps_every_committed_row(tmp_path: Path) -> None:
    """Rows written by the interval flush survive SIGKILL of a process that never closed its ledger."""
    n = 2000
    db = tmp_path / "t.db"
    proc, ready = _start(db, n, "kill")
    try:
        assert ready == f"ready {n} 0", proc.stderr.read() if proc.stderr else ""
        proc.kill()
        proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    assert len(read_rows(db)) == n
