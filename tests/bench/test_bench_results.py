"""RunRecorder, the decay table and the results document (tailgate.bench.results)."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tailgate.bench.document import build_document, decay_table, load_document, write_csv, write_json
from tailgate.bench.results import ERROR_KEYS, SCHEMA, ResultsError, RunRecorder, describe_load, error_key
from tailgate.bench.schema import BenchDocument, Load, Run, Stats, Target, Throughput, Tokens
from tailgate.upstream.events import CallResult
from tailgate.wire.errors import WireError

TARGET = Target(name="a", base_url="http://127.0.0.1:1/v1", model="m")
CLOSED = Load(mode="closed", concurrency=4)
OPEN = Load(mode="open", rate=10.0, arrival="poisson")


def ok(
    ttft: float, e2e: float, tokens: int = 5, itl: list[float] | None = None, *, estimated: bool = False
) -> CallResult:
    return CallResult(
        status=200,
        error_class=None,
        started_at=0.0,
        stream=True,
        ttft_ms=ttft,
        e2e_ms=e2e,
        itl_ms=list(itl or []),
        output_tokens=tokens,
        prompt_tokens=10,
        tokens_estimated=estimated,
    )


def fail(error_class: Any, detail: str | None = None, status: int | None = None) -> CallResult:
    return CallResult(status=status, error_class=error_class, started_at=0.0, stream=True, detail=detail)


def nearest_rank(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(1, math.ceil(q / 100 * len(s) * (1 - 1e-12))) - 1]


def close(got: float | None, want: float) -> bool:
    """Within the histogram's resolution (relative 1/4096 above 4.096 ms) and the 3-decimal rounding."""
    assert got is not None
    return abs(got - want) <= max(want / 4000, 0.0006)


def test_percentiles_match_sorted_lists() -> None:
    rng = random.Random(7)
    rec = RunRecorder(TARGET, CLOSED)
    rec.start(100.0)
    ttfts, e2es = [], []
    for i in range(1000):
        ttft = rng.uniform(0.5, 900.0)
        e2e = ttft + rng.uniform(1.0, 3000.0)
        ttfts.append(ttft)
        e2es.append(e2e)
        rec.add(ok(ttft, e2e, tokens=1), t_done=100.0 + i / 100)
    rec.stop(110.0)
    d = rec.to_dict()
    for name, values in (("ttft_ms", ttfts), ("e2e_ms", e2es)):
        m = d["metrics"][name]
        assert m["count"] == 1000
        for q in (50, 90, 95, 99):
            assert close(m[f"p{q}"], nearest_rank(values, q)), (name, q)
        assert m["max"] == round(max(values), 3)
        assert m["mean"] == pytest.approx(sum(values) / len(values), abs=6e-4)
    # small values (< 4.096 ms) are exact to the microsecond
    small = RunRecorder(TARGET, CLOSED)
    vals = [round(rng.uniform(0.0, 4.0), 3) for _ in range(200)]
    for v in vals:
        small.add(ok(v, v + 0.001, tokens=1), t_done=0.0)
    m = small.to_dict()["metrics"]["ttft_ms"]
    assert [m["p50"], m["p90"], m["p99"]] == [nearest_rank(vals, 50), nearest_rank(vals, 90), nearest_rank(vals, 99)]


def test_a_non_streamed_answer_gives_no_tpot_and_no_tok_s() -> None:
    """A non-streamed body arrives whole (E2E − TTFT ≈ 0.05 ms): no per-request tpot / tok/s (it would read
    2.5 million tok/s), but it counts as a success with its tokens and E2E."""
    rec = RunRecorder(TARGET, CLOSED)
    rec.start(0.0)
    rec.add(ok(100.0, 1100.0, tokens=11), t_done=0.5)  # streamed: 10 tok/s
    rec.add(msgspec.structs.replace(ok(999.95, 1000.0, tokens=128), stream=False), t_done=1.0)
    rec.stop(2.0)
    d = rec.to_dict()
    assert d["metrics"]["output_tokens_per_s"]["count"] == 1
    assert d["metrics"]["output_tokens_per_s"]["max"] == 10.0
    assert d["metrics"]["tpot_ms"]["count"] == 1
    assert d["metrics"]["e2e_ms"]["count"] == 2
    assert d["tokens"]["output"] == 139


