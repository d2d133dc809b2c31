"""Claim (issue 12): three replicas writing to one PostgreSQL lose nothing and write nothing twice through a
PostgreSQL outage, with no failed client request; a SIGKILLed replica loses at most ~1 s of rows.

Phase 1: three real ``tailgate serve`` replicas (each with its own SQLite spool, ``ledger.url`` one throw-away
PostgreSQL cluster) in front of one ``instant`` simulator; a paced load (4 workers) runs for ``--before``
seconds, PostgreSQL is stopped for ``--outage`` seconds (20) under load, started again, the load runs
``--after`` more seconds. Reports N requests, failed requests, rows in PostgreSQL once drained (must be N,
all distinct), how long the backlog took to drain after PostgreSQL came back.

Phase 2 (``--kills`` times): one replica under load is SIGKILLed; its spool is shipped afterwards (what a
restarted replica does). Reports rows answered but lost and the answer rate in the last second before the
kill, i.e. the loss window in seconds (target <= 1 s; the ledger flushes every 0.5 s).

Usage: ``.venv/bin/python benchmarks/bench_fleet_store.py [--outage 20] [--kills 3] [--json F]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_sim import server, sim_argv  # noqa: E402
from fleet_store import Replica, fleet_config, pg_request_ids, run_load  # noqa: E402
from pg_cluster import PostgresCluster  # noqa: E402
from tailgate.ledger.spool import Shipper  # noqa: E402


async def outage_phase(args: argparse.Namespace, tmp: Path, pg: PostgresCluster, sim_url: str) -> dict[str, Any]:
    pg_url = pg.fresh_database("fleet_outage")
    replicas = [Replica(fleet_config(tmp, i, sim_url, pg_url), tmp / f"replica{i}.log") for i in range(3)]
    await asyncio.gather(*(r.ready() for r in replicas))
    try:
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_load([r.url for r in replicas], 10**8, concurrency=4, stop=stop, pace_s=args.pace)
        )
        await asyncio.sleep(args.before)
        await asyncio.to_thread(pg.stop)
        down = time.monotonic()
        await asyncio.sleep(args.outage)
        await asyncio.to_thread(pg.start)
        up = time.monotonic()
        await asyncio.sleep(args.after)
        stop.set()
        load = await task
        n = len(load.results)
        t0 = time.monotonic()
        rows, ids = 0, set[str]()
        while time.monotonic() - t0 < 120:
            rows, ids = await asyncio.to_thread(pg_request_ids, pg_url)
            if rows >= n:
                break
            await asyncio.sleep(0.1)
        drained_after_s = time.monotonic() - up
    finally:
        for r in replicas:
            r.stop()
    during = sum(1 for t in load.answered_at.values() if down < t < up)
    return {
        "requests": n,
        "failed": load.failed(),
        "served_during_outage": during,
        "outage_s": args.outage,
        "rows_in_postgres": rows,
        "distinct_request_ids": len(ids),
        "exact": rows == n and ids == load.ok_ids(),
        "backlog_drained_s_after_postgres_returned": round(drained_after_s, 2),
    }


async def kill_phase(
    args: argparse.Namespace, tmp: Path, pg: PostgresCluster, sim_url: str, index: int
) -> dict[str, Any]:
    pg_url = pg.fresh_database(f"fleet_kill{index}")
    victim = Replica(fleet_config(tmp, 10 + index, sim_url, pg_url), tmp / f"victim{index}.log")
    await victim.ready()
    stop = asyncio.Event()
    task = asyncio.create_task(run_load([victim.url], 10**8, concurrency=8, stop=stop, prefix=f"k{index}"))
    await asyncio.sleep(args.kill_after)
    victim.stop(signal.SIGKILL)
    killed = time.monotonic()
    stop.set()
    load = await task
    shipper = Shipper(tmp / f"spool{10 + index}.db", pg_url)
    await shipper.start()
    await shipper.ship_now()
    await shipper.close()
    _, stored = await asyncio.to_thread(pg_request_ids, pg_url)
    answered = load.ok_ids()
    lost = answered - stored
    last_second = sum(1 for rid in answered if load.answered_at[rid] > killed - 1.0)
    return {
        "answered": len(answered),
        "stored": len(stored & answered),
        "lost": len(lost),
        "answered_in_last_second": last_second,
        "loss_window_s": round(len(lost) / last_second, 3) if last_second else None,
        "oldest_lost_s_before_kill": round(killed - min((load.answered_at[r] for r in lost), default=killed), 3),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench_fleet_store-") as tmpdir:
        tmp = Path(tmpdir)
        pg = PostgresCluster()
        try:
            pg.start()
            with server("sim", sim_argv("--preset", "instant", "--port", "0"), tmp / "sim.log", pin=False) as sim:
                sim_url = sim.url + "/v1"
                result["outage"] = await outage_phase(args, tmp, pg, sim_url)
                print(json.dumps(result["outage"]), flush=True)
                result["kills"] = []
                for i in range(args.kills):
                    k = await kill_phase(args, tmp, pg, sim_url, i)
                    result["kills"].append(k)
                    print(json.dumps(k), flush=True)
        finally:
            pg.remove()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, default=20.0)
    parser.add_argument("--before", type=float, default=3.0)
    parser.add_argument("--after", type=float, default=3.0)
    parser.add_argument("--pace", type=float, default=0.01, help="seconds each of 4 workers waits between requests")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--kill-after", type=float, default=3.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    ok = result["outage"]["exact"] and result["outage"]["failed"] == 0
    ok = ok and all(k["loss_window_s"] is None or k["loss_window_s"] <= 1.0 for k in result["kills"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
