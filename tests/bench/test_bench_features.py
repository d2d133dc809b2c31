"""`tailgate bench` features: A/B targets, stages, workers, accuracy, --provider, Ctrl-C, Poisson, errors, prompts."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench_support import as_json
from click.testing import CliRunner

from conftest import SimFactory, ThreadedSim, eventually
from tailgate.bench import alarm as alarm_module
from tailgate.bench import loadgen
from tailgate.bench.alarm import Alarm
from tailgate.bench.loadgen import Bounds
from tailgate.bench.results import RunRecorder
from tailgate.bench.runner import Plan, TargetSpec, apportion, parse_stages, run_plan, run_workers
from tailgate.bench.workload import LengthDist, RequestSpec, Workload, load_prompts
from tailgate.cli import main
from tailgate.sim.provider import SimProvider
from tailgate.sim.truth import TruthRecord
from tailgate.upstream import Endpoint, UpstreamClient


def _bench(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["bench", *args])
    return result.exit_code, result.output


def _workload(max_tokens: int = 4, **kwargs: Any) -> Workload:
    return Workload(input_tokens=LengthDist(16), max_tokens=max_tokens, stream=True, **kwargs)


def _closed(concurrency: int, **bounds: Any) -> Plan:
    return Plan("closed", Bounds(**{"duration": None, "warmup": 0.0, **bounds}), levels=(concurrency,))


def _spec(name: str, provider: SimProvider) -> TargetSpec:
    return TargetSpec(name, provider.url, "m")


def _truth(ts: ThreadedSim) -> list[TruthRecord]:
    async def get() -> list[TruthRecord]:
        return ts.provider.truth.records()

    return ts.call(get())


# -- 1. A/B interleaving --------------------------------------------------------------------------


async def test_ab_targets_each_get_the_level_and_their_own_run(sim: SimFactory) -> None:
    """Two targets in one run: ``--requests 20`` is per target, each run names its own target."""
    a, b = await sim("instant"), await sim("instant")
    runs = as_json(
        await run_plan([_spec("a", a), _spec("b", b)], _workload(), _closed(4, requests=20), asyncio.Event())
    )
    assert [r["target"]["name"] for r in runs] == ["a", "b"]
    assert [r["target"]["base_url"] for r in runs] == [a.url, b.url]
    assert [r["requests"] for r in runs] == [20, 20]
    assert [r["load"] for r in runs] == [{"mode": "closed", "concurrency": 4}] * 2
    # The simulators saw exactly that split (nothing else: no preflight here).
    assert len(a.truth.records()) == len(b.truth.records()) == 20


@pytest.mark.timeout(30)
async def test_slow_target_does_not_hold_back_the_fast_one(sim: SimFactory) -> None:
    """A slow target beside an instant one: sends interleave, and each target keeps its own level."""
    # The slow one waits ≈ 72 ms (pre-queue median) before its engine: a floor no machine can lower, so the
    # instant one stays several times faster even when this process is slowed down (busy machine, coverage);
    # held back by the slow one, both would send the same number.
    slow = await sim("provider-a", time_scale=0.1)
    fast = await sim("instant")
    specs = [_spec("slow", slow), _spec("fast", fast)]
    s, f = as_json(await run_plan(specs, _workload(), _closed(4, duration=1.0), asyncio.Event()))
    assert s["successes"] > 10
    assert f["successes"] > 2 * s["successes"]
    assert s["metrics"]["e2e_ms"]["p50"] > 2 * f["metrics"]["e2e_ms"]["p50"]
    # Interleaved in time: both simulators were busy over the same span, not one after the other.
    s_times = [r.received_at for r in slow.truth.records()]
    f_times = [r.received_at for r in fast.truth.records()]
    assert min(s_times) < max(f_times)
    assert min(f_times) < max(s_times)


@pytest.mark.timeout(30)
async def test_requests_bound_is_per_target_even_when_speeds_differ(sim: SimFactory) -> None:
    """``--requests 12`` with a slow and a fast target: each sends exactly 12 (the fast one no more)."""
    slow = await sim("provider-a", time_scale=0.03)
    fast = await sim("instant")
    specs = [_spec("slow", slow), _spec("fast", fast)]
    runs = as_json(await run_plan(specs, _workload(), _closed(2, requests=12), asyncio.Event()))
    assert [r["requests"] for r in runs] == [12, 12]
    assert [len(slow.truth.records()), len(fast.truth.records())] == [12, 12]


# -- 2. stages ------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
async def test_stages_ramp_concurrency(sim: SimFactory) -> None:
    """``1s:4,1s:8,1s:0``: three stage runs; the 4→8 stage sends more req/s than the 0→4 one."""
    # ≈ 75 ms per request, so throughput follows the number of users, not this process's CPU (which a busy
    # machine or coverage would make the limit at a few ms per request).
    p = await sim("provider-a", time_scale=0.1)
    plan = Plan("stages", Bounds(duration=None, warmup=0.0), stages=parse_stages("1s:4,1s:8,1s:0"))
    runs = as_json(await run_plan([_spec("sim", p)], _workload(), plan, asyncio.Event()))
    assert [r["load"]["mode"] for r in runs] == ["stage"] * 3
    assert [(r["load"]["from"], r["load"]["to"]) for r in runs] == [(0, 4), (4, 8), (8, 0)]
    assert all(r["errors"] == dict.fromkeys(r["errors"], 0) for r in runs)
    rps = [r["throughput"]["req_per_s"] for r in runs]
    assert rps[1] > 1.5 * rps[0], rps
    assert rps[2] < rps[1], rps


# -- 3. workers -----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_two_workers_merge_into_one_run_per_level(
    threaded_sim: Callable[..., ThreadedSim], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--workers 2`` at concurrency 8: one run, the exact sum of the two workers' runs (requests and every
    histogram), none of them more than the simulator answered.

    Asserted by structure, not by timing: the two spawned workers start a machine-dependent time apart, so
    which of the simulator's requests fall in a worker's warm-up cannot be told from the truth's clock (the
    0.5 s allowance this used failed on a loaded machine). The parts are taken where the parent merges them."""
    parts: list[dict[str, Any]] = []
    merge = RunRecorder.merge

    def spy(self: RunRecorder, other: RunRecorder) -> None:
        if not parts:
            parts.append(self.to_dict())
        parts.append(other.to_dict())
        merge(self, other)

    monkeypatch.setattr(RunRecorder, "merge", spy)
    ts = threaded_sim("instant", truth_size=200_000)
    plan = Plan("closed", Bounds(duration=1.0, warmup=0.3), levels=(8,))
    runs = as_json(run_workers([TargetSpec("sim", ts.url, "m")], _workload(), plan, 2))
    assert len(runs) == 1
    (run,) = runs
    assert run["load"] == {"mode": "closed", "concurrency": 8}
    assert len(parts) == 2  # one merge: the two workers' runs of the level
    assert all(p["requests"] == p["successes"] > 0 for p in parts)  # both workers sent and were counted
    assert run["requests"] == run["successes"] == sum(p["requests"] for p in parts)
    assert run["requests"] > 100
    for name in ("ttft_ms", "e2e_ms", "itl_ms"):
        assert run["metrics"][name]["count"] == sum(p["metrics"][name]["count"] for p in parts), name
    for name in ("ttft_ms", "e2e_ms"):
        assert run["metrics"][name]["count"] == run["requests"]
    assert run["metrics"]["itl_ms"]["count"] == 3 * run["requests"]  # 4 tokens → 3 gaps each
    # Every counted request is one the simulator answered (it also answered the warm-ups', not counted).
    ok = [r for r in _truth(ts) if r.status == 200]
    assert run["requests"] <= len(ok)


