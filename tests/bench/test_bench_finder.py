"""The capacity finder's pure parts: the search order, repeats near the boundary, the knee, goodput."""

from __future__ import annotations

import random

import pytest
from bench_support import as_json

from tailgate.bench.finder import FindSpec, Search, find_max, knee
from tailgate.bench.goodput import SLO, GoodputError
from tailgate.bench.results import RunRecorder
from tailgate.bench.schema import Load, Run, Target
from tailgate.bench.thresholds import parse_threshold
from tailgate.upstream.events import CallResult


def _ok(ttft: float, e2e: float, out: int = 10) -> CallResult:
    return CallResult(
        status=200,
        error_class=None,
        started_at=0.0,
        stream=True,
        ttft_ms=ttft,
        e2e_ms=e2e,
        output_tokens=out,
        tokens_estimated=False,
    )


def _run(level: float, ttft: float, n: int = 20, name: str = "t") -> Run:
    rec = RunRecorder(Target(name=name, base_url="http://x/v1", model="m"), Load(mode="closed", concurrency=int(level)))
    rec.start(0.0)
    for _ in range(n):
        rec.add(_ok(ttft, ttft + 100.0), t_done=0.5)
    rec.stop(1.0)
    return rec.to_run()


def _drive(spec: FindSpec, boundary: float) -> tuple[Search, list[float]]:
    search = Search(spec)
    seen = []
    while (level := search.next_level()) is not None:
        seen.append(level)
        search.record(level, level <= boundary)
        assert len(seen) < 50
    return search, seen


def test_search_grows_then_bisects_to_one_step() -> None:
    """Grow ×2 until a failure, then bisect until the bracket is one step wide; the answer is the last pass."""
    spec = FindSpec((parse_threshold("p90(ttft)<1s"),), "concurrency", start=1, ceiling=1024)
    search, seen = _drive(spec, boundary=16)
    assert seen[:6] == [1, 2, 4, 8, 16, 32]
    assert search.lo == 16
    assert search.hi == 17
    assert search.step_at_answer == 1


@pytest.mark.parametrize("boundary", [3, 37, 100, 383, 700])
def test_search_brackets_any_boundary(boundary: int) -> None:
    """Whatever the boundary, the answer passes, the failure is above it, and the bracket is within one step."""
    spec = FindSpec((parse_threshold("p90(ttft)<1s"),), "concurrency", start=1, ceiling=1024, precision=0.1)
    search, _ = _drive(spec, boundary)
    assert search.lo is not None
    assert search.hi is not None
    assert search.lo <= boundary < search.hi
    assert search.hi - search.lo <= spec.step(search.lo)


def test_search_by_rate_and_edges() -> None:
    """Rates bisect to fractions; a first failure gives no answer; a held ceiling ends the search."""
    spec = FindSpec((parse_threshold("p90(ttft)<1s"),), "rate", start=5, ceiling=200, precision=0.05)
    search, _ = _drive(spec, 23.4)
    assert search.lo is not None
    assert search.hi is not None
    assert search.lo <= 23.4 < search.hi
    assert search.hi - search.lo <= max(0.5, 0.05 * search.lo)
    search, seen = _drive(FindSpec((), "concurrency", start=4, ceiling=64), boundary=1)
    assert (search.lo, search.hi) == (1, 2)  # a failing start is bisected downwards
    search, seen = _drive(FindSpec((), "concurrency", start=4, ceiling=64), boundary=0)
    assert search.lo is None
    assert search.hi == 1
    search, seen = _drive(FindSpec((), "concurrency", start=1, ceiling=64), boundary=10_000)
    assert search.lo == 64
    assert search.hi is None
    assert seen[-1] == 64


async def test_near_levels_are_repeated_and_the_majority_decides() -> None:
    """A level whose value lies within the margin is run again; one noisy run does not decide it."""
    th = parse_threshold("p90(ttft)<1000ms")
    spec = FindSpec((th,), "concurrency", start=1, ceiling=64, repeats=3, margin=0.1)
    calls: dict[float, int] = {}

    async def level(x: float) -> Run:
        calls[x] = calls.get(x, 0) + 1
        if x == 8:  # near the limit: the first try is unlucky, the next two pass
            return _run(x, 1050.0 if calls[x] == 1 else 950.0)
        return _run(x, 100.0 if x < 8 else 5000.0)

    runs, found = await find_max(spec, level)
    cap = as_json([found])[0]
    assert calls[8] == 3
    assert calls[4] == 1
    assert calls[16] == 1
    assert cap["answer"] == 8
    point = next(p for p in cap["curve"] if p["level"] == 8)
    assert point["repeats"] == 3
    assert point["req_per_s"] == 20.0  # pooled over the three 1 s windows, not over the span between them
    assert point["passed"]
    assert len(runs) == sum(calls.values()) == len(cap["runs"])
    assert "holds up to 8" in cap["summary"]


