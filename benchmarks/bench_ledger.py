"""Claim: recording a ledger row costs about a list append, and batched writes sustain far more rows/s
than one commit per row, without stalling the event loop.

Prints (1) ns per ``record()`` call beside ``list.append``, (2) sustained rows/s written for several
batch sizes, with the event loop's P99 lag (a 1 ms ticker) while the writer thread works, and (3) the
same rows written one transaction each on the loop (what the ledger avoids).
Usage: ``python benchmarks/bench_ledger.py [ROWS]``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

from tailgate.ledger import LedgerRow, SQLiteLedger, open_db
from tailgate.ledger.sqlite import _INSERT, _params


def _rows(n: int) -> list[LedgerRow]:
    return [
        LedgerRow(
            ts=1.75e9 + i * 1e-3,
            request_id=f"req-{i:08d}",
            key_id="key-a",
            alias="deepseek-v3.2",
            provider="lanyun",
            upstream_model="/maas/deepseek-ai/DeepSeek-V3.2",
            endpoint="chat",
            stream=True,
            traffic_class="interactive",
            status=200,
            outcome="ok",
            attempts=1,
            prompt_tokens=100 + i % 50,
            output_tokens=300 + i % 70,
            tokens_estimated=False,
            ttft_ms=300.0 + i % 13,
            e2e_ms=2000.0 + i % 17,
            overhead_ms=0.3,
            cost=0.001,
        )
        for i in range(n)
    ]


async def _record_ns(path: Path, rows: list[LedgerRow]) -> tuple[float, float]:
    """ns per record() with the writer idle (pure hot path) and per list.append of the same rows."""
    best_append = best_record = float("inf")
    for _ in range(5):
        out: list[LedgerRow] = []
        add = out.append
        t0 = time.perf_counter_ns()
        for row in rows:
            add(row)
        best_append = min(best_append, (time.perf_counter_ns() - t0) / len(rows))

        ledger = SQLiteLedger(path, batch_size=len(rows) + 1, flush_interval=3600, max_pending=len(rows) + 1)
        await ledger.start()
        record = ledger.record
        t0 = time.perf_counter_ns()
        for row in rows:
            record(row)
        best_record = min(best_record, (time.perf_counter_ns() - t0) / len(rows))
        await ledger.close()
    return best_record, best_append


async def _sustained(path: Path | None, rows: list[LedgerRow], batch_size: int) -> tuple[float, int, float]:
    """Rows/s from first record() to all written, transactions, P99 event-loop lag in ms meanwhile.

    ``path=None`` is the baseline: the same bursts appended to a list, no writer, to show the loop's own lag.
    """
    lags: list[float] = []
    running = True

    async def ticker() -> None:
        while running:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append((time.perf_counter() - t0 - 0.001) * 1e3)

    ledger = None if path is None else SQLiteLedger(path, batch_size=batch_size, flush_interval=0.05)
    sink: list[LedgerRow] = []
    record = sink.append if ledger is None else ledger.record
    if ledger is not None:
        await ledger.start()
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    # Arrivals in bursts of 1000 with a loop turn between them, like a busy gateway.
    for start in range(0, len(rows), 1000):
        for row in rows[start : start + 1000]:
            record(row)
        await asyncio.sleep(0)
    if ledger is not None:
        await ledger.flush()
    else:
        await asyncio.sleep(1.0)  # about as long as the writer takes, so the ticker sees as many turns
    elapsed = time.perf_counter() - t0
    running = False
    await tick
    lags.sort()
    p99 = lags[int(len(lags) * 0.99)] if lags else 0.0
    if ledger is None:
        return 0.0, 0, p99
    await ledger.close()
    return len(rows) / elapsed, ledger.transactions, p99


def _one_commit_per_row(path: Path, rows: list[LedgerRow]) -> float:
    with closing(open_db(path)) as conn:
        t0 = time.perf_counter()
        for row in rows:
            conn.execute("BEGIN")
            conn.execute(_INSERT, _params(row))
            conn.execute("COMMIT")
        return len(rows) / (time.perf_counter() - t0)


async def main(n: int = 200_000) -> None:
    rows = _rows(n)
    with tempfile.TemporaryDirectory(prefix="tailgate-bench-") as tmp:
        base = Path(tmp)
        record_ns, append_ns = await _record_ns(base / "record.db", rows)
        print(f"sqlite {sqlite3.sqlite_version}, {n:,} rows, WAL, synchronous=NORMAL, {base}")
        print(f"{'hot path':<40} {'ns/call':>10} {'x append':>9}")
        print(f"{'list.append (baseline)':<40} {append_ns:>10.0f} {1.0:>9.1f}")
        print(f"{'SQLiteLedger.record':<40} {record_ns:>10.0f} {record_ns / append_ns:>9.1f}")
        print()
        print(f"{'writer':<40} {'rows/s':>10} {'txns':>9} {'P99 loop lag ms':>16}")
        _, _, idle_lag = await _sustained(None, rows, 0)
        print(f"{'no writer (list.append; loop baseline)':<40} {'-':>10} {'-':>9} {idle_lag:>16.2f}")
        results: list[float] = []
        for size in (100, 500, 2000):
            rate, txns, lag = await _sustained(base / f"sustained-{size}.db", rows, size)
            results.append(rate)
            print(f"{f'SQLiteLedger batch_size={size}':<40} {rate:>10,.0f} {txns:>9,} {lag:>16.2f}")
        few = rows[: min(n, 5000)]
        naive = _one_commit_per_row(base / "naive.db", few)
        print(f"{'one commit per row, on the loop':<40} {naive:>10,.0f} {len(few):>9,} {'(blocks)':>16}")
        print(f"batched (500) / one-per-row: {results[1] / naive:.1f}x")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000))
