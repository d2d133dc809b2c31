"""A short primary-degrades run through real simulators, a real gateway and the bench load generator."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tailgate.scenario import build_document, check_document, load_scenario, run_scenario

# Times are 1/10 of the shipped scenario's (engine, SLO), the timeline is seconds long: the primary has 4
# batch slots, so 8× slower cuts its capacity below what weighted 80/20 sends it and a static split queues.
SHORT = """
name: degrades-smoke
seed: 3
time_scale: 0.1
providers:
  primary: {preset: provider-a, engine: {slots: 4}}
  secondary: {preset: provider-a}
gateway:
  models:
    m:
      routes:
        - {provider: primary, model: m, weight: 80}
        - {provider: secondary, model: m, weight: 20}
  routing: {slo: {ttft_p90: 150ms, e2e_p90: 300ms}}
timeline:
  - {at: 1s, phase: degraded, provider: primary, set: {latency_multiplier: 8}}
  - {at: 3s, phase: degraded-steady}
load: {rate: 40, arrival: constant, duration: 6s, max_tokens: 32, input_tokens: 32}
policies: [weighted, adaptive]
"""


async def test_adaptive_beats_weighted_on_p99_when_the_primary_degrades(tmp_path: Path) -> None:
    """Same load and timeline for both: adaptive moves traffic off the slow primary, weighted queues on it."""
    path = tmp_path / "short.yaml"
    path.write_text(SHORT, encoding="utf-8")
    cfg = load_scenario(path)
    records = await run_scenario(cfg, cfg.policies, asyncio.Event())
    doc = check_document(build_document(cfg, records, source=str(path)))
    runs = {r["name"]: r for r in doc["runs"]}
    assert set(runs) == {"weighted", "adaptive"}
    for run in runs.values():
        assert run["overall"]["requests"] == 240  # 40/s for 6 s, the same schedule for both
        assert run["overall"]["errors"] == 0
    p99 = {name: run["overall"]["e2e_ms"]["p99"] for name, run in runs.items()}
    assert p99["adaptive"] < p99["weighted"], p99
    steady = {name: next(p for p in run["phases"] if p["name"] == "degraded-steady") for name, run in runs.items()}
    assert steady["adaptive"]["share"]["primary"] < steady["weighted"]["share"]["primary"]