def test_knee_is_where_latency_turns_up() -> None:
    """The knee is the last level before the latency curve bends upward; a straight line has none."""
    curve = [(1, 100.0), (2, 101.0), (4, 102.0), (8, 104.0), (16, 110.0), (24, 400.0), (32, 900.0)]
    assert knee(curve) == 16
    assert knee([(1, 1.0), (2, 2.0), (3, 3.0)]) is None
    assert knee([(1, 1.0), (2, 2.0)]) is None


def test_goodput_counts_requests_within_every_slo() -> None:
    """vLLM's goodput: a request is good when it succeeded and every named value is within its limit."""
    slo = SLO.parse("ttft:1s,e2e:5000")
    assert dict(slo.limits) == {"ttft_ms": 1000.0, "e2e_ms": 5000.0}
    assert slo.met(_ok(900.0, 4000.0))
    assert not slo.met(_ok(1100.0, 4000.0))
    assert not slo.met(_ok(900.0, 4000.0), lag_ms=200.0)  # open loop: from the intended send time
    assert not slo.met(CallResult(status=500, error_class="http_5xx", started_at=0.0, stream=True))
    rec = RunRecorder(Target(name="t"), Load(mode="closed", concurrency=1))
    rec.slo = slo
    rec.start(0.0)
    for ttft in (100.0, 200.0, 1500.0, 300.0):
        rec.add(_ok(ttft, 2000.0), t_done=0.1)
    rec.stop(2.0)
    d = rec.to_dict()
    assert d["goodput"]["good"] == 3
    assert d["goodput"]["req_per_s"] == 1.5
    back = RunRecorder.from_dict(d)
    back.merge(RunRecorder.from_dict(d))
    assert back.to_dict()["goodput"]["good"] == 6
    for bad in ("ttft", "latency:1s", "ttft:soon", "ttft:0"):
        with pytest.raises(GoodputError, match="--goodput"):
            SLO.parse(bad)


def test_search_is_deterministic_under_noise() -> None:
    """A noisy but monotone verdict still yields a bracket that contains the true boundary's neighbourhood."""
    rng = random.Random(3)
    spec = FindSpec((), "concurrency", start=1, ceiling=512, precision=0.1)
    search = Search(spec)
    while (level := search.next_level()) is not None:
        search.record(level, level + rng.uniform(-2, 2) <= 200)
    assert search.lo is not None
    assert search.hi is not None
    assert 190 <= search.lo <= 202
    assert search.hi > search.lo


async def test_the_report_plots_the_curve_walked() -> None:
    """The HTML report gets a capacity section: the answer, the curve as SVG charts and a table, escaped."""
    from tailgate.bench.document import build_document
    from tailgate.bench.report import render_html

    th = parse_threshold("p90(ttft)<1000ms")

    async def level(x: float) -> Run:
        return _run(x, 100.0 * x, name="<b>evil</b>")

    runs, found = await find_max(FindSpec((th,), "concurrency", start=1, ceiling=64, repeats=1), level)
    doc = build_document(runs, command=["tailgate", "bench"], started_at=0.0)
    doc.capacity = [found]
    cap = as_json([found])[0]
    html = render_html(doc)
    assert "<h2>Capacity</h2>" in html
    assert html.count('class="chart') >= 2 + 1
    assert "<b>evil</b>" not in html
    assert "&lt;b&gt;evil&lt;/b&gt;" in html
    assert cap["answer"] == 9
    assert "holds up to 9" in html


def _open_run(rate: float, done_per_s: int, seconds: int = 8) -> Run:
    rec = RunRecorder(Target(name="t"), Load(mode="open", rate=rate, arrival="constant"))
    rec.start(0.0)
    for s in range(seconds):
        for _ in range(done_per_s):
            rec.add(_ok(100.0, 200.0), t_done=s + 0.5)
    rec.stop(float(seconds))
    return rec.to_run()


async def test_by_rate_a_level_that_falls_behind_fails() -> None:
    """Open loop past the service rate: the queue grows for as long as the level lasts, so a level whose
    provider finishes fewer requests per second than offered fails even when its percentiles pass."""
    th = parse_threshold("p90(e2e)<3s")
    spec = FindSpec((th,), "rate", start=50, ceiling=400, precision=0.05)

    async def level(x: float) -> Run:
        return _open_run(x, int(min(x, 120.0)))  # serves at most 120 req/s; latency stays low in the window

    _, found = await find_max(spec, level)
    cap = as_json([found])[0]
    assert cap["answer"] is not None
    assert cap["failed_at"] is not None
    assert 114 <= cap["answer"] <= 126 < cap["failed_at"] + 7
    assert cap["service_rate_per_s"] == 120.0
    assert "its service rate" in cap["summary"]
