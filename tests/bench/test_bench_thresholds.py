"""k6-style thresholds (tailgate.bench.thresholds): parsing, errors that name the token, evaluation."""

from __future__ import annotations

import pytest
from bench_support import as_json

from tailgate.bench.results import RunRecorder
from tailgate.bench.schema import Load, Run, Target
from tailgate.bench.thresholds import ThresholdError, breached, evaluate, parse_threshold
from tailgate.upstream.events import CallResult


@pytest.mark.parametrize(
    ("text", "stat", "metric", "op", "limit", "unit"),
    [
        ("p90(e2e)<3s", "p90", "e2e_ms", "<", 3000.0, "ms"),
        ("p99(ttft)<=800ms", "p99", "ttft_ms", "<=", 800.0, "ms"),
        ("avg(itl)<50ms", "mean", "itl_ms", "<", 50.0, "ms"),
        ("mean(itl)<50", "mean", "itl_ms", "<", 50.0, "ms"),
        ("max(e2e)<10s", "max", "e2e_ms", "<", 10000.0, "ms"),
        ("min(ttft)>=1ms", "min", "ttft_ms", ">=", 1.0, "ms"),
        ("med(tpot)<20", "p50", "tpot_ms", "<", 20.0, "ms"),
        ("p95(e2e_ms)<1.5m", "p95", "e2e_ms", "<", 90000.0, "ms"),
        ("p99.9(e2e) < 2.5 s", "p99.9", "e2e_ms", "<", 2500.0, "ms"),
        ("p90.0(e2e)<1s", "p90", "e2e_ms", "<", 1000.0, "ms"),
        ("P90(E2E)<3S", "p90", "e2e_ms", "<", 3000.0, "ms"),
        ("p99(lag)<5ms", "p99", "schedule_lag_ms", "<", 5.0, "ms"),
        ("p50(itl)<500us", "p50", "itl_ms", "<", 0.5, "ms"),
        ("p50(tok_s_req)>=20", "p50", "output_tokens_per_s", ">=", 20.0, "1/s"),
        ("avg(tok_s_req)>20/s", "mean", "output_tokens_per_s", ">", 20.0, "1/s"),
        ("error_rate<1%", None, "error_rate", "<", 0.01, "fraction"),
        ("error_rate <= 0.05", None, "error_rate", "<=", 0.05, "fraction"),
        ("error_rate==0", None, "error_rate", "==", 0.0, "fraction"),
        ("req_per_s>=20", None, "req_per_s", ">=", 20.0, "1/s"),
        ("tok_s>100", None, "output_tokens_per_s", ">", 100.0, "1/s"),
        ("tok_s != 0", None, "output_tokens_per_s", "!=", 0.0, "1/s"),
    ],
)
def test_parse_valid(text: str, stat: str | None, metric: str, op: str, limit: float, unit: str) -> None:
    th = parse_threshold(text)
    assert (th.stat, th.metric, th.op, th.limit, th.unit) == (stat, metric, op, limit, unit)
    assert th.scalar is (stat is None)
    assert th.text == text.strip()


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("p90(e2e)<3x", "'x'"),
        ("p90(e2e)<3sec", "'sec'"),
        ("p90(foo)<3s", "'foo'"),
        ("q90(e2e)<3s", "'q90'"),
        ("p101(e2e)<3s", "'p101'"),
        ("e2e<3s", "'e2e'"),
        ("latency<3s", "'latency'"),
        ("p90(e2e) 3s", "'p90(e2e) 3s'"),
        ("p90(e2e)<<3s", "'<'"),
        ("p90(e2e)=3s", "'='"),
        ("p90(e2e)<", "nothing after"),
        ("<3s", "nothing before"),
        ("p90(e2e)<abc", "'abc'"),
        ("p90(e2e)<-1s", "'-1'"),
        ("error_rate<5", "'5'"),
        ("error_rate<1s", "'s'"),
        ("req_per_s>5ms", "'ms'"),
        ("p90(error_rate)<1%", "'error_rate'"),
        ("p90(e2e<3s", "'p90(e2e'"),
        ("", "empty"),
    ],
)
def test_parse_errors_name_the_token(text: str, token: str) -> None:
    with pytest.raises(ThresholdError) as info:
        parse_threshold(text)
    msg = str(info.value)
    assert token in msg
    assert "accepted forms" in msg
    assert "p90(e2e)<3s" in msg
    assert isinstance(info.value, ValueError)


