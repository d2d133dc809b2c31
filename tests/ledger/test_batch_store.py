"""The batch store's contract on both backends (SQLite file and a real PostgreSQL): files, batches and their lines
created atomically, owners, leases that expire, completion exactly once with its billing in the same transaction,
status moves, cancel, resume; and replicas in real processes racing for one batch, one of them dying."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ledger_support import make_row

from tailgate.ledger.batch_lines import (
    batch_summaries,
    complete_line,
    lease_lines,
    line_counts,
    read_lines,
    release_lines,
    renew_leases,
)
from tailgate.ledger.batches import (
    BatchLineInput,
    BatchStoreError,
    active_batches,
    cancel_batch,
    create_batch,
    create_file,
    delete_file,
    expire_overdue,
    file_content,
    get_batch,
    get_file,
    list_batches,
    list_files,
    transition,
)
from tailgate.ledger.store import StoreConn, open_store
from tailgate.ledger.usage import rollup, usage

T0 = 1_800_000_000.0


def _lines(n: int) -> list[BatchLineInput]:
    return [
        BatchLineInput(
            f"req-{i}", "POST", "/v1/chat/completions", json.dumps({"model": "chat", "messages": [{"role": "user"}]})
        )
        for i in range(n)
    ]


def _batch(conn: StoreConn, n: int, *, key: str | None = "team-a", now: float = T0, status: str = "in_progress") -> str:
    f = create_file(conn, key_id=key, purpose="batch", filename="in.jsonl", content=b"{}\n" * n, now=now)
    b = create_batch(
        conn,
        key_id=key,
        endpoint="/v1/chat/completions",
        input_file_id=f.id,
        completion_window="24h",
        lines=_lines(n),
        metadata={"job": "nightly"},
        status=status,  # type: ignore[arg-type]
        now=now,
    )
    return b.id


def _billed(conn: StoreConn) -> list[tuple[str, str, str | None, float]]:
    rows = conn.execute("SELECT request_id, lane, price_tier, cost FROM requests ORDER BY request_id").fetchall()
    return [(r[0], r[1], r[2], float(r[3])) for r in rows]


def test_files_are_stored_with_their_bytes_and_seen_only_by_their_owner(store: StoreConn) -> None:
    data = b'{"custom_id": "a"}\n' * 1000 + bytes(range(256))
    f = create_file(store, key_id="team-a", purpose="batch", filename="in.jsonl", content=data, now=T0)
    assert f.id.startswith("file-")
    assert (f.bytes, f.purpose, f.filename, f.key_id) == (len(data), "batch", "in.jsonl", "team-a")
    assert get_file(store, f.id, key_id="team-a") == f
    assert file_content(store, f.id, key_id="team-a") == data
    assert get_file(store, f.id, key_id="team-b") is None  # another key's file reads as missing
    assert file_content(store, f.id, key_id="team-b") is None
    assert get_file(store, f.id, key_id=None) is None  # an owner-less (no keys) caller is not an admin
    assert get_file(store, f.id, key_id=None, admin=True) == f
    g = create_file(store, key_id="team-a", purpose="batch_output", filename="out.jsonl", content=b"", now=T0 + 1)
    create_file(store, key_id="team-b", purpose="batch", filename="b.jsonl", content=b"x", now=T0 + 2)
    assert [x.id for x in list_files(store, key_id="team-a")] == [g.id, f.id]  # newest first
    assert [x.id for x in list_files(store, key_id="team-a", purpose="batch")] == [f.id]
    assert [x.id for x in list_files(store, key_id="team-a", after=g.id)] == [f.id]
    assert len(list_files(store, key_id=None, admin=True)) == 3
    assert not delete_file(store, f.id, key_id="team-b")
    assert delete_file(store, f.id, key_id="team-a")
    assert get_file(store, f.id, key_id="team-a") is None


def test_a_batch_and_its_lines_are_created_together_and_owned(store: StoreConn) -> None:
    bid = _batch(store, 5, status="validating")
    b = get_batch(store, bid, key_id="team-a")
    assert b is not None
    assert bid.startswith("batch_")
    assert (b.status, b.total, b.completed, b.failed, b.metadata, b.cost) == (
        "validating",
        5,
        0,
        0,
        {"job": "nightly"},
        0,
    )
    assert b.request_counts == {"total": 5, "completed": 0, "failed": 0}
    assert b.in_progress_at is None
    assert [x.custom_id for x in read_lines(store, bid)] == [f"req-{i}" for i in range(5)]
    assert line_counts(store, bid)["pending"] == 5
    assert get_batch(store, bid, key_id="team-b") is None
    assert [x.id for x in list_batches(store, key_id="team-a")] == [bid]
    assert list_batches(store, key_id="team-b") == []
    assert [x.id for x in list_batches(store, key_id=None, admin=True)] == [bid]
    # a validating batch is not leased: the executor starts it
    assert lease_lines(store, owner="r1", limit=10, lease_s=30, now=T0) == []
    started = transition(store, bid, "in_progress", now=T0 + 1)
    assert started is not None
    assert (started.status, started.in_progress_at) == ("in_progress", T0 + 1)
    assert transition(store, bid, "in_progress", now=T0 + 2) is None  # compare-and-set: already moved


def test_a_duplicate_custom_id_or_another_keys_file_creates_nothing(store: StoreConn) -> None:
    f = create_file(store, key_id="team-a", purpose="batch", filename="in.jsonl", content=b"x", now=T0)
    lines = [*_lines(3), _lines(2)[1]]
    with pytest.raises(BatchStoreError, match=r"custom_id 'req-1' appears on lines 2 and 4"):
        create_batch(
            store,
            key_id="team-a",
            endpoint="/v1/chat/completions",
            input_file_id=f.id,
            completion_window="24h",
            lines=lines,
        )
    with pytest.raises(BatchStoreError, match="no file"):
        create_batch(
            store,
            key_id="team-b",
            endpoint="/v1/chat/completions",
            input_file_id=f.id,
            completion_window="24h",
            lines=_lines(2),
        )
    (n,) = store.execute("SELECT COUNT(*) FROM batches").fetchone()
    (m,) = store.execute("SELECT COUNT(*) FROM batch_lines").fetchone()
    assert (n, m) == (0, 0)


def test_leases_expire_and_a_dead_replicas_lines_are_taken_again(store: StoreConn) -> None:
    bid = _batch(store, 10)
    a = lease_lines(store, owner="r1", limit=4, lease_s=30, now=T0)
    assert [x.line for x in a] == [0, 1, 2, 3]
    assert all(x.attempts == 1 and x.lease_expires == T0 + 30 for x in a)
    b = lease_lines(store, owner="r2", limit=100, lease_s=30, now=T0 + 1)
    assert [x.line for x in b] == [4, 5, 6, 7, 8, 9]  # r1's live leases are not taken
    assert lease_lines(store, owner="r3", limit=100, lease_s=30, now=T0 + 29) == []
    counts = line_counts(store, bid, now=T0 + 2)
    assert (counts["leased"], counts["leased_live"], counts["pending"]) == (10, 10, 0)
    # r1 dies; its leases expire at T0 + 30: r3 takes its four lines (attempt 2), not r2's (expire at T0 + 31)
    again = lease_lines(store, owner="r3", limit=100, lease_s=30, now=T0 + 30.5)
    assert [(x.line, x.attempts) for x in again] == [(0, 2), (1, 2), (2, 2), (3, 2)]
    # r2 renews its leases (a heartbeat): they are not taken at T0 + 31
    assert renew_leases(store, owner="r2", lease_s=30, now=T0 + 30.6) == 6
    assert lease_lines(store, owner="r4", limit=100, lease_s=30, now=T0 + 31) == []
    # a draining replica gives its lines back
    assert release_lines(store, owner="r2", batch_id=bid, custom_ids=["req-4"]) == 1
    assert release_lines(store, owner="r2") == 5
    assert [x.line for x in lease_lines(store, owner="r4", limit=100, lease_s=30, now=T0 + 32)] == [4, 5, 6, 7, 8, 9]


def test_a_lease_can_take_only_a_range_of_lines(store: StoreConn) -> None:
    """The split (``batch.lane_share``): the lane leases lines ``[0, n)``, the provider job ``[n, end)``; an expired
    lease is taken again within its range only."""
    bid = _batch(store, 10)
    lane = lease_lines(store, owner="r1", limit=2, lease_s=30, now=T0, batch_id=bid, lines=(0, 3))
    assert [x.line for x in lane] == [0, 1]
    job = lease_lines(store, owner="r2", limit=100, lease_s=30, now=T0, batch_id=bid, lines=(3, None))
    assert [x.line for x in job] == [3, 4, 5, 6, 7, 8, 9]
    assert [x.line for x in lease_lines(store, owner="r2", limit=100, lease_s=30, now=T0, lines=(0, 3))] == [2]
    assert lease_lines(store, owner="r3", limit=100, lease_s=30, now=T0 + 1, lines=(0, 3)) == []
    # r1 dies, r2 renews: r1's two lane lines are leased again by the lane's range, never by the job's
    assert renew_leases(store, owner="r2", lease_s=30, now=T0 + 29) == 8
    assert lease_lines(store, owner="r3", limit=100, lease_s=30, now=T0 + 30.5, lines=(3, None)) == []
    again = lease_lines(store, owner="r3", limit=100, lease_s=30, now=T0 + 30.5, lines=(0, 3))
    assert [(x.line, x.attempts) for x in again] == [(0, 2), (1, 2)]


def test_a_line_is_completed_and_billed_exactly_once(store: StoreConn) -> None:
    bid = _batch(store, 3)
    (first,) = lease_lines(store, owner="r1", limit=1, lease_s=10, now=T0)
    # r1's lease expires; r2 takes the line and finishes first
    (second,) = lease_lines(store, owner="r2", limit=1, lease_s=10, now=T0 + 11)
    assert (first.custom_id, second.custom_id, second.attempts) == ("req-0", "req-0", 2)
    row = make_row(ts=T0 + 12, request_id="rq-r2", key_id="team-a", cost=0.5, lane="batch-lane", price_tier="off-peak")
    row2 = make_row(ts=T0 + 13, request_id="rq-r1-late", key_id="team-a", cost=0.5)
    ok = complete_line(
        store,
        bid,
        "req-0",
        by="r2",
        ok=True,
        response_status=200,
        result='{"id": "x"}',
        row=row,
        now=T0 + 12,
    )
    assert ok.accepted
    assert (ok.line, ok.state, ok.done_by) == (0, "done", "r2")
    late = complete_line(
        store, bid, "req-0", by="r1", ok=True, response_status=200, result='{"id": "y"}', row=row2, now=T0 + 13
    )
    assert not late.accepted  # refused and reported: who settled it
    assert (late.state, late.done_by, late.done_at) == ("done", "r2", T0 + 12)
    assert _billed(store) == [("rq-r2", "batch-lane", "off-peak", 0.5)]  # billed once, with its lane and tier
    b = get_batch(store, bid, key_id="team-a")
    assert b is not None
    assert (b.completed, b.failed, b.cost) == (1, 0, 0.5)
    (line,) = read_lines(store, bid, states=["done"])
    assert (line.result, line.done_by, line.lane, line.price_tier, line.request_id) == (
        '{"id": "x"}',
        "r2",
        "batch-lane",
        "off-peak",
        "rq-r2",
    )
    # a failed line counts as failed, with its error; a second completion of it is refused too
    failed = complete_line(
        store, bid, "req-1", by="r1", ok=False, response_status=400, error={"code": "bad", "message": "no"}
    )
    assert failed.accepted
    assert not complete_line(store, bid, "req-1", by="r2", ok=True).accepted
    b = get_batch(store, bid, key_id="team-a")
    assert b is not None
    assert b.request_counts == {"total": 3, "completed": 1, "failed": 1}
    assert json.loads(read_lines(store, bid, states=["failed"])[0].error or "") == {"code": "bad", "message": "no"}
    with pytest.raises(BatchStoreError, match="no line with custom_id 'nope'"):
        complete_line(store, bid, "nope", by="r1", ok=True)
    # finalizing needs every line settled; then one replica finalizes, the other gets None
    assert transition(store, bid, "finalizing", now=T0 + 20) is None
    complete_line(store, bid, "req-2", by="r1", ok=True, response_status=200, result="{}")
    done = transition(store, bid, "finalizing", now=T0 + 21)
    assert done is not None
    assert done.finalizing_at == T0 + 21
    assert transition(store, bid, "finalizing", now=T0 + 22) is None
    out = create_file(store, key_id="team-a", purpose="batch_output", filename="out.jsonl", content=b"{}", now=T0)
    final = transition(store, bid, "completed", now=T0 + 23, output_file_id=out.id)
    assert final is not None
    assert (final.status, final.output_file_id, final.completed_at) == ("completed", out.id, T0 + 23)
    assert active_batches(store) == []


def test_usage_by_lane_sums_the_batch_lines_billing(store: StoreConn) -> None:
    bid = _batch(store, 2)
    store.execute(
        "INSERT INTO requests (ts, request_id, key_id, alias, endpoint, stream, status, outcome, attempts, "
        "tokens_estimated, prompt_tokens, output_tokens, cost, provider) "
        "VALUES (?, 'live', 'team-a', 'chat', 'chat', 0, 200, 'ok', 1, 0, 10, 5, 1.0, 'p1')",
        (time.time(),),
    )
    for i in range(2):
        row = make_row(ts=time.time(), request_id=f"b{i}", key_id="team-a", cost=0.25, lane="batch-lane")
        complete_line(store, bid, f"req-{i}", by="r1", ok=True, row=row)
    expect = {"batch-lane": (2, 0.5), "interactive": (1, 1.0)}
    got = {g["lane"]: (g["requests"], g["cost"]) for g in usage(store, since=time.time() - 3600, by="lane")}
    assert got == expect
    rollup(store)  # the same after the rows are rolled up by hour × key × alias × provider × lane
    got = {g["lane"]: (g["requests"], g["cost"]) for g in usage(store, since=time.time() - 3600, by="lane")}
    assert got == expect


def test_batch_summaries_give_each_batchs_cost_and_tier_mix(store: StoreConn) -> None:
    """The dashboard's batches: newest first, every key's, each with its counts, its cost so far and its settled
    lines by lane and price tier (dearest first); a batch with nothing settled has no tiers."""
    old = _batch(store, 3, now=T0)
    new = _batch(store, 2, key="team-b", now=T0 + 1)
    for cid, lane, tier, cost in (
        ("req-0", "provider-batch", "batch", 0.25),
        ("req-1", "provider-batch", "batch", 0.25),
        ("req-2", "batch-lane", "standard", 1.0),
    ):
        row = make_row(ts=T0 + 2, request_id=f"r-{cid}", key_id="team-a", cost=cost, lane=lane, price_tier=tier)
        complete_line(store, old, cid, by="r1", ok=True, response_status=200, result="{}", row=row)
    got = batch_summaries(store)
    assert [(b["id"], b["key_id"], b["status"]) for b in got] == [
        (new, "team-b", "in_progress"),
        (old, "team-a", "in_progress"),
    ]
    assert got[0]["request_counts"] == {"total": 2, "completed": 0, "failed": 0}
    assert (got[0]["cost"], got[0]["tiers"]) == (0.0, [])
    assert got[1]["request_counts"] == {"total": 3, "completed": 3, "failed": 0}
    assert got[1]["cost"] == pytest.approx(1.5)
    assert [(t["lane"], t["price_tier"], t["lines"], t["cost"]) for t in got[1]["tiers"]] == [
        ("batch-lane", "standard", 1, pytest.approx(1.0)),
        ("provider-batch", "batch", 2, pytest.approx(0.5)),
    ]
    assert [b["id"] for b in batch_summaries(store, limit=1)] == [new]


def test_cancel_settles_pending_lines_and_refuses_late_ones(store: StoreConn) -> None:
    bid = _batch(store, 5)
    leased = lease_lines(store, owner="r1", limit=2, lease_s=30, now=T0)
    with pytest.raises(BatchStoreError, match="no batch"):
        cancel_batch(store, bid, key_id="team-b", now=T0 + 1)
    c = cancel_batch(store, bid, key_id="team-a", now=T0 + 1)
    assert (c.status, c.cancelling_at) == ("cancelling", T0 + 1)
    assert cancel_batch(store, bid, key_id="team-a", now=T0 + 2).status == "cancelling"  # idempotent
    counts = line_counts(store, bid, now=T0 + 2)
    assert (counts["cancelled"], counts["leased"], counts["pending"]) == (3, 2, 0)
    assert lease_lines(store, owner="r2", limit=10, lease_s=30, now=T0 + 100) == []  # nothing leased any more
    assert complete_line(store, bid, leased[0].custom_id, by="r1", ok=True, now=T0 + 3).accepted  # in flight: kept
    done = transition(store, bid, "cancelled", now=T0 + 4)
    assert done is not None
    assert (done.status, done.completed, done.cancelled_at) == ("cancelled", 1, T0 + 4)
    # the other in-flight line was settled as cancelled: its late completion is refused
    assert not complete_line(store, bid, leased[1].custom_id, by="r1", ok=True, now=T0 + 5).accepted
    assert json.loads(read_lines(store, bid, states=["cancelled"])[0].error or "")["code"] == "batch_cancelled"
    other = _batch(store, 1)
    transition(store, other, "expired", now=T0)
    with pytest.raises(BatchStoreError, match="is expired: only a validating or in_progress batch can be cancelled"):
        cancel_batch(store, other, key_id="team-a")


def test_expiry_and_resume_after_restart(store_target: str) -> None:
    with open_store(store_target) as conn:
        old = _batch(conn, 3, now=T0)
        new = _batch(conn, 3, now=T0 + 10)
        lease_lines(conn, owner="dead-replica", limit=6, lease_s=5, now=T0 + 20)
    with open_store(store_target) as conn:  # a restart: the batches are there, the dead leases expire
        assert [b.id for b in active_batches(conn)] == [old, new]
        again = lease_lines(conn, owner="r2", limit=10, lease_s=5, now=T0 + 26)
        assert sorted((x.batch_id == old, x.line, x.attempts) for x in again) == sorted(
            [(True, i, 2) for i in range(3)] + [(False, i, 2) for i in range(3)]
        )
        expired = transition(conn, old, "expired", now=T0 + 30)
        assert expired is not None
        assert line_counts(conn, old)["cancelled"] == 3
        assert [b.id for b in active_batches(conn)] == [new]


# -- replicas in real processes -------------------------------------------------------------------------------


def _worker(args: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.Popen([sys.executable, str(Path(__file__).with_name("batch_worker.py")), *args], env=env)


def test_racing_replicas_and_a_dead_one_complete_every_line_once(store_target: str, tmp_path: Path) -> None:
    """Four replica processes lease one 300-line batch together; one more leased 20 lines and died (its leases
    expire after 1 s); one fast-leasing replica holds each lease past its expiry (0.15 s lease, 0.3 s of work), so
    others take its lines and some of its completions come late. Every line is done once, billed once."""
    n = 300
    with open_store(store_target) as conn:
        bid = _batch(conn, n, now=time.time())
    dead_report = tmp_path / "dead.json"
    dying = _worker(["die", store_target, bid, "dead", str(dead_report), "1.0", "20"])
    assert dying.wait(timeout=30) == 0
    dead = json.loads(dead_report.read_text())["leased"]
    assert len(dead) == 20
    procs = []
    for i in range(4):
        lease_s, hold = ("0.15", "0.3") if i == 0 else ("5", "0.01")
        procs.append(
            (
                tmp_path / f"r{i}.json",
                _worker(["run", store_target, bid, f"r{i}", str(tmp_path / f"r{i}.json"), lease_s, hold]),
            )
        )
    for _, p in procs:
        assert p.wait(timeout=60) == 0
    reports = [json.loads(path.read_text()) for path, _ in procs]
    done = [c for r in reports for c in r["done"]]
    refused = [c for r in reports for c in r["refused"]]
    assert sorted(done) == sorted(f"req-{i}" for i in range(n))  # every line once, by exactly one replica
    assert set(dead) <= set(done)  # the dead replica's lines were taken again after their leases expired
    with open_store(store_target) as conn:
        b = get_batch(conn, bid, key_id="team-a")
        assert b is not None
        assert (b.completed, b.failed) == (n, 0)
        assert b.cost == pytest.approx(n * 0.001)
        billed = conn.execute("SELECT request_id FROM requests").fetchall()
        assert len(billed) == n  # billed once per line: no refused completion wrote a row
        by_line = {r[0].split("-", 1)[1] for r in billed}
        assert by_line == {f"req-{i}" for i in range(n)}
        assert {x.custom_id: x.done_by for x in read_lines(conn, bid, limit=n)} == {
            c: next(f"r{i}" for i, r in enumerate(reports) if c in r["done"]) for c in done
        }
        attempts = {x.custom_id: x.attempts for x in read_lines(conn, bid, limit=n)}
    assert all(attempts[c] >= 2 for c in dead)
    # the slow replica's late results were refused, never billed (the race is real, so it is usually > 0)
    assert all(c in done for c in refused)


def test_migration_to_version_9_keeps_rolled_up_usage_as_interactive(store_target: str) -> None:
    """A version-8 store with a request rolled up into ``usage_hourly``: version 9 rebuilds the roll-ups with
    ``lane`` in their key, the old cell reads ``interactive`` with its sums kept, the old row too."""
    from test_ledger_client_api import _at_version_6

    from tailgate.ledger.schema import SCHEMA_VERSION

    assert SCHEMA_VERSION >= 9
    _at_version_6(store_target, upto=8)
    cell = (3600.0 * 500_000, "team-a", "chat", "p1", 3, 1, 300, 30, 0.75, 100, 300)
    cols = "hour, key_id, alias, provider, requests, errors, input_tokens, output_tokens, cost, cached_tokens, "
    cols += "reported_prompt_tokens"
    if store_target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(store_target, autocommit=True) as pg:
            pg.execute(f"INSERT INTO usage_hourly ({cols}) VALUES ({', '.join(['%s'] * 11)})", cell)  # noqa: S608
    else:
        import sqlite3

        raw = sqlite3.connect(store_target, isolation_level=None)
        try:
            raw.execute(f"INSERT INTO usage_hourly ({cols}) VALUES ({', '.join('?' * 11)})", cell)  # noqa: S608
        finally:
            raw.close()
    with open_store(store_target) as conn:
        (row,) = conn.execute(f"SELECT {cols}, lane FROM usage_hourly").fetchall()  # noqa: S608
        assert tuple(row) == (*cell, "interactive")
        (lane, tier) = conn.execute("SELECT lane, price_tier FROM requests").fetchone()
        assert (lane, tier) == ("interactive", None)
        got = usage(conn, since=cell[0], by="lane")
        assert [g["lane"] for g in got] == ["interactive"]
        assert got[0]["cost"] >= 0.75


def test_batches_past_their_window_expire_once(store: StoreConn) -> None:
    f = create_file(store, key_id="team-a", purpose="batch", filename="in.jsonl", content=b"x", now=T0)
    ids = []
    for window_end in (T0 + 100, T0 + 200):
        b = create_batch(
            store,
            key_id="team-a",
            endpoint="/v1/chat/completions",
            input_file_id=f.id,
            completion_window="24h",
            lines=_lines(2),
            expires_at=window_end,
            status="in_progress",
            now=T0,
        )
        ids.append(b.id)
    complete_line(store, ids[0], "req-0", by="r1", ok=True, now=T0 + 50)
    assert expire_overdue(store, now=T0 + 99) == []
    (gone,) = expire_overdue(store, now=T0 + 150)
    assert (gone.id, gone.status, gone.expired_at, gone.completed) == (ids[0], "expired", T0 + 150, 1)
    assert expire_overdue(store, now=T0 + 150) == []  # moved once
    assert [x.state for x in read_lines(store, ids[0])] == ["done", "cancelled"]
    assert [b.id for b in active_batches(store)] == [ids[1]]
