"""Every bench run reports the prompt-cache hit rate from usage, and with --price the input cost per 1k requests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench_support import as_json
from click.testing import CliRunner

from conftest import SimFactory, ThreadedSim
from tailgate.bench.cache import CacheTally, input_cost
from tailgate.bench.command import UsageError, parse_price
from tailgate.bench.loadgen import Bounds
from tailgate.bench.results import RunRecorder
from tailgate.bench.runner import Plan, TargetSpec, run_plan
from tailgate.bench.schema import Load, Target
from tailgate.bench.shapes import build_workload
from tailgate.cli import main
from tailgate.config.schema import PriceConfig
from tailgate.sim.provider import SimProvider

FAST = {"pre_median_s": 0.0, "prefill_tps": 1e9}


async def _run(p: SimProvider, workload: str, requests: int, **kw: Any) -> dict[str, Any]:
    """One closed-loop run at concurrency 1 (turns in order), no warm-up, no preflight."""
    wl = build_workload(workload, "none", "64", 16, True, 0, **kw)
    plan = Plan("closed", Bounds(duration=None, requests=requests, warmup=0.0), levels=(1,))
    (run,) = as_json(await run_plan([TargetSpec("sim", p.url, "m", "sk-bench")], wl, plan, asyncio.Event()))
    return run


async def test_multi_turn_on_one_provider_shows_a_high_hit_rate_equal_to_the_truth(sim: SimFactory) -> None:
    """Growing conversations: most of each turn's prompt is the last turn's, cached; the run says as the sim saw."""
    p = await sim("provider-a", engine=FAST, time_scale=0.02)
    run = await _run(p, "multi-turn", 32, turns=8)
    truth = p.truth.records()
    cache = run["cache"]
    assert run["successes"] == 32
    assert cache["requests"] == cache["reported"] == 32
    assert cache["cached_tokens"] == sum(t.cached_tokens or 0 for t in truth)
    assert cache["reported_prompt_tokens"] == sum(t.prompt_tokens or 0 for t in truth)
    assert cache["hit_rate"] == pytest.approx(cache["cached_tokens"] / cache["reported_prompt_tokens"], abs=1e-6)
    assert cache["hit_rate"] > 0.6
    firsts = [t.cached_tokens for t in truth[::8]]
    assert firsts == [0, 0, 0, 0], "each conversation's first turn is cold"


async def test_shared_prefix_hits_after_the_first_request(sim: SimFactory) -> None:
    """A long shared system prompt: every request after the first finds it cached."""
    p = await sim("provider-a", engine=FAST, time_scale=0.02)
    run = await _run(p, "shared-prefix", 10, prefix_tokens=1024)
    assert [t.cached_tokens == 0 for t in p.truth.records()] == [True] + [False] * 9
    assert run["cache"]["hit_rate"] > 0.8


async def test_unique_prompts_hit_nothing_and_a_provider_without_cache_reports_nothing(sim: SimFactory) -> None:
    """Synthetic unique prompts: 0 %. prefix_cache: false (no cache fields in usage): not reported (null)."""
    cached = await sim("provider-a", engine=FAST, time_scale=0.02)
    assert (await _run(cached, "synthetic", 6))["cache"]["hit_rate"] == 0.0
    off = await sim("provider-a", engine={**FAST, "prefix_cache": False}, time_scale=0.02)
    run = await _run(off, "multi-turn", 16, turns=8)
    assert run["cache"] == {
        "requests": 16,
        "reported": 0,
        "reported_prompt_tokens": 0,
        "cached_tokens": 0,
        "hit_rate": None,
    }


def test_input_cost_per_1k_requests() -> None:
    """Cached tokens at cached_input, the rest at input, per 1,000 requests; and the same without the cache."""
    rec = RunRecorder(Target(name="t"), Load(mode="closed", concurrency=1))
    rec.input_tokens, rec.cache = 10_000, CacheTally(10, 10, 10_000, 8_000)
    cost = input_cost(rec.to_run(), PriceConfig(input=2.0, cached_input=0.2))
    assert cost is not None
    assert cost.per_1k_requests == pytest.approx((2_000 * 2.0 + 8_000 * 0.2) / 1e6 * 100)
    assert cost.uncached_per_1k_requests == pytest.approx(10_000 * 2.0 / 1e6 * 100)
    assert cost.currency == "CNY"
    empty = RunRecorder(Target(name="t"), Load(mode="closed", concurrency=1)).to_run()
    assert input_cost(empty, PriceConfig(input=2.0)) is None


def test_price_option_is_parsed_and_checked() -> None:
    """--price takes the config's field names; a typo or a cache price above input is a usage error."""
    assert parse_price("input=2,cached_input=0.2,currency=USD") == PriceConfig(
        input=2.0, cached_input=0.2, currency="USD"
    )
    for bad, said in (("inptu=2", "cannot read"), ("cached_input=0.2", "give input"), ("input=x", "input")):
        with pytest.raises(UsageError, match=said):
            parse_price(bad)
    with pytest.raises(UsageError, match="above input"):
        parse_price("input=0.2,cached_input=2")


def test_cache_counts_survive_merge_and_the_file() -> None:
    """Workers' recorders merge the cache counters; a results file read back keeps them."""
    a = RunRecorder(Target(name="t"), Load(mode="closed", concurrency=1))
    b = RunRecorder(Target(name="t"), Load(mode="closed", concurrency=1))
    a.cache, b.cache = CacheTally(2, 2, 300, 128), CacheTally(3, 1, 200, 64)
    a.merge(b)
    assert a.cache.summary().hit_rate == pytest.approx(192 / 500)
    back = RunRecorder.from_dict(a.to_dict())
    assert back.cache == CacheTally(5, 3, 500, 192)


@pytest.mark.timeout(30)
def test_cli_reports_hit_rate_and_input_cost(threaded_sim: Callable[..., ThreadedSim], tmp_path: Path) -> None:
    """tailgate bench --workload multi-turn --price …: a report line and the JSON fields."""
    ts = threaded_sim("provider-a", engine=FAST, time_scale=0.02)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        main,
        [
            "bench", "--base-url", ts.url, "--model", "m", "--workload", "multi-turn", "--turns", "6",
            "--concurrency", "1", "--requests", "12", "--duration", "0", "--warmup", "0", "--max-tokens", "8",
            "--input-tokens", "64", "--price", "input=2,cached_input=0.2", "--no-preflight", "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (run,) = json.loads(out.read_text())["runs"]
    rate = run["cache"]["hit_rate"]
    assert rate > 0.4
    cost = run["input_cost"]
    assert cost["per_1k_requests"] < cost["uncached_per_1k_requests"]
    assert f"hit rate {rate:.1%}" in result.output
    assert "CNY per 1k requests" in result.output