@pytest.mark.timeout(60)
def test_uneven_worker_split_still_merges(threaded_sim: Callable[..., ThreadedSim]) -> None:
    """Concurrency 1,3 over 2 workers (shares 1+0 and 2+1) merges to runs labelled 1 and 3."""
    ts = threaded_sim("instant")
    plan = Plan("closed", Bounds(duration=None, requests=20, warmup=0.0), levels=(1, 3))
    runs = as_json(run_workers([TargetSpec("sim", ts.url, "m")], _workload(), plan, 2))
    assert [r["load"]["concurrency"] for r in runs] == [1, 3]
    # level 1: only one worker has a share of it, and so all of its requests (it used to get half)
    assert runs[0]["requests"] == 20
    assert runs[1]["requests"] == 20


@pytest.mark.parametrize("workers", [2, 3, 5])
@pytest.mark.parametrize("requests", [1, 10, 101])
def test_requests_follow_the_concurrency_split(workers: int, requests: int) -> None:
    """Each level's ``--requests`` goes to the workers that got its concurrency, adding up to the total."""
    plan = Plan("closed", Bounds(duration=None, requests=requests, warmup=0.0), levels=(1, 3, 8))
    shares = [plan.share(workers, i) for i in range(workers)]
    for level_index, level in enumerate(plan.levels):
        concurrency = [s.levels[level_index] for s in shares]
        got = [s.bounds_for_level(level_index).requests for s in shares]
        assert sum(concurrency) == level
        assert sum(r or 0 for r in got) == requests
        assert all(r == 0 for c, r in zip(concurrency, got, strict=True) if c == 0)


