"""Rate-limit honesty on a simulator limited to 20 requests/s per key (the field notes' provider)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from bench_support import as_json
from rich.console import Console

from conftest import MockProcess, ThreadedSim
from tailgate.bench.command import BenchOptions, run_bench
from tailgate.bench.ratelimit import LimitSpec, admitted_per_s, assess, find_limit
from tailgate.bench.results import RunRecorder
from tailgate.bench.schema import LimitEntry, Load, Run, Target
from tailgate.upstream.events import CallResult


def _bench(tmp_path: Path, url: str, *args: str, **kw: Any) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "r.json"
    console = Console(record=True, width=200)
    opts = BenchOptions.from_flags(base_url=url, model="m", out=out, command=["tailgate", "bench", *args], **kw)
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = run_bench(opts, console)
    text = buf.getvalue() + console.export_text()
    return code, json.loads(out.read_text()), text


@pytest.mark.timeout(60)
def test_a_rate_limited_run_is_flagged_with_the_limit(tmp_path: Path, threaded_sim: Callable[..., ThreadedSim]) -> None:
    """Offered 40 req/s against 20 req/s per key: the run is flagged, the limit reported within ±10 %,
    refused latency kept apart, and the x-ratelimit-* headers read."""
    sim = threaded_sim("instant", faults={"rate_limit_rps": 20})
    code, doc, text = _bench(tmp_path, sim.url, rate=40.0, duration="4s", warmup="1s", max_tokens=4)
    assert code == 0
    [flag] = doc["rate_limits"]
    assert 18.0 <= flag["per_s"] <= 22.0, flag
    assert flag["flag"].startswith("rate-limited above ~")
    assert "measure the limiter, not the service" in flag["flag"]
    assert flag["limit_requests_header"] == 20.0
    assert flag["retry_after_s_max"] is not None
    assert flag["retry_after_s_max"] > 0
    assert any("rate-limited above ~" in n for n in doc["notes"])
    assert "rate-limited above ~" in text
    assert "measure the limiter" in text
    [run] = doc["runs"]
    assert run["errors"]["rate_limited"] > 0
    assert run["rate_limit"]["refused"] == run["errors"]["rate_limited"]
    assert run["rate_limit"]["refused_ms"]["count"] == run["errors"]["rate_limited"]
    assert run["metrics"]["e2e_ms"]["count"] == run["successes"]  # admitted only
    assert run["rate_limit"]["headers"]["limit-requests"] == "20"


@pytest.mark.timeout(60)
def test_find_limit_ramps_until_refused_and_reports_rpm(
    tmp_path: Path, threaded_sim: Callable[..., ThreadedSim]
) -> None:
    """--find-limit ramps the rate; the first step refused reports ~20 req/s (RPM ~1,200) within ±10 %."""
    sim = threaded_sim("instant", faults={"rate_limit_rps": 20})
    code, doc, text = _bench(
        tmp_path, sim.url, find_limit=True, find_start=15.0, duration="3s", warmup="1s", max_tokens=4, limit_cap=400
    )
    assert code == 0
    [lim] = doc["limits"]
    assert lim["found"], lim
    assert 18.0 <= lim["per_s"] <= 22.0, lim
    assert 1080 <= lim["rpm"] <= 1320
    assert lim["rates_tried"][0] == 15.0
    assert lim["refused_at_offered_per_s"] > 20
    assert lim["requests_sent_max"] <= 400
    assert "rate limit:" in text


async def test_find_limit_never_passes_its_safety_cap() -> None:
    """A provider that never refuses: the ramp stops at the cap of requests, not at the ceiling."""
    offered: list[tuple[float, float]] = []

    async def run_rate(rate: float, seconds: float) -> Run:
        offered.append((rate, seconds))
        rec = RunRecorder(Target(name="t"), Load(mode="open", rate=rate))
        rec.start(0.0)
        for _ in range(int(rate * seconds)):
            rec.add(CallResult(status=200, error_class=None, started_at=0.0, stream=False, e2e_ms=1.0), t_done=0.1)
        rec.stop(seconds)
        return rec.to_run()

    runs, found = await find_limit(LimitSpec(start=10, factor=2, cap=300, step_s=5, warmup_s=1), run_rate)
    [entry] = as_json([found])
    sent = sum(int(r * (s + 1)) + 1 for r, s in offered)
    assert sent <= 300
    assert not entry["found"]
    assert "safety cap" in entry["note"]
    assert entry["requests_sent_max"] == sent


def test_assess_ignores_runs_without_429() -> None:
    """No 429, no flag; the admitted rate of a limited run is its steady state, not its first burst."""
    rec = RunRecorder(Target(name="a"), Load(mode="closed", concurrency=50))
    rec.start(0.0)
    for s in range(6):
        for _ in range(40 if s == 0 else 20):
            rec.add(CallResult(status=200, error_class=None, started_at=0.0, stream=False, e2e_ms=1.0), t_done=s + 0.5)
        for _ in range(30):
            rec.add(CallResult(status=429, error_class="rate_limited", started_at=0.0, stream=False), t_done=s + 0.5)
    rec.stop(6.0)
    run = rec.to_run()
    assert admitted_per_s(run) == 20.0
    clean = RunRecorder(Target(name="b"), Load(mode="open", rate=5)).to_run()
    opened = msgspec.structs.replace(run, load=Load(mode="open", rate=50.0))
    assert admitted_per_s(opened) == round(50.0 * (run.requests - run.errors["rate_limited"]) / run.requests, 3)
    [flag] = assess([run, clean])
    assert flag.target == "a"
    assert flag.per_s == 20.0


@pytest.mark.timing  # a measured req/s within ±5 % of the bucket's: a starved client measures late
@pytest.mark.timeout(90)
@pytest.mark.parametrize("headers", [True, False], ids=["headers", "no-headers"])
def test_find_limit_prints_the_stated_limit_beside_the_measured_one(
    tmp_path: Path, threaded_sim: Callable[..., ThreadedSim], headers: bool
) -> None:
    """`tailgate bench --find-limit` on a 10 req/s bucket: one line with the answer, the measured rate (±5 %),
    the stated limit when the provider sends x-ratelimit-* headers, and which one to trust."""
    sim = threaded_sim("instant", faults={"rate_limit_rps": 10, "rate_limit_headers": headers})
    code, doc, text = _bench(
        tmp_path, sim.url, find_limit=True, find_start=7.0, duration="2s", warmup="0.5s", max_tokens=4, limit_cap=2000
    )
    assert code == 0
    [lim] = doc["limits"]
    assert lim["found"], lim
    assert 9.5 <= lim["per_s"] <= 10.5, lim
    if headers:
        assert "stated 10/s = 10.0 req/s (x-ratelimit-limit-requests)" in lim["summary"]
        assert lim["summary"].startswith("limit ~10.0 req/s (header): ")
        assert "trust the header" in lim["summary"]
    else:
        assert "no x-ratelimit-limit-requests header" in lim["summary"]
        assert lim["summary"].startswith(f"limit ~{lim['per_s']:.1f} req/s (measured): ")
    assert "rate limit: limit ~" in text


@pytest.mark.timing  # measured req/s within ±5 % of four buckets at once (measured 21.0 of 20 beside 3 workers)
@pytest.mark.timeout(90)
def test_find_limit_answers_within_5_percent_of_every_bucket(mock_process: Callable[..., MockProcess]) -> None:
    """--find-limit (short steps) against token buckets of 5, 10, 20 and 50 req/s per key, with and without
    x-ratelimit-* headers, all at once: the measured rate is within ±5 % of each limit (the steady state
    after the first 429, not the burst), the stated limit is read exactly, and the right one is trusted.

    Each limiter is its own ``tailgate mock`` process: in this process's threads the eight load generators held
    the GIL while requests waited to reach their limiter, which then admitted a late burst (54.4 of 50 req/s
    measured in a full parallel run)."""
    import asyncio

    import aiohttp

    from tailgate.bench.runner import TargetSpec
    from tailgate.bench.searches import run_find_limit
    from tailgate.bench.workload import LengthDist, Workload

    cases = [(limit, headers) for limit in (5, 10, 20, 50) for headers in (True, False)]
    sims = [mock_process("--preset", "instant", "--port", "0") for _ in cases]

    async def main() -> list[dict[str, Any]]:
        stop = asyncio.Event()
        async with aiohttp.ClientSession() as session:
            for (limit, headers), sim in zip(cases, sims, strict=True):
                faults = {"rate_limit_rps": limit, "rate_limit_headers": headers}
                async with session.post(sim.url.removesuffix("/v1") + "/sim/faults", json=faults) as resp:
                    assert resp.status == 200, await resp.text()

        async def one(limit: int, url: str) -> LimitEntry:
            workload = Workload(input_tokens=LengthDist(8), max_tokens=4, stream=True)
            spec = LimitSpec(start=0.7 * limit, step_s=2.0, warmup_s=0.5, cap=2000)
            _, [entry] = await run_find_limit([TargetSpec(f"b{limit}", url, "m")], workload, spec, stop)
            return entry

        return as_json(await asyncio.gather(*(one(lim, s.url) for (lim, _), s in zip(cases, sims, strict=True))))

    entries = asyncio.run(main())
    for (limit, headers), lim in zip(cases, entries, strict=True):
        assert lim["found"], lim
        assert abs(lim["per_s"] - limit) <= 0.05 * limit, (limit, headers, lim["summary"])
        assert lim["steady_admitted"] >= 20, lim
        if headers:
            assert (lim["header"]["per_s"], lim["header"]["period_s"]) == (limit, 1.0)
            assert (lim["trust"], lim["answer_per_s"]) == ("header", limit)
        else:
            assert lim["header"] is None
            assert (lim["trust"], lim["answer_per_s"]) == ("measured", lim["per_s"])


def test_header_rate_reads_the_period_from_the_reset_header() -> None:
    """x-ratelimit-limit-requests has no unit: the reset time at remaining 0 tells a second from a minute."""
    from tailgate.bench.ratelimit import header_rate, verdict

    per_s = header_rate({"limit-requests": "10", "remaining-requests": "0", "reset-requests": "970ms"})
    assert per_s is not None
    assert (per_s.period_s, per_s.per_s) == (1.0, 10.0)
    per_min = header_rate({"limit-requests": "600", "remaining-requests": "0", "reset-requests": "59s"})
    assert per_min is not None
    assert (per_min.period_s, per_min.per_s) == (60.0, 10.0)
    bare = header_rate({"limit-requests": "1200"})
    assert bare is not None
    assert bare.per_s == 20.0
    assert "OpenAI's convention" in bare.how
    assert header_rate({}) is None
    assert verdict(10.2, per_s)[0] == "header"
    assert verdict(7.0, per_s)[:2] == ("measured", 7.0)
    assert verdict(7.0, None)[0] == "measured"
