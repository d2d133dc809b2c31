"""The leaderboard: its numbers against a recomputation from the raw rows, windows, minimums, sorting."""

from __future__ import annotations

import json
import math
import random
from contextlib import closing
from pathlib import Path

import pytest

from tailgate.ledger import open_db
from tailgate.ledger.leaderboard import MINIMUMS, SORTS, ProviderInfo, build, compute, recent_priors
from tailgate.ledger.samples import Sample, TrafficMinute, insert_samples, insert_traffic, tok_s
from tailgate.stats import LatencyHistogram

DAY = 86400.0
WEEK = 7 * DAY
NOW = 1_790_000_000.0


def _exact(values: list[float], q: int) -> float:
    """Nearest rank, computed independently of the code under test: the smallest k with k >= q% of n."""
    ordered = sorted(values)
    k = -(-q * len(ordered) // 100)  # integer ceil(q * n / 100)
    return ordered[max(k, 1) - 1]


def _random_samples(rng: random.Random, provider: str, n: int, since: float) -> list[Sample]:
    out = []
    for _ in range(n):
        workload = rng.choice(["short", "long", "accuracy"])
        ts = since + rng.uniform(0, WEEK)
        if rng.random() < 0.1:
            out.append(Sample(ts, provider, "m1", workload, rng.choice([None, 429, 503]), "http_5xx"))
            continue
        ttft = rng.lognormvariate(6.5, 0.5)
        tokens = {"short": 20, "long": 200, "accuracy": 3}[workload]
        e2e = ttft + tokens * rng.uniform(5, 30)
        right = (rng.random() < 0.8) if workload == "accuracy" else None
        think = rng.uniform(0, 2000.0) if workload == "long" else 0.0  # some probes think before they answer
        out.append(
            Sample(
                ts,
                provider,
                "m1",
                workload,
                200,
                None,
                ttft,
                e2e,
                tokens,
                tok_s(tokens, ttft, e2e),
                right,
                ttft + think,
            )
        )
    return out


def _store(tmp_path: Path, samples: list[Sample], traffic: list[TrafficMinute] = ()) -> Path:  # type: ignore[assignment]
    path = tmp_path / "lb.db"
    with closing(open_db(path)) as conn:
        insert_samples(conn, samples)
        insert_traffic(conn, list(traffic))
    return path


def test_numbers_equal_a_recomputation_from_the_raw_samples(tmp_path: Path) -> None:
    """Every probe column equals the same figure recomputed from the rows (exact percentiles, no tolerance)."""
    rng = random.Random(7)
    since = NOW - WEEK
    samples = _random_samples(rng, "p1", 400, since) + _random_samples(rng, "p2", 150, since)
    path = _store(tmp_path, samples)
    with closing(open_db(path)) as conn:
        rows = {r.provider: r for r in compute(conn, window_s=WEEK, now=NOW)}
    for provider in ("p1", "p2"):
        mine = [s for s in samples if s.provider == provider]
        ok = [s for s in mine if s.error_class is None]
        long_ok = [s for s in ok if s.workload == "long"]
        rates = [s.tok_s for s in long_ok if s.tok_s is not None]
        row = rows[provider]
        assert row.samples == row.attempts == len(mine)
        assert row.reliability_pct == pytest.approx(100.0 * len(ok) / len(mine), abs=0)
        graded = [s for s in mine if s.accuracy_ok is not None]
        assert row.accuracy_pct == 100.0 * sum(1 for s in graded if s.accuracy_ok) / len(graded)
        assert row.tok_s_n == len(rates)
        assert row.tok_s_avg == pytest.approx(sum(rates) / len(rates), rel=1e-12)
        latest = max(long_ok, key=lambda s: s.ts)
        assert (row.snapshot_tok_s, row.snapshot_ts) == (latest.tok_s, latest.ts)
        hourly: dict[int, list[float]] = {}
        for s in long_ok:
            hourly.setdefault(int((s.ts - since) // 3600), []).append(s.tok_s)  # type: ignore[arg-type]
        means = [sum(v) / len(v) for v in hourly.values()]
        assert row.tok_s_buckets == len(means)
        assert (row.tok_s_min, row.tok_s_max) == (min(means), max(means))
        assert row.peak_trough == max(means) / min(means)
        ttft = [s.ttft_ms for s in ok if s.ttft_ms is not None]
        e2e = [s.e2e_ms for s in long_ok if s.e2e_ms is not None]
        for q in (50, 90, 99):
            assert getattr(row, f"ttft_p{q}_ms") == _exact(ttft, q)
            assert getattr(row, f"e2e_p{q}_ms") == _exact(e2e, q)
            answer = [s.ttft_answer_ms for s in ok if s.ttft_answer_ms is not None]
            assert getattr(row, f"ttft_answer_p{q}_ms") == _exact(answer, q)
        assert not [k for k in row.insufficient if not k.startswith("traffic_")]  # no traffic rows here


def test_traffic_columns_merge_worker_rows_within_histogram_precision(tmp_path: Path) -> None:
    """Two workers' rows for the same minutes merge: counts exactly, percentiles within 1/4096 of exact."""
    rng = random.Random(3)
    traffic: list[TrafficMinute] = []
    all_ttft: list[float] = []
    all_e2e: list[float] = []
    requests = errors = rate_n = 0
    rate_sum = 0.0
    for minute in range(30):
        for _worker in range(2):
            ttft_h, e2e_h = LatencyHistogram(), LatencyHistogram()
            n = rng.randint(3, 12)
            ttft = [rng.uniform(5.0, 5000.0) for _ in range(n)]
            e2e = [t + rng.uniform(100.0, 9000.0) for t in ttft]
            ttft_h.record_many(ttft)
            e2e_h.record_many(e2e)
            rates = [rng.uniform(20, 120) for _ in range(n)]
            failed = rng.randint(0, 2)
            traffic.append(
                TrafficMinute(
                    NOW - 3600 + minute * 60,
                    "p1",
                    "m1",
                    n + failed,
                    failed,
                    n * 200,
                    sum(rates),
                    n,
                    json.dumps(ttft_h.to_dict()),
                    json.dumps(e2e_h.to_dict()),
                )
            )
            all_ttft += ttft
            all_e2e += e2e
            requests, errors = requests + n + failed, errors + failed
            rate_sum, rate_n = rate_sum + sum(rates), rate_n + n
    path = _store(tmp_path, [], traffic)
    with closing(open_db(path)) as conn:
        (row,) = compute(conn, window_s=DAY, now=NOW)
    assert row.samples == 0
    assert row.traffic_requests == requests
    assert row.traffic_reliability_pct == pytest.approx(100.0 * (requests - errors) / requests, rel=1e-12)
    assert row.traffic_tok_s_avg == pytest.approx(rate_sum / rate_n, rel=1e-12)
    for q in (50, 90, 99):
        assert row.traffic_ttft_p50_ms is not None
        assert getattr(row, f"traffic_ttft_p{q}_ms") == pytest.approx(_exact(all_ttft, q), rel=1 / 4096)
        assert getattr(row, f"traffic_e2e_p{q}_ms") == pytest.approx(_exact(all_e2e, q), rel=1 / 4096)


def _week_of(provider: str, rate_at_hour: list[float], ttft_ms: float) -> list[Sample]:
    since = NOW - WEEK
    out = []
    for hour, rate in enumerate(rate_at_hour):
        ts = since + hour * 3600 + 1800
        e2e = ttft_ms + 199 / rate * 1000.0
        out.append(
            Sample(ts, provider, "deepseek-v3.2", "long", 200, None, ttft_ms, e2e, 200, tok_s(200, ttft_ms, e2e))
        )
    return out


def test_a_snapshot_leader_is_third_on_the_week(tmp_path: Path) -> None:
    """FIELD-NOTES.md: C leads the snapshot (116 tok/s) but is third on the 7-day average, 3.7x peak/trough."""
    hours = 168
    lo, hi = 31.59, 31.59 * 3.7
    # C swings daily between lo and hi, peaking in the newest hour; A is steady ~110 but dips in the
    # snapshot; B is steady 80.
    c = [lo + (hi - lo) * (1 - math.cos(2 * math.pi * (h - 155) / 24)) / 2 for h in range(hours)]
    a = [110.0] * (hours - 1) + [85.47]
    b = [80.0] * hours
    samples = _week_of("A", a, 1010.0) + _week_of("B", b, 3830.0) + _week_of("C", c, 7200.0)
    # One blazing C sample just outside the window must not count.
    samples.append(Sample(NOW - WEEK - 1, "C", "deepseek-v3.2", "long", 200, None, 100.0, 300.0, 200, 995.0))
    path = _store(tmp_path, samples)
    with closing(open_db(path)) as conn:
        by_snapshot = compute(conn, window_s=WEEK, now=NOW, sort="snapshot")
        by_week = compute(conn, window_s=WEEK, now=NOW, sort="tok_s")
        by_floor = compute(conn, window_s=WEEK, now=NOW, sort="min_tok_s")
        last_hour = compute(conn, window_s=3600, now=NOW, sort="tok_s")
    assert [r.provider for r in by_snapshot] == ["C", "A", "B"]
    assert by_snapshot[0].snapshot_tok_s == pytest.approx(hi, rel=1e-9)
    assert [r.provider for r in by_week] == ["A", "B", "C"]
    assert [r.provider for r in by_floor] == ["A", "B", "C"]
    row_c = by_week[2]
    assert row_c.peak_trough == pytest.approx(3.7, rel=1e-9)
    assert row_c.tok_s_min == pytest.approx(lo, rel=1e-9)
    assert row_c.tok_s_max == pytest.approx(hi, rel=1e-9)
    assert row_c.samples == hours
    # One hour of data: one sample each, so the week's figures are "too few", not misleading.
    assert {r.provider: r.insufficient.get("tok_s_avg") for r in last_hour} == dict.fromkeys("ABC", "n<3")
    assert all(r.peak_trough is None and r.insufficient["peak_trough"] == "n<3" for r in last_hour)


@pytest.mark.parametrize(("n", "shown", "hidden"), [(4, set(), {"p50", "p90", "p99"}), (5, {"p50", "p90"}, {"p99"})])
def test_too_few_samples_gives_none_and_a_note(tmp_path: Path, n: int, shown: set[str], hidden: set[str]) -> None:
    """Below MINIMUMS a percentile is None with an 'n<K' note (JSON: null plus the insufficient marker)."""
    samples = [Sample(NOW - i, "p", "m", "short", 200, None, 100.0 + i, 200.0 + i, 20, 190.0) for i in range(n)]
    (row,) = build(samples, window_s=DAY, now=NOW)
    doc = row.to_dict()
    for q in shown:
        assert doc[f"ttft_{q}_ms"] is not None
        assert f"ttft_{q}_ms" not in doc["insufficient"]
    for q in hidden:
        assert doc[f"ttft_{q}_ms"] is None
        assert doc["insufficient"][f"ttft_{q}_ms"] == f"n<{MINIMUMS[q]}"
    assert doc["reliability_pct"] == (100.0 if n >= MINIMUMS["rate"] else None)
    json.dumps(doc)  # plain JSON types only


def test_p99_needs_twenty_samples() -> None:
    """P99 of 19 samples would just be the maximum: withheld; at 20 it is shown."""
    samples = [Sample(NOW - i, "p", "m", "short", 200, None, float(i), 1.0 + i, 2) for i in range(20)]
    assert build(samples[:19], window_s=DAY, now=NOW)[0].insufficient["ttft_p99_ms"] == "n<20"
    assert build(samples, window_s=DAY, now=NOW)[0].ttft_p99_ms == 19.0


def test_filters_pairs_info_and_sorts(tmp_path: Path) -> None:
    """--model filters; configured pairs without data appear (sorted last); price and max output come from info."""
    samples = [Sample(NOW - i, "fast", "m1", "short", 200, None, 100.0, 200.0, 2) for i in range(6)]
    samples += [Sample(NOW - i, "slow", "m1", "short", 200, None, 900.0, 990.0, 2) for i in range(6)]
    samples += [Sample(NOW - i, "fast", "m2", "short", 200, None, 50.0, 60.0, 2) for i in range(6)]
    path = _store(tmp_path, samples)
    info = {"slow": ProviderInfo(1.0, 2.0, "CNY", 32768), "fast": ProviderInfo(2.0, 3.0, "CNY", 131072)}
    with closing(open_db(path)) as conn:
        rows = compute(conn, window_s=DAY, now=NOW, model="m1", info=info, pairs=[("idle", "m1"), ("idle", "m9")])
        by_price = compute(conn, window_s=DAY, now=NOW, model="m1", sort="price", info=info)
    assert [(r.provider, r.model) for r in rows] == [("fast", "m1"), ("slow", "m1"), ("idle", "m1")]
    assert rows[2].samples == 0
    assert rows[2].insufficient["snapshot_tok_s"] == "n=0"
    assert (rows[1].price_input, rows[1].price_output, rows[1].max_output_tokens) == (1.0, 2.0, 32768)
    assert [r.provider for r in by_price] == ["slow", "fast"]
    with pytest.raises(ValueError, match="unknown sort"):
        build([], window_s=DAY, now=NOW, sort="fastest")
    assert set(SORTS) >= {"p90", "p99", "tok_s", "reliability", "price", "accuracy"}


def test_recent_priors_for_the_router(tmp_path: Path) -> None:
    """recent_priors gives TTFT P90, long E2E P90 and error rate per pair; too few samples give None."""
    samples = [Sample(NOW - i, "p", "m", "long", 200, None, 100.0 * (i + 1), 1000.0 + i, 200) for i in range(10)]
    samples += [Sample(NOW - 20 - i, "p", "m", "short", 503, "http_5xx") for i in range(2)]
    samples += [Sample(NOW - i, "q", "m", "short", 200, None, 5.0, 6.0, 2) for i in range(2)]
    samples += [Sample(NOW - 2 * DAY, "old", "m", "short", 200, None, 5.0, 6.0, 2)]
    path = _store(tmp_path, samples)
    with closing(open_db(path)) as conn:
        priors = recent_priors(conn, DAY, NOW)
    assert set(priors) == {("p", "m"), ("q", "m")}
    p = priors[("p", "m")]
    assert p["ttft_p90_ms"] == 900.0
    assert p["e2e_p90_ms"] == 1008.0
    assert p["error_rate"] == pytest.approx(2 / 12)
    assert p["n"] == 12
    assert priors[("q", "m")] == {"ttft_p90_ms": None, "e2e_p90_ms": None, "error_rate": None, "n": 2}


def test_accuracy_carries_its_wilson_interval_and_task_count(tmp_path: Path) -> None:
    """18 of 20 graded tasks right: 90 % with its 95 % Wilson interval [69.9, 97.2] (the textbook values for
    p = 0.9, n = 20) and n = 20; with 9 of 10 the interval widens to [59.6, 98.2]."""
    samples = [
        Sample(NOW - i, p, "m", "accuracy", 200, None, 100.0, 200.0, 20, 190.0, i >= (2 if p == "a" else 1))
        for p, n in (("a", 20), ("b", 10))
        for i in range(n)
    ]
    with closing(open_db(_store(tmp_path, samples))) as conn:
        rows = {r.provider: r for r in compute(conn, window_s=WEEK, now=NOW)}
    a, b = rows["a"], rows["b"]
    assert (a.accuracy_pct, a.accuracy_n) == (90.0, 20)
    assert a.accuracy_low_pct == pytest.approx(69.90, abs=0.01)
    assert a.accuracy_high_pct == pytest.approx(97.21, abs=0.01)
    assert (b.accuracy_pct, b.accuracy_n) == (90.0, 10)
    assert b.accuracy_low_pct == pytest.approx(59.58, abs=0.01)
    assert b.accuracy_high_pct == pytest.approx(98.21, abs=0.01)