def test_one_connection_over_two_workers_sends_all_requests_from_one() -> None:
    """The reported bug: ``--concurrency 1 --workers 2 --requests 10`` gave 5 requests to the idle worker."""
    plan = Plan("closed", Bounds(duration=None, requests=10, warmup=0.0), levels=(1,))
    a, b = plan.share(2, 0), plan.share(2, 1)
    assert (a.levels, a.bounds_for_level(0).requests) == ((1,), 10)
    assert (b.levels, b.bounds_for_level(0).requests) == ((0,), 0)
    # open loop: the rate is split evenly, so are the requests (they still add up)
    op = Plan("open", Bounds(duration=None, requests=11, warmup=0.0), rate=10)
    assert sorted(op.share(2, i).bounds.requests or 0 for i in range(2)) == [5, 6]


def test_apportion_adds_up() -> None:
    assert apportion(10, [1, 0]) == [10, 0]
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]
    assert apportion(7, [0, 0]) == [0, 0]
    assert apportion(5, [2, 1]) == [3, 2]


# -- 4. accuracy ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("accuracy", "pct"), [(1.0, 100.0), (0.0, 0.0)])
async def test_accuracy_is_reported(sim: SimFactory, accuracy: float, pct: float) -> None:
    """``--accuracy`` against a simulator that is always right (100 %) or always wrong (0 %)."""
    p = await sim("instant", engine={"accuracy": accuracy})
    runs = as_json(
        await run_plan([_spec("sim", p)], _workload(accuracy=True), _closed(4, requests=30), asyncio.Event())
    )
    assert runs[0]["successes"] == 30
    assert runs[0]["accuracy"] == {"right": int(30 * pct / 100), "total": 30, "pct": pct}


# -- 5. --provider / --config ---------------------------------------------------------------------

KEY = "sk-bench-provider-0123456789"


