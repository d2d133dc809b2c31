"""Claim (issue 12): the PostgreSQL store costs the gateway nothing on the request path, and the usage and
7-day leaderboard reads stay under a second on a store of 10 million request rows.

Part 1, ``--part gateway``: three ``tailgate serve`` processes in front of one ``instant`` simulator,
identical but for the ledger: ``off`` (ledger disabled), ``sqlite`` (the embedded default) and ``postgres``
(``ledger.url``: the local spool shipped to a throw-away PostgreSQL cluster, initdb in a temp dir). The
same wrk command (non-stream, 50 connections) runs against each, interleaved over ``--rounds`` rounds so
drift on a shared machine hits all alike. Target: postgres req/s >= 0.95 x sqlite's (median of rounds).
Correctness: no wrk errors; PostgreSQL ends with exactly one row per response the postgres gateway gave.

Part 2, ``--part big``: a store with ``--rows`` (10,000,000) request rows over 30 days, in arrival order
(100 keys, 8 aliases, 6 providers) plus a realistic week of monitor samples and traffic minutes, on SQLite and on
PostgreSQL; rolled up once (what the gateway's maintenance does every minute) and then ``--fresh`` more
raw rows not yet rolled up. Times ``tailgate usage --by key --since 7d`` and the 7-day leaderboard
(``ledger.leaderboard.compute``) — targets < 1 s each — and checks the usage totals equal a ``GROUP BY``
over the raw rows.

``--part board``: only the 7-day leaderboard (best of 5) beside the pre-issue computation, on a week of
samples and traffic (no request rows: the leaderboard does not read them).

Usage: ``.venv/bin/python benchmarks/bench_store.py [--part gateway|big|board|all] [--rounds N] [--duration S]
[--rows N]``. Needs wrk (part 1) and Debian's postgresql (both parts).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_sim import Checks as _Checks  # noqa: E402
from bench_sim import Wrk, _chat_body, check_wrk, server, sim_argv  # noqa: E402
from pg_cluster import PostgresCluster  # noqa: E402
from tailgate.ledger.leaderboard import build, compute  # noqa: E402
from tailgate.ledger.row import COLUMNS  # noqa: E402
from tailgate.ledger.samples import Sample, TrafficMinute, read_samples, read_traffic  # noqa: E402
from tailgate.ledger.store import StoreConn, open_store  # noqa: E402
from tailgate.ledger.traffic_hours import rollup_traffic  # noqa: E402
from tailgate.ledger.usage import hour_start, rollup, usage  # noqa: E402
from tailgate.stats import LatencyHistogram  # noqa: E402

TARGET_RATIO = 0.95
TARGET_READ_S = 1.0

_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{body}'
"""

_YAML = """\
listen: {{host: 127.0.0.1, port: 0}}
providers:
  sim:
    base_url: "{upstream}/v1"
    api_keys: [sk-bench-upstream]
    price: {{input: 1.0, output: 2.0}}
models:
  bench:
    routes: [{{provider: sim, model: m}}]
ledger:
  enabled: {enabled}
  path: "{path}"
{url}
"""