def test_tpot_tok_s_tokens_and_throughput() -> None:
    rec = RunRecorder(TARGET, CLOSED)
    rec.start(0.0)
    rec.add(ok(100.0, 1100.0, tokens=11), t_done=0.5)  # tpot 100 ms, 10 tok/s
    rec.add(ok(50.0, 250.0, tokens=5), t_done=1.5)  # tpot 50 ms, 20 tok/s
    rec.add(ok(50.0, 60.0, tokens=1), t_done=1.6)  # one token: no tpot / tok/s
    rec.stop(2.0)
    d = rec.to_dict()
    assert d["metrics"]["tpot_ms"]["count"] == 2
    assert d["metrics"]["tpot_ms"]["max"] == 100.0
    assert d["metrics"]["tpot_ms"]["mean"] == 75.0
    assert d["metrics"]["output_tokens_per_s"]["max"] == 20.0
    assert d["metrics"]["output_tokens_per_s"]["p50"] == 10.0
    assert d["tokens"] == {"output": 17, "input": 30, "estimated": False}
    assert d["throughput"] == {
        "duration_s": 2.0,
        "req_per_s": 1.5,
        "attempts_per_s": 1.5,
        "output_tokens_per_s": 8.5,
    }
    assert d["timeline"] == [
        {"t": 0, "ok": 1, "errors": 0, "output_tokens": 11},
        {"t": 1, "ok": 2, "errors": 0, "output_tokens": 6},
    ]
    rec.add(ok(1.0, 2.0, tokens=3, estimated=True), t_done=1.9)
    assert rec.to_dict()["tokens"]["estimated"] is True


def test_open_loop_lag_is_added_to_latency_not_to_itl() -> None:
    rec = RunRecorder(TARGET, OPEN)
    rec.start(0.0)
    rec.add(ok(100.0, 500.0, tokens=5, itl=[100.0, 100.0, 100.0, 100.0]), lag_ms=2000.0, t_done=1.0)
    rec.add(ok(100.0, 500.0, tokens=5), lag_ms=0.0, t_done=1.0)
    rec.add(fail("http_5xx", status=500), lag_ms=30.0, t_done=1.0)
    rec.stop(2.0)
    d = rec.to_dict()
    assert d["metrics"]["ttft_ms"]["max"] == 2100.0
    assert d["metrics"]["e2e_ms"]["max"] == 2500.0
    assert d["metrics"]["e2e_ms"]["p50"] == 500.0
    assert d["metrics"]["itl_ms"]["max"] == 100.0
    assert d["metrics"]["tpot_ms"]["max"] == 100.0  # the lag cancels out of E2E − TTFT
    lag = d["metrics"]["schedule_lag_ms"]
    assert lag["count"] == 3  # every request, failures included
    assert lag["max"] == 2000.0
    assert "schedule_lag_ms" in d["histograms"]
    # closed loop: no lag metric
    closed = RunRecorder(TARGET, CLOSED).to_dict()
    assert "schedule_lag_ms" not in closed["metrics"]
    assert "schedule_lag_ms" not in closed["histograms"]
    # rate stages are open loop too
    assert RunRecorder(TARGET, Load(mode="stage", stage=0, rate=5.0)).open_loop


def test_itl_is_pooled_per_gap() -> None:
    rec = RunRecorder(TARGET, CLOSED)
    rec.add(ok(1.0, 100.0, tokens=3, itl=[1.0, 1.0]), t_done=0.0)
    rec.add(ok(1.0, 100.0, tokens=9, itl=[3.0] * 8), t_done=0.0)
    m = rec.to_dict()["metrics"]["itl_ms"]
    # pooled: 10 gaps with mean 2.6; a per-request mean would give (1 + 3) / 2 = 2
    assert m["count"] == 10
    assert m["mean"] == 2.6
    assert m["p50"] == 3.0
    assert m["p90"] == 3.0


