"""`tailgate scenario --out/--html/--markdown`: the JSON schema (docs/scenarios.md) and the offline report."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tailgate.cli import main
from tailgate.scenario import SCHEMA, check_document

TINY = """
name: tiny
providers:
  a: {preset: instant}
  b: {preset: instant}
gateway:
  models:
    m:
      routes:
        - {provider: a, model: m, weight: 80}
        - {provider: b, model: m, weight: 20, classes: [batch]}
timeline:
  - {at: 1s, phase: outage, provider: a, set: {outage: true}}
  - {at: 2s, phase: back, provider: a, clear: true}
load: {rate: 50, arrival: constant, duration: 3s, classes: {interactive: 80%, batch: 20%}, max_tokens: 8}
policies: [weighted, {name: adaptive-hedged, policy: adaptive, hedge: {after: 200ms, budget: 5%}}]
"""

PHASE_KEYS = {
    "name",
    "start_s",
    "end_s",
    "requests",
    "errors",
    "failed_before_first_token",
    "failed_after_first_token",
    "errors_by_class",
    "ttft_ms",
    "e2e_ms",
    "gateway_requests",
    "share",
    "share_by_class",
    "no_provider",
    "multi_attempt",
    "provider_e2e_ms",
    "upstream",
    "upstream_requests",
    "upstream_rate_limited",
    "upstream_rate_limited_ratio",
    "extra_upstream_ratio",
    "cache_hit_rate",
    "cost_per_1k",
}


_BY_DATA = frozenset({"gateway_counters", "errors_by_class"})
"""Maps keyed by what happened (counters, error classes): their keys are data."""


def _keys(x: object, name: str = "") -> object:
    """Every object's keys in order, recursively; a list by its first item; the maps in ``_BY_DATA`` left out."""
    if isinstance(x, dict):
        return None if name in _BY_DATA else [(k, _keys(v, k)) for k, v in x.items()]
    if isinstance(x, list):
        return [_keys(x[0], name)] if x else []
    return None


def test_outputs_follow_the_documented_schema(tmp_path: Path) -> None:
    """One short run writes a tailgate.scenario/v1 JSON, a script-free HTML page and Markdown tables."""
    src = tmp_path / "tiny.yaml"
    src.write_text(TINY, encoding="utf-8")
    out, html, md = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "r.md"
    args = ["scenario", str(src), "--out", str(out), "--html", str(html), "--markdown", str(md)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text(encoding="utf-8"))
    check_document(doc)  # reads back as the typed document
    assert doc["schema"] == SCHEMA == "tailgate.scenario/v1"
    assert doc["partial"] is False
    scenario = doc["scenario"]
    assert [p["name"] for p in scenario["phases"]] == ["healthy", "outage", "back"]
    assert scenario["timeline"][0] == {
        "at": 1.0,
        "kind": "fault",
        "phase": "outage",
        "provider": "a",
        "set": {"outage": True},
    }
    assert scenario["alias"] == "m"
    assert [r["name"] for r in doc["runs"]] == ["weighted", "adaptive-hedged"]
    assert doc["runs"][0]["hedge"] is None
    assert doc["runs"][1]["hedge"] == {"after": 0.2, "budget": 0.05}
    for run in doc["runs"]:
        assert run["policy"] in ("weighted", "adaptive")
        assert run["pacing"] is True
        # 50/s for 3 s, the same schedule for every policy; what a starved loop could not send before the end is
        # not sent (open loop), so the numbers must agree with each other, not reach 150.
        overall = run["overall"]
        assert 0 < overall["requests"] <= 150
        assert overall["requests"] == sum(p["requests"] for p in run["phases"])
        assert overall["gateway_requests"] == overall["requests"]  # the gateway's ledger has a row for each
        assert set(run["overall"]) == PHASE_KEYS - {"name", "start_s", "end_s"}
        for phase in run["phases"]:
            assert set(phase) == PHASE_KEYS
            assert set(phase["ttft_ms"]) == {"p50", "p90", "p99", "max", "mean", "count"}
            assert set(phase["share"]) == {"a", "b"}
        healthy = run["phases"][0]
        assert abs(sum(healthy["share"].values()) - 1.0) < 1e-3  # every request was served by a or b
        assert healthy["upstream_requests"] == sum(v["requests"] for v in healthy["upstream"].values()) > 0
        kinds = [(e["kind"], e["provider"]) for e in run["events"]]
        assert kinds == [("fault", "a"), ("recovery", "a")]
        assert {"cutover_s", "below_10pct_s"} <= set(run["events"][0])
        assert {"readmit_s", "configured_s"} <= set(run["events"][1])
        assert set(run["configured_by_class"]) == set(healthy["share_by_class"]) == {"batch", "interactive"}
        assert sum(c["requests"] for c in healthy["share_by_class"].values()) == healthy["gateway_requests"]
        assert any(k.startswith("tailgate_upstream_attempts_total{") for k in run["gateway_counters"])
        over = run["over_time"]
        assert set(over) == {"bucket_s", "share", "p99_e2e_ms"}
        assert len(over["share"]["a"]) == len(over["p99_e2e_ms"])
    # The typed writer keeps the key order of the files written before it (tests/scenario/fixtures/tiny.json, this
    # scenario run by the code of 2026-12-07): every object's keys in the same order, maps keyed by data aside.
    before = json.loads((Path(__file__).parent / "fixtures" / "tiny.json").read_text(encoding="utf-8"))
    assert _keys(doc) == _keys(before)
    page = html.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page
    assert "src=" not in page
    assert page.count('<svg class="chart"') >= 4
    table = md.read_text(encoding="utf-8")
    assert table.startswith("| policy | phase | req |")
    assert "| adaptive-hedged | outage |" in table
