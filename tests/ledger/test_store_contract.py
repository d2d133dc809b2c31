"""The store contract, run on both backends (SQLite file and a real PostgreSQL): migrations and the newer-schema
refusal, keys, roll-ups + usage matching the raw rows exactly, retention, and the readers."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from ledger_support import BASE_TS, insert_rows, make_row

from tailgate.ledger import LedgerRow
from tailgate.ledger.keys import (
    KeyStoreError,
    create_key,
    digest,
    get_key,
    keys_version,
    list_keys,
    revoke_key,
    update_key,
)
from tailgate.ledger.leaderboard import compute
from tailgate.ledger.samples import Sample, TrafficMinute, read_samples, read_traffic
from tailgate.ledger.schema import SCHEMA_VERSION, SchemaError
from tailgate.ledger.store import StoreConn, has_table, open_store
from tailgate.ledger.usage import cells, hour_start, retention, rollup, spend, usage


def test_fresh_store_is_at_the_current_version_with_every_table(store: StoreConn, store_target: str) -> None:
    (version,) = store.execute("SELECT MAX(version) FROM schema_version").fetchone()
    assert version == SCHEMA_VERSION
    for table in ("requests", "samples", "traffic_minutes", "keys", "keys_version", "usage_hourly", "rollup_state"):
        assert has_table(store, table), table
    open_store(store_target).close()  # re-opening applies nothing again
    (count,) = store.execute("SELECT COUNT(*) FROM schema_version").fetchone()
    assert count == SCHEMA_VERSION


def test_a_newer_schema_is_refused_with_a_clear_message(store: StoreConn, store_target: str) -> None:
    store.execute("INSERT INTO schema_version (version, applied_at, description) VALUES (?, ?, ?)", (99, 0.0, "x"))
    with pytest.raises(SchemaError, match=r"schema version 99 is newer than this tailgate's \d+.*Upgrade"):
        open_store(store_target)


def test_keys_create_list_update_revoke(store: StoreConn) -> None:
    v0 = keys_version(store)
    rec, secret = create_key(store, "team-a", tpm=1000, tokens_per_day=50_000, models=["chat"], metadata={"team": "a"})
    assert secret.startswith("sk-")
    assert len(secret) > 40
    assert rec.key_sha256 == digest(secret)
    assert secret not in repr(store.execute("SELECT * FROM keys").fetchall())  # only the digest is stored
    assert keys_version(store) == v0 + 1
    with pytest.raises(KeyStoreError, match="already exists"):
        create_key(store, "team-a")
    got = get_key(store, "team-a")
    assert got == rec
    assert got is not None
    assert got.models == ("chat",)
    assert got.metadata == {"team": "a"}

    updated = update_key(store, "team-a", tpm=None, cost_per_month=12.5, models=None)
    assert (updated.tpm, updated.cost_per_month, updated.models, updated.tokens_per_day) == (None, 12.5, None, 50_000)
    assert get_key(store, "team-a") == updated
    assert keys_version(store) == v0 + 2
    with pytest.raises(KeyStoreError, match="must be a number > 0"):
        update_key(store, "team-a", rpm=-1)
    with pytest.raises(KeyStoreError, match="no key with id 'nobody'"):
        update_key(store, "nobody", rpm=1)

    create_key(store, "team-b")
    revoked = revoke_key(store, "team-a")
    assert revoked.revoked_at is not None
    assert revoked.public()["state"] == "revoked"
    assert [k.id for k in list_keys(store)] == ["team-a", "team-b"]
    assert [k.id for k in list_keys(store, include_revoked=False)] == ["team-b"]
    assert "key_sha256" not in revoked.public()


def _random_rows(n: int, seed: int, start: int = 0, hours: int = 30) -> list[LedgerRow]:
    rng = random.Random(seed)
    rows = []
    for i in range(start, start + n):
        ok = rng.random() > 0.1
        rows.append(
            make_row(
                i,
                ts=BASE_TS + rng.uniform(0, hours * 3600),
                key_id=rng.choice(["team-a", "team-b", None]),
                alias=rng.choice(["chat", "code"]),
                provider=rng.choice(["p1", "p2", None]),
                outcome="ok" if ok else "http_5xx",
                prompt_tokens=rng.randint(1, 500),
                output_tokens=rng.randint(0, 900) if ok else None,
                cost=rng.uniform(0, 0.01) if ok else None,
            )
        )
    return rows


def _truth(rows: list[LedgerRow], by: str, since: float) -> dict[str, tuple[int, int, int, float]]:
    out: dict[str, list[float]] = {}
    for r in rows:
        if r.ts < since:
            continue
        name = {"key": r.key_id or "-", "alias": r.alias, "provider": r.provider or "-"}[by]
        g = out.setdefault(name, [0, 0, 0, 0.0])
        g[0] += 1
        g[1] += r.prompt_tokens or 0
        g[2] += r.output_tokens or 0
        g[3] += r.cost or 0.0
    return {k: (int(v[0]), int(v[1]), int(v[2]), v[3]) for k, v in out.items()}


def _report(store: StoreConn, by: str, since: float) -> dict[str, tuple[int, int, int, float]]:
    return {
        g[by]: (g["requests"], g["input_tokens"], g["output_tokens"], g["cost"])
        for g in usage(store, since=since, by=by)  # type: ignore[arg-type]
    }


def _assert_same(got: dict[str, tuple[int, int, int, float]], want: dict[str, tuple[int, int, int, float]]) -> None:
    assert got.keys() == want.keys()
    for name in want:
        assert got[name][:3] == want[name][:3], name
        assert got[name][3] == pytest.approx(want[name][3], rel=1e-9, abs=1e-12), name


def test_usage_from_rollups_and_raw_rows_matches_the_ledger_exactly(store: StoreConn) -> None:
    """Rows before and after a roll-up, late rows for already rolled-up hours (a replayed spool), retention
    of raw rows: the report always equals a GROUP BY over every row written."""
    first = _random_rows(3000, seed=1)
    insert_rows(store, first)
    assert rollup(store) == 3000
    assert rollup(store) == 0  # nothing new: nothing counted twice
    late = _random_rows(500, seed=2, start=10_000)  # same hours again, arriving after the roll-up
    insert_rows(store, late)
    everything = first + late
    since = hour_start(BASE_TS + 5 * 3600)  # usage counts whole hours: --since is rounded down to the hour
    for by in ("key", "alias", "provider"):
        _assert_same(_report(store, by, since), _truth(everything, by, since))
    assert rollup(store) == 500
    _assert_same(_report(store, "key", since), _truth(everything, "key", since))
    # retention: raw rows older than 10 h (rolled up) go; the report is unchanged
    now = BASE_TS + 40 * 3600
    deleted, _ = retention(store, now=now, raw_s=10 * 3600, rollup_s=400 * 86400)
    assert deleted > 2000
    (left,) = store.execute("SELECT COUNT(*) FROM requests").fetchone()
    assert left == len(everything) - deleted
    _assert_same(_report(store, "key", BASE_TS), _truth(everything, "key", hour_start(BASE_TS)))
    days = usage(store, since=BASE_TS, by="day")
    assert sum(d["requests"] for d in days) == len(everything)
    tokens, cost = spend(store, "team-a", since=BASE_TS)
    truth = _truth(everything, "key", BASE_TS)["team-a"]
    assert tokens == truth[1] + truth[2]
    assert cost == pytest.approx(truth[3])


def test_new_rows_after_retention_are_still_rolled_up(store: StoreConn) -> None:
    """Deleting every old raw row must not let new rows reuse ids below the watermark (SQLite would)."""
    insert_rows(store, _random_rows(200, seed=3))
    rollup(store)
    retention(store, now=BASE_TS + 400 * 86400, raw_s=1.0, rollup_s=1000 * 86400)
    fresh = _random_rows(50, seed=4, start=5000)
    insert_rows(store, fresh)
    assert rollup(store) == 50
    assert sum(c.requests for c in cells(store, since=BASE_TS)) == 250


def test_samples_and_traffic_read_back_the_same(store: StoreConn) -> None:
    sample = Sample(BASE_TS, "p1", "m", "long", 200, None, 100.5, 900.25, 50, 61.2, None)
    minute = TrafficMinute(BASE_TS, "p1", "m", 10, 1, 400, 500.0, 9, None, None)
    cols = [f.name for f in dataclasses.fields(Sample)]
    store.execute(
        f"INSERT INTO samples ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",  # noqa: S608
        list(dataclasses.astuple(sample)),
    )
    tcols = [f.name for f in dataclasses.fields(TrafficMinute)]
    for _ in range(2):
        store.execute(
            f"INSERT INTO traffic_minutes ({', '.join(tcols)}) VALUES ({', '.join('?' * len(tcols))})",  # noqa: S608
            list(dataclasses.astuple(minute)),
        )
    assert read_samples(store) == [sample]
    assert read_traffic(store, provider="p1") == [minute, minute]
    rows = compute(store, window_s=3600, now=BASE_TS + 60)
    assert [(r.provider, r.model, r.samples, r.traffic_requests) for r in rows] == [("p1", "m", 1, 20)]


def test_traffic_hours_give_the_same_leaderboard_as_the_minutes(store: StoreConn) -> None:
    """Minute rows from two workers over 5 hours (histograms included), rolled up into hours, some arriving
    after the roll-up: the leaderboard over an hour-unaligned window equals the one computed from minutes."""
    from tailgate.ledger.leaderboard import build
    from tailgate.ledger.traffic_hours import read_window, rollup_traffic
    from tailgate.stats import LatencyHistogram

    rng = random.Random(5)
    tcols = [f.name for f in dataclasses.fields(TrafficMinute)]
    insert = f"INSERT INTO traffic_minutes ({', '.join(tcols)}) VALUES ({', '.join('?' * len(tcols))})"  # noqa: S608
    start = hour_start(BASE_TS)
    minutes: list[TrafficMinute] = []

    def hist() -> str:
        h = LatencyHistogram()
        for _ in range(5):
            h.record(rng.uniform(50, 3000))
        return json.dumps(h.to_dict(), separators=(",", ":"))

    def add(n: int) -> None:
        rows = []
        for _ in range(n):
            m = start + rng.randrange(5 * 60) * 60.0
            rows.append(
                TrafficMinute(m, rng.choice(["p1", "p2"]), "m", 5, rng.randint(0, 1), 100, 250.0, 4, hist(), hist())
            )
        with store.transaction():
            store.executemany(insert, [dataclasses.astuple(r) for r in rows])
        minutes.extend(rows)

    add(400)
    assert rollup_traffic(store) == 400
    add(50)  # late: not rolled up yet
    now = start + 4.5 * 3600
    window = 3.7 * 3600
    got = build([], read_window(store, since=now - window, until=now), window_s=window, now=now)
    want = build([], minutes, window_s=window, now=now)
    assert [r.to_dict() for r in got] == [r.to_dict() for r in want]
    assert rollup_traffic(store) == 50
    got = build([], read_window(store, since=now - window, until=now), window_s=window, now=now)
    assert [r.to_dict() for r in got] == [r.to_dict() for r in want]
    (hours,) = store.execute("SELECT COUNT(*) FROM traffic_hours").fetchone()
    assert hours <= 10  # 5 hours x 2 providers, both workers merged


def test_the_leaderboard_computed_in_the_store_equals_the_one_from_every_sample(store: StoreConn) -> None:
    """compute() aggregates probes in SQL; build() over every sample read back is the reference."""
    from tailgate.ledger.leaderboard import build

    rng = random.Random(9)
    cols = [f.name for f in dataclasses.fields(Sample)]
    insert = f"INSERT INTO samples ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"  # noqa: S608
    rows = []
    for i in range(3000):
        ok = rng.random() > 0.1
        workload = rng.choice(["short", "long", "accuracy"])
        ttft = rng.uniform(50, 2000) if ok else None
        e2e = (ttft or 0) + rng.uniform(100, 5000) if ok else None
        rows.append(
            Sample(
                BASE_TS + rng.uniform(0, 86400) if i % 7 else BASE_TS + 1000.0,  # some equal timestamps
                rng.choice(["p1", "p2", "p3"]),
                rng.choice(["m", "n"]),
                workload,
                200 if ok else 502,
                None if ok else "http_5xx",
                ttft,
                e2e,
                rng.randint(1, 300) if ok else None,
                rng.uniform(10, 90) if ok and workload == "long" and rng.random() > 0.05 else None,
                (rng.random() > 0.3) if ok and workload == "accuracy" else None,
            )
        )
    with store.transaction():
        store.executemany(
            insert, [tuple(int(v) if isinstance(v, bool) else v for v in dataclasses.astuple(r)) for r in rows]
        )
    now, window = BASE_TS + 80000.0, 70000.0
    for model in (None, "m"):
        got = compute(store, window_s=window, now=now, model=model)
        want = build([r for r in rows if model is None or r.model == model], window_s=window, now=now)
        assert [(r.provider, r.model) for r in got] == [(r.provider, r.model) for r in want]
        for g, w in zip(got, want, strict=True):
            gd, wd = g.to_dict(), w.to_dict()
            assert gd.keys() == wd.keys()
            for k in wd:
                if isinstance(wd[k], float):
                    assert gd[k] == pytest.approx(wd[k], rel=1e-9), k
                else:
                    assert gd[k] == wd[k], k
