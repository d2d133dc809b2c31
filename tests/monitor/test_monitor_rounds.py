"""Monitor rounds against in-process simulated providers fill a real SQLite store."""

from __future__ import annotations

import random
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from conftest import SimFactory
from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.ledger import open_db
from tailgate.ledger.leaderboard import compute
from tailgate.ledger.samples import Sample, SampleStore, read_samples
from tailgate.monitor.runner import Monitor, Target, targets_from_config
from tailgate.monitor.schedule import Schedule
from tailgate.monitor.workloads import LONG_MAX_TOKENS, build_probe, content_text


def _config(providers: dict[str, dict[str, Any]], routes: list[tuple[str, str]]) -> GatewayConfig:
    data = {
        "providers": providers,
        "models": {"deepseek-v3.2": {"routes": [{"provider": p, "model": m} for p, m in routes]}},
    }
    return validate_data(data, GatewayConfig, "test-config")


async def test_rounds_fill_the_store(sim: SimFactory, tmp_path: Path) -> None:
    """Two rounds over 2 providers x 3 workloads store 12 samples with the metric fields filled."""
    # tok/s needs time between the first and the last token as the client sees them. The instant preset decodes the
    # long probe's 200 tokens in 20 ms, which a late loop (a busy machine, a traced run) reads in one go: first token
    # and [DONE] in one read, E2E == TTFT, tok/s rightly undefined. A token at most every 2 ms keeps the stream
    # longer than anything one late turn can gather (the engine bursts at most 50 ms of steps when behind).
    drip = {"slow_drip_s": 0.002}
    a, b = await sim("instant", faults=drip), await sim("instant", faults=drip)
    cfg = _config(
        {"a": {"base_url": a.url, "api_keys": ["sk-a-0123456789"]}, "b": {"base_url": b.url}},
        [("a", "up-a"), ("b", "up-b"), ("a", "up-a")],
    )
    targets = targets_from_config(cfg)
    assert targets == [Target("a", "up-a"), Target("b", "up-b")]  # duplicates removed, order kept
    db = tmp_path / "m.db"
    async with SampleStore(db) as store:
        monitor = Monitor(resolve_providers(cfg), targets, store)
        try:
            reports = [await monitor.run_round(i) for i in range(2)]
        finally:
            await monitor.close()
    assert [(len(r.samples), r.ok, r.failed, r.skipped) for r in reports] == [(6, 6, 0, [])] * 2
    assert "round 1: 6 probes, 6 ok" in reports[1].summary()
    with closing(open_db(db)) as conn:
        samples = read_samples(conn)
        rows = compute(conn, window_s=3600, now=samples[-1].ts + 1)
    assert len(samples) == 12
    assert {(s.provider, s.model, s.workload) for s in samples} == {
        (p, f"up-{p}", w) for p in "ab" for w in ("short", "long", "accuracy")
    }
    for s in samples:
        assert s.ok
        assert s.status == 200
        assert s.ttft_ms is not None
        assert s.e2e_ms is not None
        assert 0 < s.ttft_ms <= s.e2e_ms
    longs = [s for s in samples if s.workload == "long"]
    assert all(s.output_tokens == LONG_MAX_TOKENS and s.tok_s is not None and s.tok_s > 0 for s in longs)
    # The instant preset answers every task right; graded only for the accuracy workload.
    assert [s.accuracy_ok for s in samples if s.workload == "accuracy"] == [True] * 4
    assert all(s.accuracy_ok is None for s in samples if s.workload != "accuracy")
    assert {r.provider: r.samples for r in rows} == {"a": 6, "b": 6}
    assert all(r.reliability_pct == 100.0 for r in rows)


async def test_failures_are_samples_with_their_error_class(sim: SimFactory, tmp_path: Path) -> None:
    """A provider answering 503 and one that refuses connections both become failed samples, not gaps."""
    bad = await sim("instant", faults={"error_rate": 1.0, "error_statuses": [503]})
    cfg = _config(
        {"bad": {"base_url": bad.url}, "gone": {"base_url": "http://127.0.0.1:9/v1"}},
        [("bad", "m"), ("gone", "m")],
    )
    async with SampleStore(tmp_path / "m.db") as store:
        monitor = Monitor(resolve_providers(cfg), targets_from_config(cfg), store, workloads=["short"])
        try:
            report = await monitor.run_round(0)
        finally:
            await monitor.close()
    by_provider = {s.provider: s for s in report.samples}
    assert (by_provider["bad"].status, by_provider["bad"].error_class) == (503, "http_5xx")
    assert (by_provider["gone"].status, by_provider["gone"].error_class) == (None, "connect")
    assert all(s.tok_s is None and s.accuracy_ok is None for s in report.samples)
    assert report.ok == 0
    assert "2 failed (connect 1, http_5xx 1)" in report.summary()


