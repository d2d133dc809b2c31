"""Claim (issue 41): a fleet runs one batch together and loses nothing — three replicas on Redis + PostgreSQL, one
SIGKILLed mid-batch and one restarted: every line answered exactly once, the ledger matching the simulator's truth
by request id, no line billed twice.

The scenario of tests/fleet/test_fleet_batch.py (``tests/fleet_batch.py``: ``run_kill_and_restart``) at a larger
size: three real ``tailgate serve`` replicas on a throw-away PostgreSQL cluster and redis-server, an ``instant``
simulator in this process (``--step-ms`` per decode step), a ``--lines``-line batch submitted with the official
``openai`` SDK; replica A is SIGKILLed holding leases at a quarter of the lines, replica B stopped (SIGTERM) and
started again at half. Reports the batch's time, lines per second, who settled how many, the leases A died
holding, the lines the provider answered twice (cut attempts) and every check, and exits 1 if a check fails.

Usage: ``.venv/bin/python benchmarks/bench_fleet_batch.py [--lines 3000] [--concurrency 8] [--step-ms 5]
[--lease 3] [--json F]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from fleet_batch import owner_pid, run_kill_and_restart  # noqa: E402
from pg_cluster import PostgresCluster  # noqa: E402
from tailgate.sim.presets import preset  # noqa: E402
from tailgate.sim.provider import SimProvider  # noqa: E402
from tailgate.sim.spec import ProviderSpec  # noqa: E402
from tailgate.state.server import RedisServer  # noqa: E402

LINE_ID = re.compile(r"^(batch_req_[0-9a-f]{20})-\d+$")


def checks(run: Any, lines: int) -> dict[str, bool]:
    billed = run.billed
    billed_ids = {r[0] for r in billed}
    per_line = Counter(m.group(1) for rid in billed_ids if (m := LINE_ID.match(rid)))
    extra = [rid for rid in run.truth_by_id if rid.startswith("batch_req_") and rid not in billed_ids]
    return {
        "completed": run.status == "completed" and run.completed == lines,
        "every custom_id once in the files": run.answered == Counter(f"line-{i:05d}" for i in range(lines)),
        "A died holding leases, each run again by another replica": bool(run.held_by_a)
        and all(owner_pid(o) != run.pids["a"] and n >= 2 for o, n in run.retaken),
        "B gave its lines back as it stopped": run.b_held_after_stop == 0,
        "one ledger row per line": len(billed) == lines and len({r[1] for r in billed}) == lines,
        "no line billed twice": len(per_line) == lines and max(per_line.values(), default=0) == 1,
        "every row matches the truth by request id": all(
            (rec := run.truth_by_id.get(r[0])) is not None
            and (rec["status"], rec["prompt_tokens"], rec["output_tokens"]) == (r[2], r[3], r[4])
            for r in billed
        ),
        "each extra provider call is another attempt of a billed line": all(
            (m := LINE_ID.match(rid)) is not None and per_line[m.group(1)] == 1 for rid in extra
        ),
        "cut attempts bill nothing": all(cost is None or cost == 0 for _, cost in run.other),
        "the simulator saw no request id twice": run.truth_ids_seen_twice == 0,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    spec = ProviderSpec(
        name="instant",
        params=replace(preset("instant"), step_ms=args.step_ms),
        preset="instant",
        models=("m",),
        truth_size=args.lines * 3 + 1000,
    )
    provider = SimProvider(spec)
    await provider.start()
    pg = PostgresCluster()
    try:
        await asyncio.to_thread(pg.start)
        with RedisServer() as redis, tempfile.TemporaryDirectory(prefix="bench_fleet_batch-") as tmpdir:
            run = await run_kill_and_restart(
                Path(tmpdir),
                provider.url,
                pg.fresh_database("fleet_batch"),
                redis.url,
                lines=args.lines,
                concurrency=args.concurrency,
                lease_s=args.lease,
                within_s=args.within,
            )
    finally:
        await provider.stop()
        await asyncio.to_thread(pg.remove)
    verdict = checks(run, args.lines)
    billed_ids = {r[0] for r in run.billed}
    role = {pid: name for name, pid in run.pids.items()}
    return {
        "lines": args.lines,
        "concurrency_per_replica": args.concurrency,
        "lease_s": args.lease,
        "step_ms": args.step_ms,
        "status": run.status,
        "elapsed_s": round(run.elapsed_s, 2),
        "lines_per_s": round(args.lines / run.elapsed_s, 1) if run.elapsed_s else None,
        "settled_by": {role.get(owner_pid(o), o): n for o, n in sorted(run.owners.items())},
        "leases_held_by_a_at_kill": len(run.held_by_a),
        "provider_calls_not_billed": sum(1 for rid in run.truth_by_id if rid.startswith("batch_req_"))
        - len(billed_ids & set(run.truth_by_id)),
        "unbilled_attempt_rows": len(run.other),
        "ledger_rows": len(run.billed),
        "checks": verdict,
        "ok": all(verdict.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8, help="batch.concurrency of each replica")
    parser.add_argument("--step-ms", type=float, default=5.0, help="the simulator's decode step (8 tokens a line)")
    parser.add_argument("--lease", type=float, default=3.0, help="batch.lease: how soon a dead replica's lines return")
    parser.add_argument("--within", type=float, default=300.0, help="give up after this many seconds per phase")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
