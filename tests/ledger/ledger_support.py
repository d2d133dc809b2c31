"""Helpers shared by the ledger tests (imported by basename, like tests/upstream/upstream_support.py)."""

from __future__ import annotations

from typing import Any

import msgspec

from tailgate.ledger import LedgerRow
from tailgate.ledger.row import COLUMNS
from tailgate.ledger.store import StoreConn

BASE_TS = 1_750_000_000.0


def make_row(i: int = 0, **changes: Any) -> LedgerRow:
    """A fully populated row whose ``request_id`` and ``ts`` follow ``i``; ``changes`` override fields."""
    row = LedgerRow(
        ts=BASE_TS + i * 0.001,
        request_id=f"req-{i:08d}",
        key_id="key-team-a",
        alias="deepseek-v3.2",
        provider="lanyun",
        upstream_model="/maas/deepseek-ai/DeepSeek-V3.2",
        endpoint="chat",
        stream=True,
        traffic_class="interactive",
        status=200,
        outcome="ok",
        attempts=1,
        prompt_tokens=123,
        output_tokens=456,
        tokens_estimated=False,
        ttft_ms=312.25,
        e2e_ms=2048.5,
        overhead_ms=0.375,
        cost=0.00123,
    )
    return msgspec.structs.replace(row, **changes) if changes else row


_INSERT = f"INSERT INTO requests ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"  # noqa: S608


def insert_rows(store: StoreConn, rows: list[LedgerRow]) -> None:
    params = [tuple(int(v) if isinstance(v, bool) else v for v in msgspec.structs.astuple(r)) for r in rows]
    with store.transaction():
        store.executemany(_INSERT, params)