def test_errors_by_class_and_examples() -> None:
    rec = RunRecorder(TARGET, CLOSED)
    rec.start(0.0)
    rec.add(fail("rate_limited", detail="429 slow down", status=429), t_done=0.1)
    rec.add(fail("rate_limited", detail="second one", status=429), t_done=0.2)
    rec.add(fail("timeout_first_token", detail="no first token in 5s"), t_done=0.3)
    rec.add(fail("timeout_total"), t_done=0.3)
    rec.add(fail("http_other", status=302), t_done=0.3)
    rec.add(fail("malformed", detail="x" * 1000, status=200), t_done=0.3)
    err = WireError(503, "overloaded", type="server_error")
    rec.add(CallResult(status=503, error_class="http_5xx", started_at=0.0, stream=True, error=err), t_done=1.2)
    rec.add(fail("cancelled"), t_done=0.4)  # excluded from the run
    rec.add(ok(10.0, 20.0), t_done=1.5)
    rec.stop(2.0)
    d = rec.to_dict()
    assert rec.requests == 8
    assert rec.successes == 1
    assert rec.errors == 7
    assert d["requests"] == 8
    assert d["cancelled"] == 1
    assert list(d["errors"]) == list(ERROR_KEYS)
    assert d["errors"]["rate_limited"] == 2
    assert d["errors"]["timeout"] == 2
    assert d["errors"]["other"] == 1
    assert d["errors"]["malformed"] == 1
    assert d["errors"]["http_5xx"] == 1
    assert d["errors"]["connect"] == 0
    assert d["error_rate"] == round(7 / 8, 6)
    ex = d["error_examples"]
    assert ex["rate_limited"] == "429 slow down"
    assert ex["timeout"] == "no first token in 5s"
    assert len(ex["malformed"]) == 300
    assert "overloaded" in ex["http_5xx"]
    assert "connect" not in ex
    assert d["throughput"]["req_per_s"] == 0.5  # successes per second
    assert d["throughput"]["attempts_per_s"] == 4.0
    assert d["timeline"][0]["errors"] == 6
    assert d["timeline"][1] == {"t": 1, "ok": 1, "errors": 1, "output_tokens": 5}
    # latency comes from successes only
    assert d["metrics"]["e2e_ms"]["count"] == 1


def test_error_key_mapping() -> None:
    assert error_key("timeout_idle") == "timeout"
    assert error_key("timeout_headers") == "timeout"
    assert error_key("cut") == "cut"
    assert error_key("stream_error") == "stream_error"
    assert error_key("insufficient_quota") == "insufficient_quota"
    assert error_key("http_other") == "other"
    assert error_key("something_new") == "other"
    assert error_key("cancelled") is None


def test_empty_run_is_null_not_zero() -> None:
    rec = RunRecorder(TARGET, CLOSED)
    assert rec.live_p90_e2e() is None
    d = rec.to_dict()
    for name in ("ttft_ms", "e2e_ms", "itl_ms", "tpot_ms", "output_tokens_per_s"):
        assert d["metrics"][name] == {
            "p50": None,
            "p90": None,
            "p95": None,
            "p99": None,
            "max": None,
            "mean": None,
            "count": 0,
        }
    assert d["error_rate"] is None
    assert d["throughput"]["req_per_s"] is None
    assert d["timeline"] == []
    assert d["accuracy"] is None
    assert d["tokens"]["input"] is None
    json.dumps(d, allow_nan=False)


def test_accuracy_and_live_view() -> None:
    rec = RunRecorder(TARGET, CLOSED)
    rec.start(0.0)
    for i in range(10):
        rec.add(ok(1.0, float(i + 1)), t_done=0.1, accuracy=i < 7)
    assert rec.live_p90_e2e() == pytest.approx(9.0, rel=1e-3)
    assert rec.to_dict()["accuracy"] == {"right": 7, "total": 10, "pct": 70.0}


def _random_results(seed: int, n: int) -> list[tuple[CallResult, float, float]]:
    rng = random.Random(seed)
    out: list[tuple[CallResult, float, float]] = []
    classes: list[Any] = ["rate_limited", "http_5xx", "timeout_idle", "cut", "connect"]
    for _ in range(n):
        t = 50.0 + rng.uniform(0.0, 5.0)
        lag = rng.uniform(0.0, 20.0)
        if rng.random() < 0.1:
            out.append((fail(rng.choice(classes), detail=f"d{rng.random()}"), lag, t))
        else:
            ttft = rng.uniform(1.0, 500.0)
            toks = rng.randint(1, 40)
            itl = [rng.uniform(0.1, 80.0) for _ in range(max(0, toks - 1))]
            out.append((ok(ttft, ttft + sum(itl) + 0.5, tokens=toks, itl=itl), lag, t))
    return out


