"""A replica's batch loop in its own process, for the leasing tests (tests/ledger/test_batch_store.py).

``run`` leases lines of one batch and completes them, billing each with a ledger row, until none is left;
``die`` leases lines and exits without completing them (a SIGKILLed replica: its leases only expire). Each
writes what it saw to ``report`` as JSON: the custom_ids it completed, and those whose completion was refused.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from tailgate.ledger.batch_lines import complete_line, lease_lines
from tailgate.ledger.row import LedgerRow
from tailgate.ledger.store import open_store


def _row(custom_id: str, owner: str) -> LedgerRow:
    return LedgerRow(
        ts=time.time(),
        request_id=f"{owner}-{custom_id}",
        key_id="team-a",
        alias="chat",
        provider="p1",
        upstream_model="m1",
        endpoint="chat",
        stream=False,
        traffic_class="batch",
        status=200,
        outcome="ok",
        attempts=1,
        prompt_tokens=100,
        output_tokens=10,
        tokens_estimated=False,
        ttft_ms=None,
        e2e_ms=5.0,
        overhead_ms=0.1,
        cost=0.001,
        lane="batch-lane",
        price_tier="standard",
    )


def run(target: str, batch_id: str, owner: str, report: str, lease_s: float, hold_s: float) -> None:
    """Lease 1–5 lines at a time, 'work' ``hold_s`` each batch, complete them; stop when nothing is leasable
    and nothing is left to wait for (a few empty rounds in a row)."""
    done: list[str] = []
    refused: list[str] = []
    empty = 0
    with open_store(target) as conn:
        while empty < 40:
            got = lease_lines(conn, owner=owner, limit=random.randint(1, 5), lease_s=lease_s, batch_id=batch_id)
            if not got:
                empty += 1
                time.sleep(0.05)
                continue
            empty = 0
            time.sleep(hold_s)
            for line in got:
                c = complete_line(
                    conn,
                    batch_id,
                    line.custom_id,
                    by=owner,
                    ok=True,
                    response_status=200,
                    result=json.dumps({"echo": line.custom_id}),
                    row=_row(line.custom_id, owner),
                )
                (done if c.accepted else refused).append(line.custom_id)
    Path(report).write_text(json.dumps({"done": done, "refused": refused}))


def die(target: str, batch_id: str, owner: str, report: str, lease_s: float, n: int) -> None:
    """Lease ``n`` lines, report them, and exit at once without completing any (as if SIGKILLed)."""
    with open_store(target) as conn:
        got = lease_lines(conn, owner=owner, limit=n, lease_s=lease_s, batch_id=batch_id)
    Path(report).write_text(json.dumps({"leased": [x.custom_id for x in got]}))
    os._exit(0)


if __name__ == "__main__":
    mode, target, batch_id, owner, report, lease_s, extra = sys.argv[1:8]
    if mode == "run":
        run(target, batch_id, owner, report, float(lease_s), float(extra))
    else:
        die(target, batch_id, owner, report, float(lease_s), int(extra))
