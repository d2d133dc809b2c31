"""Measurement truth: what `tailgate bench` reports against what the simulator itself timed."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
from bench_support import as_json

from conftest import MockProcess
from loop_lateness import LoopLateness, sim_step_lateness_p99
from sim_truth import truth as sim_truth
from tailgate.bench.loadgen import Bounds
from tailgate.bench.runner import Plan, TargetSpec, run_plan
from tailgate.bench.workload import LengthDist, Workload
from tailgate.stats import LatencyHistogram

T = TypeVar("T")


def on_uvloop(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run on uvloop, as `tailgate bench` itself does (tailgate._runtime.run), not pytest's default loop."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())


def _pcts(values: list[float]) -> dict[int, float]:
    h = LatencyHistogram()
    h.record_many(values)
    return {q: h.percentile(q) for q in (50, 90, 99)}


def _assert_close(
    reported: dict[str, Any], truth: dict[int, float], what: str, unseen: float = 0.0, loop_late_ms: float = 0.0
) -> None:
    """Each percentile within max(1 ms, 2%) of the truth; with ``unseen`` > 0, bench may also run late by that share.

    ``loop_late_ms`` (the most the client's loop and the simulator's loop were late in this run, measured beside it:
    :class:`LoopLateness`, the simulator's step lateness) widens the late side and the shape check: a client that
    wakes late sees an event late, never early, and a delay of at most D moves any percentile by at most D (so its
    distance from the median by at most D); the early side stays strict. On a quiet machine D is a few ms.

    ``unseen`` is for a level that loads the machine: when the simulator is short of CPU a request waits in its
    socket before the handler starts, time the client rightly counts and the server's truth cannot see. That
    wait shifts every percentile alike, so the bench must still never be early, and the distribution's shape
    (each percentile's distance from the median) must still match within the strict tolerance.
    """
    tol = {q: max(1.0, 0.02 * truth[q]) for q in (50, 90, 99)}
    for q in (50, 90, 99):
        got, want = reported[f"p{q}"], truth[q]
        late = unseen * want + loop_late_ms
        assert -tol[q] <= got - want <= tol[q] + late, f"{what} p{q}: bench {got:.2f} ms vs truth {want:.2f} ms"
    for q in (90, 99):
        got, want = reported[f"p{q}"] - reported["p50"], truth[q] - truth[50]
        assert abs(got - want) <= tol[q] + loop_late_ms, f"{what} p{q}-p50: bench {got:.2f} ms vs truth {want:.2f} ms"


def _late_ms(client: LoopLateness, sim_max_ms: float) -> float:
    """The most a request's measured latency can exceed its truth by lateness alone, in this run: the client's loop
    at its latest (it reads the event late) plus the simulator's loop at its latest (a starved server leaves the
    request in its socket, unseen by its truth, about as long as its decode steps end late). A loaded machine
    (CI's other workers, a CPU burner) moved the 500-stream P90 a whole second late, past a P99-based bound."""
    return 1000.0 * client.max_s + sim_max_ms


def _workload(max_tokens: int) -> Workload:
    return Workload(input_tokens=LengthDist(16), max_tokens=max_tokens, stream=True)


@pytest.mark.timing
@pytest.mark.timeout(90)
@pytest.mark.parametrize("concurrency", [1, 50, 500])
def test_closed_loop_percentiles_match_truth(mock_process: Callable[..., MockProcess], concurrency: int) -> None:
    """Closed loop at 1, 50 and 500 concurrent: TTFT and E2E P50/P90/P99 within max(1 ms, 2%) of truth.

    At 500 the bench may also be up to 5% late (time in the starved simulator's socket, see _assert_close).
    """

    async def main() -> None:
        # At 500 the preset runs at half speed (--time-scale 2): the same 500 streams at once, at half the request
        # rate, so the 2-core machine measures the bench rather than its own contention.
        scale = "2" if concurrency >= 500 else "1"
        mp = mock_process("--preset", "provider-a", "--port", "0", "--seed", "3", "--time-scale", scale)
        spec = TargetSpec("sim", mp.url, "m")
        # One closed-loop level with a warm-up (excluded) in which the workers start spread out.
        duration, warmup = {1: (2.0, 2.0), 50: (3.0, 2.0), 500: (4.0, 3.0)}[concurrency]
        bounds = Bounds(duration=duration, warmup=warmup)
        plan = Plan("closed", bounds, levels=(concurrency,))
        async with LoopLateness() as loop_late:
            run = as_json(await run_plan([spec], _workload(4), plan, asyncio.Event()))[0]
        requests = run["requests"]
        assert requests >= {1: 2, 50: 100, 500: 800}[concurrency]
        assert run["successes"] == requests
        # Counted requests are those that completed after the warm-up: the last ones in the truth.
        truth = [r for r in await sim_truth(mp.url) if r["status"] == 200][-requests:]
        # 500 streams on a 2-core CI machine starve the simulator at times (CI once saw bench 15 ms = 2.0% late
        # at P50); allow that unseen socket wait, up to 5%, at this level only. Shape and "never early" stay strict.
        unseen = 0.05 if concurrency >= 500 else 0.0
        late_ms = _late_ms(loop_late, await sim_step_lateness_p99(mp.url, "max"))
        _assert_close(run["metrics"]["ttft_ms"], _pcts([r["ttft_ms"] for r in truth]), "TTFT", unseen, late_ms)
        _assert_close(run["metrics"]["e2e_ms"], _pcts([r["e2e_ms"] for r in truth]), "E2E", unseen, late_ms)
        # ITL is pooled per gap (3 gaps per 4-token request), not a per-request mean.
        assert run["metrics"]["itl_ms"]["count"] == 3 * requests

    on_uvloop(main)


@pytest.mark.timing
@pytest.mark.timeout(90)
def test_open_loop_percentiles_match_truth(mock_process: Callable[..., MockProcess]) -> None:
    """Open loop at 100 req/s (~110 in flight): latency from intended send matches truth within max(1 ms, 2%)."""

    async def main() -> None:
        mp = mock_process("--preset", "provider-a", "--port", "0", "--seed", "4")
        spec = TargetSpec("sim", mp.url, "m")
        plan = Plan("open", Bounds(duration=4.0, warmup=0.0), rate=100.0)
        async with LoopLateness() as loop_late:
            run = as_json(await run_plan([spec], _workload(4), plan, asyncio.Event()))[0]
        truth = [r for r in await sim_truth(mp.url) if r["status"] == 200]
        assert run["requests"] == run["successes"] == len(truth) >= 370
        # The generator kept its schedule: late by no more than 20 ms beyond what the loop itself was late.
        assert run["metrics"]["schedule_lag_ms"]["p99"] < 20.0 + loop_late.p99, (run["metrics"], loop_late.p99)
        late_ms = _late_ms(loop_late, await sim_step_lateness_p99(mp.url, "max"))
        _assert_close(run["metrics"]["ttft_ms"], _pcts([r["ttft_ms"] for r in truth]), "TTFT", loop_late_ms=late_ms)
        _assert_close(run["metrics"]["e2e_ms"], _pcts([r["e2e_ms"] for r in truth]), "E2E", loop_late_ms=late_ms)

    on_uvloop(main)


@pytest.mark.timing
@pytest.mark.timeout(60)
def test_open_loop_shows_a_server_stall_closed_loop_would_hide(mock_process: Callable[..., MockProcess]) -> None:
    """The simulator freezes for 2 s mid-run: open-loop P99 shows it (latency from intended send); lag stays small."""

    async def main() -> None:
        mp = mock_process("--preset", "instant", "--port", "0")
        spec = TargetSpec("sim", mp.url, "m")
        plan = Plan("open", Bounds(duration=6.0, warmup=0.0), rate=50.0)
        async with LoopLateness() as loop_late:
            task = asyncio.create_task(run_plan([spec], _workload(4), plan, asyncio.Event()))
            await asyncio.sleep(2.0)
            mp.proc.send_signal(signal.SIGSTOP)  # a real stall: the whole server process stops
            await asyncio.sleep(2.0)
            mp.proc.send_signal(signal.SIGCONT)
            run = as_json(await task)[0]
        # The client's loop at its latest (not the simulator's: its steps were late by the 2 s freeze itself).
        late_ms = 1000.0 * loop_late.max_s
        e2e = run["metrics"]["e2e_ms"]
        assert run["successes"] == run["requests"] >= 280
        # ~100 of ~300 requests were due during the stall: P90 and P99 carry it, the median does not.
        assert e2e["p99"] > 1500.0, e2e
        assert e2e["p90"] > 500.0, e2e
        assert e2e["p50"] < 100.0 + late_ms, (e2e, late_ms)
        # The generator itself stayed on schedule (as far as its loop let it): the latency was the server's. One
        # stall of this loop delays every request due during it (at 50/s a 150 ms stall is 2 % of the run: the
        # P99), so the bound is the loop's worst lateness, measured beside it; a generator that waited for the
        # frozen server (closed-loop behaviour) lags by the 2 s freeze and still fails.
        worst_ms = 1000.0 * loop_late.max_s
        lag = run["metrics"]["schedule_lag_ms"]
        assert lag["p99"] < 50.0 + worst_ms, (lag, worst_ms)

    on_uvloop(main)