def _gateway_yaml(path: Path, url: str, key: str) -> Path:
    path.write_text(
        "providers:\n"
        f"  simp:\n    base_url: {url}\n    api_keys: [{key}]\n"
        "models:\n"
        "  alias:\n    routes:\n      - {provider: simp, model: up-model}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.timeout(30)
def test_provider_from_gateway_config(threaded_sim: Callable[..., ThreadedSim], tmp_path: Path) -> None:
    """``--provider simp --config FILE`` uses its base_url, key and routed model; a wrong key is refused."""
    ts = threaded_sim("instant", api_keys=(KEY,))
    config = _gateway_yaml(tmp_path / "gw.yaml", ts.url, KEY)
    out = tmp_path / "r.json"
    code, output = _bench(
        "--provider", "simp", "--config", str(config), "--concurrency", "2", "--requests", "10",
        "--duration", "0", "--warmup", "0", "--max-tokens", "4", "--out", str(out),
    )  # fmt: skip
    assert code == 0, output
    (run,) = json.loads(out.read_text())["runs"]
    assert run["target"]["name"] == "simp"
    assert run["target"]["model"] == "up-model"
    assert run["successes"] == run["requests"] == 10
    records = _truth(ts)
    assert len(records) == 11  # preflight + 10
    assert {r.status for r in records} == {200}

    wrong = _gateway_yaml(tmp_path / "wrong.yaml", ts.url, "sk-wrong-key-0123456789")
    code, output = _bench("--provider", "simp", "--config", str(wrong), "--requests", "2", "--duration", "0")
    assert code == 2, output
    assert "refused the API key (HTTP 401)" in output


@pytest.mark.timeout(60)
def test_shared_prefix_cost_ratio_from_the_price(threaded_sim: Callable[..., ThreadedSim], tmp_path: Path) -> None:
    """The shared-prefix workload's ``input_cost_ratio_all_hits`` prices a cached token by ``--price``, else by
    the ``--provider``'s ``price`` (cached_input ÷ input), else at the field notes' 20 %."""
    ts = threaded_sim("instant", api_keys=(KEY,))
    plain = _gateway_yaml(tmp_path / "gw.yaml", ts.url, KEY)
    priced = tmp_path / "priced.yaml"
    priced.write_text(
        plain.read_text(encoding="utf-8").replace(
            f"api_keys: [{KEY}]\n", f"api_keys: [{KEY}]\n    price: {{input: 2.0, cached_input: 0.5}}\n"
        ),
        encoding="utf-8",
    )

    def workload(config: Path, *price: str) -> dict[str, Any]:
        out = tmp_path / "r.json"
        code, output = _bench(
            "--provider", "simp", "--config", str(config), "--workload", "shared-prefix", "--prefix-tokens", "256",
            "--requests", "2", "--duration", "0", "--warmup", "0", "--max-tokens", "2", "--out", str(out), *price,
        )  # fmt: skip
        assert code == 0, output
        got: dict[str, Any] = json.loads(out.read_text())["workload"]
        return got

    for config, price, ratio, source in (
        (priced, (), 0.25, "provider"),
        (priced, ("--price", "input=4,cached_input=0.4"), 0.1, "--price"),
        (plain, (), 0.2, "default"),
    ):
        w = workload(config, *price)
        assert (w["cache_price_ratio"], w["cache_price_from"]) == (ratio, source)
        share = w["prefix_share"]
        assert w["input_cost_ratio_all_hits"] == pytest.approx(share * ratio + 1 - share, abs=1e-4)


def test_unknown_provider_lists_known_ones(tmp_path: Path) -> None:
    """``--provider`` naming nobody in the config: exit 2 listing the providers it has."""
    config = _gateway_yaml(tmp_path / "gw.yaml", "http://127.0.0.1:9/v1", KEY)
    code, output = _bench("--provider", "nobody", "--config", str(config), "--duration", "1s")
    assert code == 2, output
    flat = " ".join(output.split())
    assert "'nobody' is not in" in flat
    assert "(known: simp)" in flat


# -- 6. Ctrl-C ------------------------------------------------------------------------------------


@pytest.mark.timeout(40)
def test_ctrl_c_stops_promptly_and_writes_results(threaded_sim: Callable[..., ThreadedSim], tmp_path: Path) -> None:
    """SIGINT during a 30 s run: exit within 10 s, code 0, results.json with the requests made so far."""
    ts = threaded_sim("provider-a", time_scale=0.02)
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailgate", "bench", "--base-url", ts.url, "--model", "m", "--concurrency", "4",
         "--duration", "30s", "--warmup", "0.2s", "--max-tokens", "4", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while len(_truth(ts)) < 20 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(1.0)
        assert proc.poll() is None, "bench ended before Ctrl-C"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert elapsed < 10
    (run,) = json.loads(out.read_text())["runs"]
    assert run["requests"] > 0
    assert run["successes"] > 0
    assert run["throughput"]["duration_s"] < 20


# -- 7. open loop, Poisson ------------------------------------------------------------------------


@pytest.mark.timeout(30)
async def test_open_loop_poisson_rate(sim: SimFactory) -> None:
    """``--rate 50 --arrival poisson`` for 2 s: about 100 requests, schedule lag reported for each."""
    p = await sim("instant")
    plan = Plan("open", Bounds(duration=2.0, warmup=0.0), rate=50, arrival="poisson")
    (run,) = as_json(await run_plan([_spec("sim", p)], _workload(), plan, asyncio.Event()))
    assert run["load"] == {"mode": "open", "rate": 50, "arrival": "poisson"}
    assert 65 <= run["requests"] <= 135, run["requests"]
    lag = run["metrics"]["schedule_lag_ms"]
    assert lag["count"] == run["requests"]
    assert lag["p50"] is not None
    assert lag["p50"] >= 0


@pytest.mark.timeout(30)
async def test_open_loop_requests_bound_is_exact(sim: SimFactory) -> None:
    """``--rate 2000 --requests 50``: exactly 50 sent and counted, each with its lag from ``Sent``."""
    p = await sim("instant")
    plan = Plan("open", Bounds(duration=None, requests=50, warmup=0.0), rate=2000)
    (run,) = as_json(await run_plan([_spec("sim", p)], _workload(), plan, asyncio.Event()))
    assert run["requests"] == run["successes"] == 50
    assert run["metrics"]["schedule_lag_ms"]["count"] == 50


@pytest.mark.timeout(30)
async def test_open_loop_sends_every_scheduled_request_however_late_the_loop_wakes(sim: SimFactory) -> None:
    """``--rate 100`` for 0.1 s is 10 requests even when the loop is blocked past the end before any is due: the
    end is judged by each request's intended time, so a late loop sends the schedule late, never short."""
    p = await sim("instant")
    loop = asyncio.get_running_loop()
    loop.call_soon(time.sleep, 0.3)  # the whole 0.1 s schedule (and its end) passes while the loop is held
    plan = Plan("open", Bounds(duration=0.1, warmup=0.0), rate=100)
    (run,) = as_json(await run_plan([_spec("sim", p)], _workload(), plan, asyncio.Event()))
    assert run["requests"] == run["successes"] == 10
    assert run["metrics"]["schedule_lag_ms"]["count"] == 10


@pytest.mark.timeout(30)
async def test_a_timed_open_loop_ends_at_its_end_when_the_in_flight_cap_holds_its_backlog(sim: SimFactory) -> None:
    """A target that answers nothing (the simulator's ``hold``) fills the in-flight cap; once the run's end has
    passed, the requests the cap held back are not sent: a 0.2 s run at 100/s with a cap of 3 sends 3, not the 20
    its schedule had due before the end, once the target answers again (a stalled target's backlog would
    otherwise keep a timed run sending for as long as it takes to clear)."""
    p = await sim("instant", faults={"hold": True})
    target = loadgen.Target("sim", UpstreamClient(Endpoint("sim", p.url)), "m")
    gen = loadgen.LoadGenerator([target], _workload())
    t0 = time.perf_counter()
    run = asyncio.ensure_future(gen.open(100, Bounds(duration=0.2, warmup=0.0), max_in_flight=3))
    try:
        await eventually(lambda: p.held == 3, 10.0)
        await asyncio.sleep(max(0.0, t0 + 0.5 - time.perf_counter()))  # the end (0.2 s) has passed: one-sided
        p.clear_faults()  # the target answers again: the three complete
        (rec,) = await asyncio.wait_for(run, 20.0)
    finally:
        p.clear_faults()
        if not run.done():
            run.cancel()
        await target.client.close()
    assert gen.phase is not None
    assert gen.phase.sent == 3
    assert rec.to_dict()["requests"] == 3


@pytest.mark.timeout(30)
async def test_open_loop_builds_each_request_after_the_previous_one_is_sent(
    sim: SimFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request built ahead of its time is built after the previous one was handed to the pool, never
    between that request's dispatch and its send; the workload's requests go out in the workload's order."""
    p = await sim("instant")
    built: list[float] = []  # when each request was made, in workload order
    order: list[tuple[float, loadgen.Prepared]] = []  # (intended, request) in dispatch order
    sent_at: dict[int, float] = {}  # Sent.t by request

    class Recording(Workload):
        def next(self) -> RequestSpec:
            built.append(time.perf_counter())
            return super().next()

    scheduled, execute = loadgen.LoadGenerator._scheduled, loadgen.execute

    async def noting_order(
        gen: loadgen.LoadGenerator, phase: loadgen.Phase, prep: loadgen.Prepared, intended: float, counted: bool
    ) -> None:
        order.append((intended, prep))  # tasks start in the order they were created
        await scheduled(gen, phase, prep, intended, counted)

    async def noting_send(prep: loadgen.Prepared) -> tuple[Any, Any, float]:
        out = await execute(prep)
        sent_at[id(prep)] = out[2]
        return out

    monkeypatch.setattr(loadgen, "execute", noting_send)
    monkeypatch.setattr(loadgen.LoadGenerator, "_scheduled", noting_order)
    workload = Recording(input_tokens=LengthDist(16), max_tokens=4, stream=False)
    target = loadgen.Target("sim", UpstreamClient(Endpoint("sim", p.url)), "m")
    gen = loadgen.LoadGenerator([target], workload)
    try:
        await gen.open(200, Bounds(duration=None, requests=40, warmup=0.0))
    finally:
        await target.client.close()
    assert len(built) == len(order) == len(sent_at) == 40
    intended = [i for i, _ in order]
    assert intended == sorted(intended)
    sent = [sent_at[id(prep)] for _, prep in order]
    early = [k for k in range(1, 40) if built[k] < intended[k]]  # built ahead of time, not caught up
    assert early  # at 200/s most are, even on a busy machine
    for k in early:
        assert built[k] > sent[k - 1], k


@pytest.mark.parametrize("precise", [True, False])
async def test_alarm_never_fires_early(precise: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The open loop's alarm (timerfd, or the loop's timers where there is none) never wakes before its time."""
    if not precise:
        monkeypatch.setattr(alarm_module, "_libc_timerfd", lambda: None)
    alarm = Alarm()
    assert alarm.precise == (precise and alarm_module._libc_timerfd() is not None)
    fired: list[float] = []
    cb_alarm = Alarm(callback=lambda: fired.append(time.perf_counter()))
    try:
        start = time.perf_counter()
        for i in range(1, 41):
            t = start + i * 0.0007  # 0.7 ms apart: between uvloop's 1 ms ticks
            await alarm.until(t)
            assert time.perf_counter() >= t
        t = time.perf_counter() + 0.002
        cb_alarm.arm(t)
        await asyncio.sleep(0.05)
        assert len(fired) == 1
        assert fired[0] >= t
    finally:
        alarm.close()
        cb_alarm.close()


# -- 8. errors by class ---------------------------------------------------------------------------


async def test_errors_are_counted_by_class_with_an_example(sim: SimFactory) -> None:
    """Half the answers are 503: counted as http_5xx with an example, error_rate about 0.5."""
    p = await sim("instant", faults={"error_rate": 0.5, "error_statuses": [503]})
    (run,) = as_json(await run_plan([_spec("sim", p)], _workload(), _closed(4, requests=200), asyncio.Event()))
    assert run["requests"] == 200
    assert run["errors"]["http_5xx"] == 200 - run["successes"] > 0
    assert sum(run["errors"].values()) == run["errors"]["http_5xx"]
    assert isinstance(run["error_examples"]["http_5xx"], str)
    assert run["error_examples"]["http_5xx"]
    assert 0.3 < run["error_rate"] < 0.7
    assert run["metrics"]["e2e_ms"]["count"] == run["successes"]


async def test_max_errors_stops_the_level_early(sim: SimFactory) -> None:
    """``--max-errors 5``: the level ends soon after the fifth error instead of running 10 s."""
    p = await sim("instant", faults={"error_rate": 0.5, "error_statuses": [503]})
    (run,) = as_json(
        await run_plan([_spec("sim", p)], _workload(), _closed(2, duration=10.0, max_errors=5), asyncio.Event())
    )
    errors = sum(run["errors"].values())
    assert 5 <= errors <= 5 + 2
    # Ended at the errors, not the 10 s: half of the requests fail, so ~10 were sent; 10 s of an instant
    # provider would be thousands (a count, so a slow machine cannot break it the way a '< 3 s' could).
    assert run["requests"] < 100


# -- 9. prompt files ------------------------------------------------------------------------------


async def test_prompt_file_is_sent(sim: SimFactory, tmp_path: Path) -> None:
    """A JSONL of {"prompt"} and {"messages"} lines: the simulator sees prompts of those lengths, in turn."""
    path = tmp_path / "prompts.jsonl"
    short = "hello there"
    long = " ".join(["word"] * 300)
    path.write_text(
        json.dumps({"prompt": short}) + "\n\n" + json.dumps({"messages": [{"role": "user", "content": long}]}) + "\n",
        encoding="utf-8",
    )
    p = await sim("instant")
    workload = _workload(prompts=load_prompts(path))
    (run,) = as_json(await run_plan([_spec("sim", p)], workload, _closed(1, requests=6), asyncio.Event()))
    assert run["successes"] == 6
    tokens = [r.prompt_tokens or 0 for r in p.truth.records()]
    assert tokens[0::2] == [tokens[0]] * 3
    assert tokens[1::2] == [tokens[1]] * 3
    assert tokens[0] < 20 < 250 < tokens[1]
    assert run["tokens"]["input"] == sum(tokens)


def test_bad_prompt_line_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    """A prompt file with a broken line 2: exit 2 with ``FILE:2`` in the message."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n{"prompt": \n', encoding="utf-8")
    code, output = _bench(
        "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--no-preflight", "--prompts", str(path)
    )
    assert code == 2, output
    assert f"{path}:2" in output.replace("\n", "")
