"""Cached prompt tokens in the store (schema v6), on a real SQLite file and a real PostgreSQL: the migration from
version 5 keeps every old row (NULL: not reported), roll-ups carry the counts, ``usage`` and ``tailgate usage``
show them with the hit rate, the spool ships them, the leaderboard shows the provider's observed hit rate."""

from __future__ import annotations

import json
import random
import sqlite3
import time
from pathlib import Path

import psycopg
import pytest
from ledger_support import BASE_TS, insert_rows, make_row

from tailgate.ledger import LedgerRow, SQLiteLedger
from tailgate.ledger.commands import usage_main
from tailgate.ledger.leaderboard import ProviderInfo, cache_hit_pct, compute
from tailgate.ledger.pg import PG_MIGRATIONS
from tailgate.ledger.schema import MIGRATIONS, SCHEMA_VERSION
from tailgate.ledger.spool import Shipper
from tailgate.ledger.store import StoreConn, open_store
from tailgate.ledger.usage import hit_rate, hour_start, rollup, usage
from tailgate.monitor.board import leaderboard_table, pick_columns


def _at_version_5(target: str) -> None:
    """A store as tailgate wrote it before cached tokens: the migrations up to 5 only, one row rolled up and one
    raw row above the watermark."""
    assert SCHEMA_VERSION >= 7
    old_columns = (
        "ts, request_id, alias, endpoint, stream, status, outcome, attempts, prompt_tokens, tokens_estimated, cost"
    )
    rows = [
        (BASE_TS, "old-rolled", "chat", "chat", 1, 200, "ok", 1, 1000, 0, 0.002),
        (BASE_TS + 1, "old-raw", "chat", "chat", 1, 200, "ok", 1, 500, 0, 0.001),
    ]
    ddl = (
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL, description TEXT NOT NULL)"
    )
    if target.startswith("postgresql://"):
        with psycopg.connect(target, autocommit=True) as pg:
            pg.execute(ddl)
            for step in PG_MIGRATIONS[:5]:
                for statement in step.statements:
                    pg.execute(statement)
                pg.execute("INSERT INTO schema_version VALUES (%s, 0, %s)", (step.version, step.description))
            marks = ", ".join(["%s"] * 11)
            pg.execute(f"INSERT INTO requests ({old_columns}, provider) VALUES ({marks}, 'p1')", rows[0])  # noqa: S608
            pg.execute(
                "INSERT INTO usage_hourly VALUES (%s, '', 'chat', 'p1', 1, 0, 1000, 0, 0.002)", (hour_start(BASE_TS),)
            )
            pg.execute("UPDATE rollup_state SET upto = 1 WHERE name = 'requests'")
            pg.execute(f"INSERT INTO requests ({old_columns}, provider) VALUES ({marks}, 'p1')", rows[1])  # noqa: S608
        return
    conn = sqlite3.connect(target, isolation_level=None)
    try:
        conn.execute(ddl)
        for step in MIGRATIONS[:5]:
            for statement in step.statements:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?, 0, ?)", (step.version, step.description))
        marks = ", ".join("?" * 11)
        conn.execute(f"INSERT INTO requests ({old_columns}, provider) VALUES ({marks}, 'p1')", rows[0])  # noqa: S608
        conn.execute(
            "INSERT INTO usage_hourly VALUES (?, '', 'chat', 'p1', 1, 0, 1000, 0, 0.002)", (hour_start(BASE_TS),)
        )
        conn.execute("UPDATE rollup_state SET upto = 1 WHERE name = 'requests'")
        conn.execute(f"INSERT INTO requests ({old_columns}, provider) VALUES ({marks}, 'p1')", rows[1])  # noqa: S608
    finally:
        conn.close()


def test_migration_from_version_5_keeps_old_rows_as_not_reported(store_target: str) -> None:
    """Opening a version-5 store applies version 6 once: old rows keep every value with ``cached_tokens`` NULL,
    old roll-ups read 0 cached of 0 reported (hit rate None, never 0 %); new rows carry their cached tokens."""
    _at_version_5(store_target)
    with open_store(store_target) as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        assert conn.execute("SELECT request_id, prompt_tokens, cached_tokens FROM requests ORDER BY id").fetchall() == [
            ("old-rolled", 1000, None),
            ("old-raw", 500, None),
        ]
        before = usage(conn, since=BASE_TS, by="provider")
        assert [(g["provider"], g["input_tokens"], g["cached_tokens"], g["cache_hit_rate"]) for g in before] == [
            ("p1", 1500, 0, None)
        ]
        insert_rows(conn, [make_row(7, provider="p1", prompt_tokens=2000, cached_tokens=1536, key_id=None)])
        for step in range(2):  # raw rows above the watermark, then the same after the roll-up
            got = usage(conn, since=BASE_TS, by="provider")
            assert [(g["provider"], g["requests"], g["input_tokens"], g["cached_tokens"]) for g in got] == [
                ("p1", 3, 3500, 1536)
            ]
            assert got[0]["reported_prompt_tokens"] == 2000  # the old rows did not say: not in the rate
            assert got[0]["cache_hit_rate"] == 0.768
            if step == 0:
                assert rollup(conn) == 2
    with open_store(store_target) as again:  # re-opening applies nothing
        (count,) = again.execute("SELECT COUNT(*) FROM schema_version").fetchone()
        assert count == SCHEMA_VERSION