def gateway_part(args: argparse.Namespace, workdir: Path, pg: PostgresCluster) -> dict[str, Any]:
    checks = _Checks()
    pg_url = pg.fresh_database("bench_gateway")
    wrk = Wrk("wrk", workdir, pin=False)
    script = wrk.script(_LUA.format(body=_chat_body(stream=False)))
    variants = {
        "off": ("false", ""),
        "sqlite": ("true", ""),
        "postgres": ("true", f"  url: {pg_url}"),
    }
    rps: dict[str, list[float]] = {name: [] for name in variants}
    answered = 0
    with server("sim", sim_argv("--preset", "instant", "--port", "0"), workdir / "sim.log", pin=False) as sim:
        hops = {}
        stack = []
        for name, (enabled, url) in variants.items():
            cfg = workdir / f"{name}.yaml"
            cfg.write_text(_YAML.format(upstream=sim.url, enabled=enabled, path=workdir / f"{name}.db", url=url))
            argv = [sys.executable, "-m", "tailgate", "serve", "--config", str(cfg), "--port", "0"]
            ctx = server(name, argv, workdir / f"{name}.log", pin=False)
            hops[name] = ctx.__enter__()
            stack.append(ctx)
        try:
            for name, hop in hops.items():  # warm-up
                res = wrk.run(hop, script, connections=50, duration_s=2, timeout_s=10)
                check_wrk(checks, f"{name} warm-up", res)
                if name == "postgres":
                    answered += res.requests
            for r in range(args.rounds):
                order = list(hops) if r % 2 == 0 else list(reversed(hops))
                for name in order:
                    res = wrk.run(hops[name], script, connections=50, duration_s=args.duration, timeout_s=10)
                    check_wrk(checks, f"round {r + 1} {name}", res)
                    rps[name].append(res.rps)
                    if name == "postgres":
                        answered += res.requests
                    print(f"round {r + 1} {name:<9} {res.rps:9.0f} req/s", flush=True)
        finally:
            for ctx in reversed(stack):
                ctx.__exit__(None, None, None)  # SIGTERM: each gateway closes its ledger, the spool ships
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT COUNT(*), COUNT(DISTINCT (origin, origin_id)) FROM requests").fetchone()
    rows, distinct = (int(row[0]), int(row[1])) if row else (0, 0)
    with open_store(workdir / "postgres.db") as spool:
        (spooled,) = spool.execute("SELECT COUNT(*) FROM requests").fetchone()
    # wrk counts the responses it read; requests in flight when a run ends are answered (and recorded) too.
    checks.add(
        "postgres holds exactly the postgres gateway's rows, each once",
        rows == distinct == spooled and answered <= rows <= answered + 50 * (args.rounds + 1),
        f"{rows} rows ({distinct} distinct), {spooled} in the spool, {answered} responses counted by wrk",
    )
    med = {name: statistics.median(v) for name, v in rps.items()}
    ratio = med["postgres"] / med["sqlite"] if med["sqlite"] else 0.0
    out = {
        "rps_median": med,
        "rps_rounds": rps,
        "postgres_vs_sqlite": ratio,
        "sqlite_vs_off": med["sqlite"] / med["off"] if med["off"] else 0.0,
        "target": {"postgres_vs_sqlite": TARGET_RATIO, "passed": ratio >= TARGET_RATIO},
        "checks": checks.items,
    }
    print(json.dumps({k: v for k, v in out.items() if k != "rps_rounds"}, indent=2))
    return out


# -- part 2: a big store --------------------------------------------------------------------------------------


def _rows(n: int, now: float, seed: int, start_id: int = 0, days: float = 30.0) -> Any:
    """``n`` request rows spread evenly over the last ``days`` days, oldest first (arrival order, as a
    gateway writes them), 100 keys × 8 aliases × 6 providers, 2 % failures."""
    rng = random.Random(seed)
    keys = [f"team-{i:03d}" for i in range(100)]
    aliases = [f"alias-{i}" for i in range(8)]
    providers = [f"prov-{i}" for i in range(6)]
    start, step = now - days * 86400, days * 86400 / n
    rand = rng.random
    for j in range(n):
        i = start_id + j
        ok = rand() > 0.02
        prompt = 50 + int(rand() * 2950)
        out = 1 + int(rand() * 800) if ok else None
        yield (
            start + j * step, f"req-{i:09d}", keys[i % 100], aliases[i % 8], providers[i % 6], "m",
            "chat", 1, "interactive", 200 if ok else 502, "ok" if ok else "http_5xx", 1, prompt, out, 0,
            300.0, 2000.0, 0.3, (prompt + 2 * (out or 0)) / 1e6 if ok else None,
        )  # fmt: skip