@pytest.mark.parametrize("load", [CLOSED, OPEN])
def test_merge_equals_recording_all_in_one(load: Load) -> None:
    data = _random_results(3, 600)
    whole = RunRecorder(TARGET, load)
    a = RunRecorder(TARGET, load)
    b = RunRecorder(TARGET, load)
    for r in (whole, a, b):
        r.start(50.0)
    for i, (res, lag, t) in enumerate(data):
        whole.add(res, lag_ms=lag, t_done=t, accuracy=i % 3 == 0)
        (a if i % 2 else b).add(res, lag_ms=lag, t_done=t, accuracy=i % 3 == 0)
    whole.stop(56.0)
    a.stop(55.5)
    b.stop(56.0)
    a.merge(b)
    da, dw = a.to_dict(), whole.to_dict()
    for key in ("requests", "successes", "errors", "error_rate", "throughput", "tokens", "timeline", "accuracy"):
        assert da[key] == dw[key], key
    assert set(da["error_examples"]) == set(dw["error_examples"])
    for name in dw["metrics"]:
        assert da["metrics"][name]["count"] == dw["metrics"][name]["count"]
        for stat in ("p50", "p90", "p95", "p99", "max"):
            assert da["metrics"][name][stat] == dw["metrics"][name][stat], (name, stat)
        assert da["metrics"][name]["mean"] == pytest.approx(dw["metrics"][name]["mean"], abs=1e-3)


def test_merge_rejects_other_load_and_aligns_timelines() -> None:
    a = RunRecorder(TARGET, CLOSED)
    with pytest.raises(ValueError, match="different"):
        a.merge(RunRecorder(TARGET, Load(mode="closed", concurrency=8)))
    a.start(10.0)
    a.add(ok(1.0, 2.0), t_done=10.5)
    b = RunRecorder(TARGET, CLOSED)
    b.start(8.0)  # started two seconds earlier
    b.add(ok(1.0, 2.0), t_done=8.5)
    a.merge(b)
    assert [(p["t"], p["ok"]) for p in a.to_dict()["timeline"]] == [(0, 1), (1, 0), (2, 1)]


def test_to_dict_from_dict_round_trip() -> None:
    rec = RunRecorder(TARGET, OPEN)
    rec.start(50.0)
    for i, (res, lag, t) in enumerate(_random_results(5, 300)):
        rec.add(res, lag_ms=lag, t_done=t, accuracy=i % 2 == 0)
    rec.stop(56.0)
    d = rec.to_dict()
    back = RunRecorder.from_dict(json.loads(json.dumps(d)))
    assert back.to_dict() == d
    # and a loaded run merges like a live one
    back.merge(RunRecorder.from_dict(d))
    d2 = back.to_dict()
    assert d2["requests"] == 2 * d["requests"]
    assert d2["metrics"]["e2e_ms"]["p99"] == d["metrics"]["e2e_ms"]["p99"]
    with pytest.raises(ResultsError):
        RunRecorder.from_dict({"target": {}, "load": {}})


def _run(name: str, c: int, p99_e2e: float | None, p99_ttft: float, tok: float, rps: float) -> Run:
    def m(p99: float | None, mean: float | None = None) -> Stats:
        return Stats(p50=p99, p90=p99, p95=p99, p99=p99, max=p99, mean=mean, count=1)

    return Run(
        target=Target(name=name),
        load=Load(mode="closed", concurrency=c),
        requests=1,
        successes=1,
        errors={},
        metrics={"e2e_ms": m(p99_e2e), "ttft_ms": m(p99_ttft), "output_tokens_per_s": m(tok, tok)},
        throughput=Throughput(req_per_s=rps, output_tokens_per_s=rps * 10),
        tokens=Tokens(output=0),
        histograms={},
        error_rate=0.0,
    )