def _rows(n: int, seed: int, start: int = 0) -> list[LedgerRow]:
    rng = random.Random(seed)
    out = []
    for i in range(start, start + n):
        prompt = rng.randint(100, 5000)
        reported = rng.random() < 0.7
        out.append(
            make_row(
                i,
                ts=BASE_TS + rng.uniform(0, 20 * 3600),
                key_id=rng.choice(["team-a", "team-b"]),
                provider=rng.choice(["p1", "p2"]),
                prompt_tokens=prompt,
                cached_tokens=rng.randint(0, prompt) if reported else None,
            )
        )
    return out


def _truth(rows: list[LedgerRow], by: str) -> dict[str, tuple[int, int, int]]:
    """(prompt tokens, cached tokens, prompt tokens of the rows that reported) per group, from the rows."""
    out: dict[str, list[int]] = {}
    for r in rows:
        g = out.setdefault(str(r.key_id if by == "key" else r.provider), [0, 0, 0])
        g[0] += r.prompt_tokens or 0
        if r.cached_tokens is not None:
            g[1] += r.cached_tokens
            g[2] += r.prompt_tokens or 0
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def test_cached_tokens_in_usage_match_the_rows_before_and_after_rollup(store: StoreConn) -> None:
    """Raw rows, a roll-up, late rows for rolled-up hours: the cached counts and the hit rate always equal a
    sum over the rows (rows that did not report are out of the rate, in the input tokens)."""
    first, late = _rows(1500, seed=11), _rows(300, seed=12, start=10_000)
    insert_rows(store, first)
    for phase in ("raw", "rolled up", "late rows", "rolled up again"):
        if phase in ("rolled up", "rolled up again"):
            rollup(store)
        if phase == "late rows":
            insert_rows(store, late)
        everything = first + (late if phase in ("late rows", "rolled up again") else [])
        for by in ("key", "provider"):
            truth = _truth(everything, by)
            got = {g[by]: g for g in usage(store, since=BASE_TS, by=by)}
            assert got.keys() == truth.keys()
            for name, (prompt, cached, reported) in truth.items():
                g = got[name]
                assert (g["input_tokens"], g["cached_tokens"], g["reported_prompt_tokens"]) == (
                    prompt,
                    cached,
                    reported,
                )
                assert g["cache_hit_rate"] == round(cached / reported, 4)
                assert 0.3 < g["cache_hit_rate"] < 0.7  # random cached share of each prompt: about half
    # the leaderboard's provider rate from the same store: the same numbers, in percent
    pct = cache_hit_pct(store, since=BASE_TS, until=BASE_TS + 30 * 3600)
    whole = _truth(first + late, "provider")
    assert pct == {p: round(100 * c / r, 2) for p, (_, c, r) in whole.items()}


def test_hit_rate_is_none_without_reports_and_clamped() -> None:
    assert hit_rate(0, 0) is None
    assert hit_rate(5, 0) is None
    assert hit_rate(0, 100) == 0.0  # a provider that reports 0 cached tokens: a real 0 %
    assert hit_rate(150, 100) == 1.0  # odd usage never reads above 100 %
    assert hit_rate(1, 3) == 0.3333


