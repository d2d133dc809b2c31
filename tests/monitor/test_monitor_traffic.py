"""The gateway's per-minute aggregates (gateway/metrics/traffic_minutes.py) and how the leaderboard reads them."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import pytest

from tailgate.gateway.metrics.traffic_minutes import TrafficAggregator
from tailgate.ledger import open_db
from tailgate.ledger.leaderboard import compute
from tailgate.ledger.samples import read_traffic
from tailgate.stats import LatencyHistogram

MINUTE0 = 1_790_000_040.0 // 60 * 60


async def test_minutes_are_written_when_they_end_and_everything_at_close(tmp_path: Path) -> None:
    """flush() writes finished minutes only; close() writes the current one; client aborts are not counted."""
    now = [MINUTE0 + 5]
    agg = TrafficAggregator(tmp_path / "t.db", flush_interval=3600, clock=lambda: now[0])
    await agg.start()
    agg.observe("a", "m", "ok", 201, 100.0, 2100.0, stream=True)  # 100 tok/s
    agg.observe("a", "m", "ok", 101, 300.0, 1300.0, stream=True)  # 100 tok/s
    agg.observe("a", "m", "http_5xx", 0, None, 50.0, stream=True)
    agg.observe("a", "m", "client_closed", 3, 10.0, 20.0, stream=True)  # the client left: says nothing about "a"
    agg.observe(None, None, "unknown_model", None, None, 1.0, stream=True)  # no provider was tried
    now[0] = MINUTE0 + 65
    agg.observe("a", "m", "ok", 2, 10.0, 20.0, stream=True)
    await agg.flush()
    with closing(open_db(tmp_path / "t.db")) as conn:
        (first,) = read_traffic(conn)
    assert (first.minute, first.requests, first.errors, first.output_tokens) == (MINUTE0, 3, 1, 302)
    assert first.tok_s_sum == pytest.approx(200.0)
    assert first.tok_s_n == 2
    assert first.ttft_hist is not None
    assert LatencyHistogram.from_dict(json.loads(first.ttft_hist)).count == 2
    await agg.close()
    agg.observe("a", "m", "ok", 2, 10.0, 20.0, stream=True)  # after close: ignored, never raises
    with closing(open_db(tmp_path / "t.db")) as conn:
        rows = read_traffic(conn)
    assert [(r.minute, r.requests) for r in rows] == [(MINUTE0, 3), (MINUTE0 + 60, 1)]


async def test_two_workers_rows_for_one_minute_merge_on_the_leaderboard(tmp_path: Path) -> None:
    """Each gateway worker writes its own row; the leaderboard sums and merges them."""
    db = tmp_path / "t.db"
    workers = [TrafficAggregator(db, clock=lambda: MINUTE0 + 1) for _ in range(2)]
    for w in workers:
        await w.start()
    for i in range(10):
        workers[i % 2].observe("a", "m", "ok", 101, 100.0 + i, 1100.0 + i, stream=True)
    workers[0].observe("a", "m", "timeout_first_token", 0, None, 60000.0, stream=True)
    for w in workers:
        await w.close()
    with closing(open_db(db)) as conn:
        assert len(read_traffic(conn)) == 2
        (row,) = compute(conn, window_s=3600, now=MINUTE0 + 60)
    assert row.traffic_requests == 11
    assert row.traffic_reliability_pct == pytest.approx(100.0 * 10 / 11)
    assert row.traffic_tok_s_avg == pytest.approx(100.0)
    assert row.traffic_ttft_p90_ms == pytest.approx(108.0, rel=1 / 4096)
    assert row.traffic_ttft_p99_ms is None
    assert row.insufficient["traffic_ttft_p99_ms"] == "n<20"
    assert row.samples == 0  # traffic is never mixed into the probe columns


async def test_a_non_streamed_answer_gives_no_tok_s_and_no_ttft(tmp_path: Path) -> None:
    """A non-streamed answer arrives whole (E2E − TTFT ≈ 0.05 ms): it counts as a request and an E2E, never
    as a tok/s (it read 195,533.9 tok/s on the leaderboard) nor as a TTFT."""
    agg = TrafficAggregator(tmp_path / "t.db", clock=lambda: MINUTE0 + 1)
    await agg.start()
    agg.observe("a", "m", "ok", 101, 1000.0, 2000.0, stream=True)  # 100 tok/s
    agg.observe("a", "m", "ok", 128, 1999.95, 2000.0, stream=False)  # the body read: 2,540,000 "tok/s"
    await agg.close()
    with closing(open_db(tmp_path / "t.db")) as conn:
        (row,) = read_traffic(conn)
        (board,) = compute(conn, window_s=3600, now=MINUTE0 + 60)
    assert (row.requests, row.output_tokens, row.tok_s_n) == (2, 229, 1)
    assert row.tok_s_sum == pytest.approx(100.0)
    assert row.ttft_hist is not None
    assert row.e2e_hist is not None
    assert LatencyHistogram.from_dict(json.loads(row.ttft_hist)).count == 1
    assert LatencyHistogram.from_dict(json.loads(row.e2e_hist)).count == 2
    assert board.traffic_requests == 2


async def test_without_a_ledger_the_aggregator_does_nothing(tmp_path: Path) -> None:
    """path=None (ledger disabled): observe is a no-op and nothing is created."""
    agg = TrafficAggregator(None)
    assert agg.path is None
    await agg.start()
    agg.observe("a", "m", "ok", 10, 1.0, 2.0, stream=True)
    await agg.close()
    assert not agg.enabled
    assert not (tmp_path / "t.db").exists()