def _ok(e2e: float, ttft: float = 10.0, tokens: int = 11) -> CallResult:
    return CallResult(
        status=200, error_class=None, started_at=0.0, stream=True, ttft_ms=ttft, e2e_ms=e2e, output_tokens=tokens
    )


def _runs() -> list[Run]:
    fast = RunRecorder(Target(name="fast"), Load(mode="closed", concurrency=1))
    fast.start(0.0)
    for i in range(100):
        fast.add(_ok(100.0 + i), t_done=0.5)
    fast.stop(1.0)  # 100 req/s, 1100 tok/s
    slow = RunRecorder(Target(name="slow"), Load(mode="closed", concurrency=1))
    slow.start(0.0)
    for i in range(98):
        slow.add(_ok(1000.0 + 100 * i), t_done=1.0)
    for _ in range(2):
        slow.add(CallResult(status=500, error_class="http_5xx", started_at=0.0, stream=True), t_done=1.0)
    slow.stop(10.0)  # 9.8 req/s, 2% errors
    return [fast.to_run(), slow.to_run()]


def test_evaluate_pass_fail() -> None:
    runs = _runs()
    ths = [parse_threshold(t) for t in ("p90(e2e)<3s", "error_rate<1%", "req_per_s>=20", "tok_s>100")]
    checks = evaluate(ths, runs)
    res = as_json(checks)
    assert len(res) == 8
    assert [(r["expr"], r["run"], r["target"], r["passed"]) for r in res] == [
        ("p90(e2e)<3s", 0, "fast", True),
        ("p90(e2e)<3s", 1, "slow", False),
        ("error_rate<1%", 0, "fast", True),
        ("error_rate<1%", 1, "slow", False),
        ("req_per_s>=20", 0, "fast", True),
        ("req_per_s>=20", 1, "slow", False),
        ("tok_s>100", 0, "fast", True),
        ("tok_s>100", 1, "slow", True),
    ]
    first = res[0]
    assert first["load"] == {"mode": "closed", "concurrency": 1}
    assert first["limit"] == 3000.0
    assert first["unit"] == "ms"
    assert first["value"] == runs[0].metric("e2e_ms", "p90")
    assert res[3]["value"] == 0.02
    assert breached(checks)
    assert not breached(checks[:1])
    assert not breached([])


def test_evaluate_histogram_stats_and_missing_values() -> None:
    runs = _runs()
    res = as_json(evaluate([parse_threshold("p99.9(e2e)<=200ms"), parse_threshold("min(e2e)>=100")], runs[:1]))
    assert res[0]["passed"] is True
    assert res[0]["value"] == pytest.approx(199.0, rel=1e-3)
    assert res[1]["value"] == 100.0
    assert res[1]["passed"] is True
    # a metric with no samples fails (no evidence is not a pass); lag in a closed loop does not apply
    no_itl, lag = as_json(evaluate([parse_threshold("avg(itl)<50ms"), parse_threshold("p99(lag)<5ms")], runs[:1]))
    assert no_itl["value"] is None
    assert no_itl["passed"] is False
    assert "no itl_ms samples" in no_itl["note"]
    assert lag["value"] is None
    assert lag["passed"] is True
    assert "not measured" in lag["note"]
    empty = RunRecorder(Target(name="x"), Load(mode="closed", concurrency=1)).to_run()
    (r,) = as_json(evaluate([parse_threshold("error_rate<1%")], [empty]))
    assert r["passed"] is False
    assert r["value"] is None