def test_tailgate_usage_shows_cached_tokens_and_the_hit_rate(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    now = time.time()
    with open_store(str(db)) as conn:
        insert_rows(
            conn,
            [
                make_row(0, ts=now - 60, key_id="team-a", prompt_tokens=4000, cached_tokens=3072),
                make_row(1, ts=now - 50, key_id="team-a", prompt_tokens=1000, cached_tokens=0),
                make_row(2, ts=now - 40, key_id="team-b", prompt_tokens=800, cached_tokens=None),
            ],
        )
    lines: list[str] = []
    assert usage_main(db, lines.append, by="key", since_s=3600.0, fmt="json", now=now) == 0
    groups = {g["key"]: g for g in json.loads(lines[0])}
    assert (groups["team-a"]["cached_tokens"], groups["team-a"]["cache_hit_rate"]) == (3072, 0.6144)
    assert (groups["team-b"]["cached_tokens"], groups["team-b"]["cache_hit_rate"]) == (0, None)
    lines.clear()
    assert usage_main(db, lines.append, by="key", since_s=3600.0, now=now) == 0
    header, a, b, total = lines
    assert header.split()[-4:] == ["cached", "tok", "hit", "rate"]
    assert a.split()[0] == "team-a"
    assert a.split()[-2:] == ["3072", "61.4%"]
    assert b.split()[-2:] == ["0", "-"]  # team-b's provider never said: not a 0 % hit rate
    assert total.split()[-2:] == ["3072", "61.4%"]  # 3072 of the 5000 reported prompt tokens
    lines.clear()
    assert usage_main(db, lines.append, by="key", since_s=3600.0, fmt="csv", now=now) == 0
    assert lines[0].splitlines()[0].endswith(",cached_tokens,reported_prompt_tokens,cache_hit_rate")
    assert lines[0].splitlines()[1].endswith(",3072,5000,0.6144")


async def test_the_spool_ships_cached_tokens_to_postgresql(tmp_path: Path, pg_url: str) -> None:
    spool = tmp_path / "spool.db"
    async with SQLiteLedger(spool) as ledger:
        ledger.record(make_row(0, cached_tokens=96))
        ledger.record(make_row(1, cached_tokens=None))
    shipper = Shipper(spool, pg_url, interval=60)
    await shipper.start()
    assert await shipper.ship_now() == 2
    await shipper.close()
    with open_store(pg_url) as conn:
        assert conn.execute("SELECT request_id, cached_tokens FROM requests ORDER BY origin_id").fetchall() == [
            ("req-00000000", 96),
            ("req-00000001", None),
        ]


def test_leaderboard_shows_the_observed_hit_rate_in_the_wide_set(store: StoreConn) -> None:
    """The provider's hit rate from its traffic rows: in the JSON row, in ``--wide`` and ``--columns``, never in
    the compact default (it would push a latency column out on a narrow terminal)."""
    now = BASE_TS + 3600
    insert_rows(
        store,
        [
            make_row(0, ts=now - 600, provider="p1", prompt_tokens=4000, cached_tokens=3000),
            make_row(1, ts=now - 500, provider="p1", prompt_tokens=1000, cached_tokens=None),
            make_row(2, ts=now - 400, provider="p2", prompt_tokens=1000, cached_tokens=None),
        ],
    )
    with store.transaction():
        for p in ("p1", "p2"):
            store.execute(
                "INSERT INTO traffic_minutes (minute, provider, model, requests, errors, output_tokens, tok_s_sum, "
                "tok_s_n) VALUES (?, ?, 'm', 3, 0, 90, 30.0, 3)",
                (now - 600, p),
            )
    info = {"p1": ProviderInfo(2.0, 3.0, "CNY", None, 0.2), "p2": ProviderInfo(2.0, 3.0, "CNY")}
    rows = {r.provider: r for r in compute(store, window_s=3600, now=now, info=info)}
    assert (rows["p1"].price_cached_input, rows["p2"].price_cached_input) == (0.2, None)
    assert rows["p1"].traffic_cache_hit_pct == 75.0
    assert rows["p2"].traffic_cache_hit_pct is None
    assert rows["p1"].to_dict()["traffic_cache_hit_pct"] == 75.0
    listed = sorted(rows.values(), key=lambda r: r.provider)
    compact = leaderboard_table(listed, window_s=3600, sort="p90")
    assert "traffic_cache_hit" not in [c.key for c in compact.cols]
    assert "traffic_req" in [c.key for c in compact.cols]
    wide = leaderboard_table(listed, window_s=3600, sort="p90", columns=pick_columns(None, wide=True))
    keys = [c.key for c in wide.cols]
    col = keys.index("traffic_cache_hit")
    assert [r[col] for r in wide.rows] == ["75.0%", "-"]
    assert wide.cols[col].keep >= 8  # among the first dropped at a narrow width
    picked = leaderboard_table(listed, window_s=3600, sort="p90", columns=("traffic_cache_hit",))
    assert [c.key for c in picked.cols] == ["provider", "model", "traffic_cache_hit"]


@pytest.mark.parametrize("shape", ["sqlite"])
def test_rows_written_by_the_ledger_read_back_with_cached_tokens(tmp_path: Path, shape: str) -> None:
    from tailgate.ledger.reader import read_rows

    db = tmp_path / f"{shape}.db"
    with open_store(str(db)) as conn:
        insert_rows(conn, [make_row(0, cached_tokens=64), make_row(1)])
    assert [r.cached_tokens for r in read_rows(db)] == [64, None]