async def test_probes_respect_the_provider_rate_limit(sim: SimFactory, tmp_path: Path) -> None:
    """With limits.rpm = 2 the pacer lets one probe through at once; the rest are skipped, never sent."""
    p = await sim("instant")
    cfg = _config({"p": {"base_url": p.url, "limits": {"rpm": 2}}}, [("p", "m")])
    async with SampleStore(tmp_path / "m.db") as store:
        monitor = Monitor(
            resolve_providers(cfg), targets_from_config(cfg), store, max_pacing_wait_s=0.05, concurrency=1
        )
        try:
            report = await monitor.run_round(0)
        finally:
            await monitor.close()
    assert len(report.samples) == 1
    assert len(report.skipped) == 2
    assert report.skipped[0].reason.startswith("paced")
    assert "2 skipped" in report.summary()


async def test_retention_runs_after_each_round(sim: SimFactory, tmp_path: Path) -> None:
    """Samples older than retention_s are deleted after a round; the new round's samples stay."""
    p = await sim("instant")
    cfg = _config({"p": {"base_url": p.url}}, [("p", "m")])
    async with SampleStore(tmp_path / "m.db") as store:
        old = Sample(time.time() - 7200, "p", "m", "short", 200, None, 1.0, 2.0, 2)
        store.add(old)
        await store.flush()
        monitor = Monitor(
            resolve_providers(cfg), targets_from_config(cfg), store, workloads=["short"], retention_s=3600.0
        )
        try:
            report = await monitor.run_round(0)
        finally:
            await monitor.close()
    assert report.pruned == 1
    with closing(open_db(tmp_path / "m.db")) as conn:
        assert read_samples(conn) == report.samples
    assert "1 old samples deleted" in report.summary()


def test_the_long_workload_is_about_a_thousand_tokens_and_varies_its_prefix() -> None:
    """long: ~1k words, max_tokens 200, a round-specific first line (no prefix-cache hits across rounds)."""
    one, two = build_probe("long", 1, 1000.0), build_probe("long", 2, 1060.0)
    text = one.body["messages"][0]["content"]
    assert 950 <= len(text.split()) <= 1100
    assert one.body["max_tokens"] == 200
    assert one.body["stream"] is True
    assert text[:40] != two.body["messages"][0]["content"][:40]
    assert build_probe("accuracy", 0, 0.0).task is not None
    with pytest.raises(ValueError, match="unknown workload"):
        build_probe("huge", 0, 0.0)


def test_content_text_reads_stream_frames_and_bodies() -> None:
    """Accuracy grading sees the delta text of a frame or the message of a whole body."""
    assert content_text(b'data: {"choices": [{"delta": {"content": "4"}}]}\n\n') == "4"
    assert content_text(b'{"choices": [{"message": {"content": "12"}}]}') == "12"
    assert content_text(b"data: [DONE]\n\n") == ""
    assert content_text(b": keep-alive\n\n") == ""


def test_schedule_keeps_the_grid_with_jitter_and_skips_missed_slots() -> None:
    """Round k is due in [k*T, k*T + jitter*T); an overrun round does not cause a burst of catch-up rounds."""
    now = [100.0]
    sched = Schedule(60.0, jitter=0.1, rng=random.Random(1), clock=lambda: now[0])
    assert sched.next_due() == 100.0  # the first round at once
    due = sched.next_due()
    assert 160.0 <= due < 166.0
    now[0] = 100.0 + 60 * 5 + 30  # the round ran 5.5 intervals long
    due = sched.next_due()
    assert 100.0 + 60 * 6 <= due < 100.0 + 60 * 6 + 6
    assert sched.delay() > 0
    with pytest.raises(ValueError, match="interval"):
        Schedule(0)