def test_decay_table() -> None:
    runs = [
        _run("a", 1, 1000.0, 200.0, 50.0, 1.0),
        _run("b", 10, 3000.0, 900.0, 20.0, 8.0),  # b has no concurrency-1 run: skipped
        _run("a", 50, 2500.0, 1000.0, 25.0, 40.0),
        _run("a", 10, 1500.0, 300.0, 40.0, 9.0),
        msgspec.structs.replace(_run("a", 1, 1.0, 1.0, 1.0, 1.0), load=Load(mode="open", rate=5.0), metrics={}),
    ]
    rows = decay_table(runs)
    assert [(r.target, r.concurrency) for r in rows] == [("a", 1), ("a", 10), ("a", 50)]
    assert rows[0].p99_e2e_ratio == 1.0
    assert rows[1].p99_e2e_ratio == 1.5
    assert rows[2].p99_e2e_ratio == 2.5
    assert rows[2].p99_ttft_ratio == 5.0
    assert rows[2].mean_tok_s_ratio == 0.5
    assert rows[2].req_per_s == 40.0
    assert rows[2].output_tokens_per_s_ratio == 40.0
    assert decay_table([runs[1]]) == []
    assert decay_table([]) == []
    # a baseline with no samples gives null ratios, not a division by zero
    empty_base = [_run("c", 1, None, 0.0, 50.0, 1.0), _run("c", 2, 10.0, 5.0, 50.0, 2.0)]
    rows = decay_table(empty_base)
    assert rows[1].p99_e2e_ratio is None
    assert rows[1].p99_ttft_ratio is None


def test_describe_load() -> None:
    assert describe_load(CLOSED) == "closed c=4"
    assert describe_load(OPEN) == "open 10/s poisson"
    assert describe_load(Load(mode="stage", stage=2, from_=10, to=50)) == "stage 2 10→50"


def _document(tmp: Path) -> BenchDocument:
    runs = []
    for c in (1, 4):
        rec = RunRecorder(TARGET, Load(mode="closed", concurrency=c))
        rec.start(0.0)
        for i in range(20):
            rec.add(ok(10.0 * c, 100.0 * c + i, tokens=11), t_done=i / 10)
        rec.add(fail("cut", detail="stream ended early"), t_done=1.0)
        rec.stop(2.0)
        runs.append(rec.to_run())
    runs.append(RunRecorder(TARGET, OPEN).to_run())  # an empty run: nulls in CSV
    return build_document(runs, command=["tailgate", "bench", "--concurrency", "1,4"], started_at=1.7e9)


def test_json_write_and_load(tmp_path: Path) -> None:
    doc = _document(tmp_path)
    assert doc.schema == SCHEMA == "tailgate.bench/v1"
    assert [r.concurrency for r in doc.decay] == [1, 4]
    assert doc.thresholds == []
    assert doc.thresholds_passed is None
    path = tmp_path / "results.json"
    write_json(doc, path)
    text = path.read_text()
    assert '"buckets":[' in text  # histograms kept compact
    back = load_document(path)
    assert back == doc
    merged = RunRecorder.from_run(back.runs[0])
    assert merged.requests == 21


def test_csv_write(tmp_path: Path) -> None:
    doc = _document(tmp_path)
    path = tmp_path / "results.csv"
    write_csv(doc, path)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    first = rows[0]
    for col in ("target", "load", "requests", "successes", "error_rate", "req_per_s", "output_tokens_per_s"):
        assert col in first
    for m in ("ttft_ms", "e2e_ms", "itl_ms", "tpot_ms", "output_tokens_per_s"):
        for s in ("p50", "p90", "p95", "p99", "max", "mean"):
            assert f"{m}_{s}" in first
    assert first["target"] == "a"
    assert first["load"] == "closed c=1"
    assert first["requests"] == "21"
    assert first["errors_cut"] == "1"
    assert float(first["e2e_ms_max"]) == 119.0
    assert float(first["req_per_s"]) == 10.0
    assert rows[2]["e2e_ms_p50"] == ""  # null, not 0


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"schema": "tailgate.bench/v2", "runs": []}', "v2.*not supported.*tailgate.bench/v1"),
        ('{"schema": "something/v1", "runs": []}', "not a tailgate bench results"),
        ('{"runs": []}', "not a tailgate bench results"),
        ("[1, 2]", "not a tailgate bench results"),
        ("{not json", "not JSON"),
        ('{"schema": "tailgate.bench/v1", "runs": {}}', "runs"),
        ('{"schema": "tailgate.bench/v1", "runs": [{"target": {}}]}', r"runs\[0\]\.load"),
    ],
)
def test_load_document_rejects(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(ResultsError, match=match):
        load_document(path)


def test_load_document_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="cannot read"):
        load_document(tmp_path / "nope.json")
