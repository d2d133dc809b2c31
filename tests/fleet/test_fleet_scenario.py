"""The scenario runner on a fleet: ``--replicas 3`` runs three gateways on one port and a private Redis."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tailgate.scenario import build_document, check_document, load_scenario, run_scenario
from tailgate.scenario.document import dumps_document

# tests/scenario/test_scenario_smoke.py's run, adaptive only, on three replicas.
SHORT = """
name: degrades-fleet-smoke
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
policies: [adaptive]
"""


@pytest.mark.slow
@pytest.mark.usefixtures("redis_binary")
async def test_a_scenario_runs_on_three_replicas(tmp_path: Path) -> None:
    """Every request is answered and the fleet moves traffic off the slow primary; the counters add up."""
    path = tmp_path / "short.yaml"
    path.write_text(SHORT, encoding="utf-8")
    cfg = load_scenario(path)
    records = await run_scenario(cfg, cfg.policies, asyncio.Event(), replicas=3)
    doc = json.loads(dumps_document(build_document(cfg, records, source=str(path))))
    check_document(doc)  # the file reads back as the typed document
    (run,) = doc["runs"]
    assert run["overall"]["requests"] == 240
    assert run["overall"]["errors"] == 0
    steady = next(p for p in run["phases"] if p["name"] == "degraded-steady")
    assert steady["share"]["primary"] < 0.5, steady["share"]
    attempts = sum(v for k, v in records[0].counters.items() if k.startswith("tailgate_upstream_attempts_total"))
    assert attempts >= 240  # the three replicas' counters add up