def _fill(conn: StoreConn, n: int, now: float, seed: int, start_id: int = 0, days: float = 30.0) -> None:
    cols = ", ".join(COLUMNS)
    if conn.dialect == "postgres":
        raw: Any = conn.raw
        with raw.cursor().copy(f"COPY requests ({cols}) FROM STDIN") as copy:
            for r in _rows(n, now, seed, start_id, days):
                copy.write_row(r)
        raw.execute("ANALYZE requests")
        return
    raw_sqlite: Any = conn.raw
    raw_sqlite.execute("PRAGMA synchronous=OFF")  # a benchmark's fill, not the ledger's durability
    marks = ", ".join("?" * len(COLUMNS))
    rows = _rows(n, now, seed, start_id, days)
    while True:
        chunk = [r for _, r in zip(range(500_000), rows, strict=False)]
        if not chunk:
            break
        with conn.transaction():
            conn.executemany(f"INSERT INTO requests ({cols}) VALUES ({marks})", chunk)  # noqa: S608
    raw_sqlite.execute("PRAGMA synchronous=NORMAL")
    raw_sqlite.execute("ANALYZE")


def _monitor_week(conn: StoreConn, now: float) -> None:
    """A week of probes (every 60 s, 6 providers, 3 workloads) and traffic minutes (6 providers, 2 workers)."""
    rng = random.Random(7)
    samples = []
    traffic = []
    hists = []
    for _ in range(6):
        h = LatencyHistogram()
        for _ in range(100):
            h.record(rng.uniform(100, 3000))
        hists.append(json.dumps(h.to_dict(), separators=(",", ":")))
    for minute in range(7 * 24 * 60):
        ts = now - minute * 60.0
        for p in range(6):
            for w in ("short", "long", "accuracy"):
                ttft = rng.uniform(100, 900)
                e2e = ttft + rng.uniform(500, 4000)
                samples.append(Sample(ts, f"prov-{p}", "m", w, 200, None, ttft, e2e, 200, 50.0, None))
            for _ in range(2):
                traffic.append(
                    TrafficMinute(ts // 60 * 60, f"prov-{p}", "m", 100, 1, 20000, 5000.0, 99, hists[p], hists[p])
                )
    from dataclasses import astuple, fields

    scols = [f.name for f in fields(Sample)]
    tcols = [f.name for f in fields(TrafficMinute)]
    with conn.transaction():
        conn.executemany(
            f"INSERT INTO samples ({', '.join(scols)}) VALUES ({', '.join('?' * len(scols))})",  # noqa: S608
            [astuple(s) for s in samples],
        )
        conn.executemany(
            f"INSERT INTO traffic_minutes ({', '.join(tcols)}) VALUES ({', '.join('?' * len(tcols))})",  # noqa: S608
            [astuple(t) for t in traffic],
        )


def _timed(fn: Any, repeat: int = 3) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def big_part(args: argparse.Namespace, workdir: Path, pg: PostgresCluster) -> dict[str, Any]:
    now = time.time()
    results: dict[str, Any] = {}
    targets = {"sqlite": str(workdir / "big.db"), "postgres": pg.fresh_database("bench_big")}
    for name, target in targets.items():
        with open_store(target) as conn:
            t0 = time.perf_counter()
            _fill(conn, args.rows, now, seed=1)
            fill_s = time.perf_counter() - t0
            _monitor_week(conn, now)
            conn.execute("ANALYZE")  # what autovacuum / the ledger's PRAGMA optimize keep up to date in service
            t0 = time.perf_counter()
            rolled = rollup(conn)
            rollup_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            rollup_traffic(conn)  # the gateway's maintenance does both every minute
            traffic_rollup_s = time.perf_counter() - t0
            _fill(conn, args.fresh, now, seed=2, start_id=args.rows, days=1 / 24)  # the last hour, not rolled up
            since = now - 7 * 86400
            usage_s, groups = _timed(lambda c=conn, s=since: usage(c, since=s, by="key"))
            board_s, board = _timed(lambda c=conn: compute(c, window_s=7 * 86400, now=now))
            # The baseline: the leaderboard as it was computed before issue 12, every sample and minute in Python.
            old_s, old = _timed(
                lambda c=conn: build(
                    read_samples(c, since=now - 7 * 86400, until=now),
                    read_traffic(c, since=now - 7 * 86400, until=now),
                    window_s=7 * 86400,
                    now=now,
                ),
                repeat=1,
            )
            (truth,) = conn.execute("SELECT COUNT(*) FROM requests WHERE ts >= ?", (hour_start(since),)).fetchall()
            (raw_s, _) = _timed(
                lambda c=conn, s=since: c.execute(
                    "SELECT key_id, COUNT(*), SUM(prompt_tokens), SUM(output_tokens), SUM(cost) FROM requests "
                    "WHERE ts >= ? GROUP BY key_id",
                    (hour_start(s),),
                ).fetchall(),
                repeat=1,
            )
        total = sum(g["requests"] for g in groups)
        results[name] = {
            "rows": args.rows + args.fresh,
            "fill_s": round(fill_s, 1),
            "first_rollup_s": round(rollup_s, 1),
            "rolled_rows": rolled,
            "first_traffic_rollup_s": round(traffic_rollup_s, 1),
            "usage_7d_s": round(usage_s, 3),
            "leaderboard_7d_s": round(board_s, 3),
            "leaderboard_7d_before_s": round(old_s, 3),
            "leaderboard_same_rows": [(r.provider, r.model, r.samples, r.traffic_requests) for r in board]
            == [(r.provider, r.model, r.samples, r.traffic_requests) for r in old],
            "raw_group_by_7d_s": round(raw_s, 3),
            "usage_matches_raw": total == int(truth[0]),
            "leaderboard_rows": len(board),
            "targets": {"usage": usage_s < TARGET_READ_S, "leaderboard": board_s < TARGET_READ_S},
        }
        print(name, json.dumps(results[name]), flush=True)
    return results


def board_part(args: argparse.Namespace, workdir: Path, pg: PostgresCluster) -> dict[str, Any]:
    """The 7-day leaderboard alone (it reads samples and traffic, not request rows), new vs before, both stores."""
    now = time.time()
    out: dict[str, Any] = {}
    for name, target in {"sqlite": str(workdir / "board.db"), "postgres": pg.fresh_database("bench_board")}.items():
        with open_store(target) as conn:
            _monitor_week(conn, now)
            conn.execute("ANALYZE")
            rollup_traffic(conn)
            board_s, _ = _timed(lambda c=conn: compute(c, window_s=7 * 86400, now=now), repeat=5)
            old_s, _ = _timed(
                lambda c=conn: build(
                    read_samples(c, since=now - 7 * 86400, until=now),
                    read_traffic(c, since=now - 7 * 86400, until=now),
                    window_s=7 * 86400,
                    now=now,
                ),
                repeat=1,
            )
        out[name] = {"leaderboard_7d_s": round(board_s, 3), "leaderboard_7d_before_s": round(old_s, 3)}
        print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["gateway", "big", "board", "all"], default="all")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--fresh", type=int, default=20_000, help="raw rows above the roll-up watermark")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench_store-") as tmp:
        workdir = Path(tmp)
        pg = PostgresCluster()
        try:
            pg.start()
            if args.part in ("gateway", "all"):
                result["gateway"] = gateway_part(args, workdir, pg)
            if args.part in ("big", "all"):
                result["big"] = big_part(args, workdir, pg)
            if args.part == "board":
                result["board"] = board_part(args, workdir, pg)
        finally:
            pg.remove()
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    ok = all(c["ok"] for c in result.get("gateway", {}).get("checks", []))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
