"""A scenario's batch (issue 41's must-show, ``scenarios/batch-beside-users.yaml``), run for real and scaled down:
real simulators (the secondary's Batch API), a real gateway (its Batch API and executor, its ledger), the bench
load generator, and the batch submitted over HTTP as a client would. The checks' numbers must come from the
records: each is recomputed here from the fields it is made of, and the batch's ledger cost is checked against
the batch object's own ``tailgate.cost`` (two sources). Timing checks are not judged here (a busy machine): the
full-length run's numbers are in docs/benchmarks.md."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tailgate.config.loader import ConfigError
from tailgate.scenario import build_document, check_document, load_scenario, run_scenario
from tailgate.scenario.config import ScenarioConfig
from tailgate.scenario.document import dumps_document
from tailgate.scenario.report import render_html, render_markdown
from tailgate.scenario.verdicts import verdicts

SHIPPED = Path(__file__).resolve().parents[2] / "scenarios" / "batch-beside-users.yaml"
CHECKS = {"ttft_p90_ratio", "interactive_disturbed", "completed_in_window", "lane_spare_share", "cost_ratio"}


def _short(lines: int, *, secondary_batch_api: bool = True, scale: float = 0.02) -> ScenarioConfig:
    """The shipped scenario at ``scale`` (3 s of load at 0.02), ``lines`` lines, the executor polling fast."""
    cfg = load_scenario(SHIPPED).scaled(scale)
    assert cfg.batch is not None
    gw = cfg.gateway
    batch_cfg = gw.batch.model_copy(update={"poll_interval": 0.05, "provider_poll_interval": 0.1})
    providers = dict(gw.providers)
    if not secondary_batch_api:
        providers["secondary"] = providers["secondary"].model_copy(update={"batch_api": False})
    return cfg.model_copy(
        update={
            "batch": cfg.batch.model_copy(update={"lines": lines, "wait": 20.0}),
            "gateway": gw.model_copy(update={"batch": batch_cfg, "providers": providers}),
        }
    )


async def _run(cfg: ScenarioConfig) -> tuple[dict[str, Any], list[str], str]:
    records = await run_scenario(cfg, cfg.policies, asyncio.Event())
    doc = build_document(cfg, records, source=str(SHIPPED))
    data = json.loads(dumps_document(doc))
    check_document(data)  # the file reads back as the typed document
    return data, verdicts(doc), render_markdown(doc) + render_html(doc)


def _answered_once(b: dict[str, Any], lines: int) -> None:
    assert b["status"] == "completed", b
    assert b["request_counts"] == {"total": lines, "completed": lines, "failed": 0}
    assert (b["answered"], b["answered_twice"], b["missing"], b["failed"]) == (lines, 0, 0, 0)
    assert b["error"] is None


def _checks_from_fields(b: dict[str, Any]) -> None:
    """Every check's value is what its fields say, and its verdict follows from its bound."""
    checks = b["checks"]
    assert set(checks) == CHECKS
    for c in checks.values():
        assert c["op"] in ("<=", ">=")
        if c["value"] is not None and c["ok"] is not None:
            within = c["value"] <= c["limit"] if c["op"] == "<=" else c["value"] >= c["limit"]
            assert c["ok"] == within or c["ok"] is False
    i = b["interactive"]
    assert i["ttft_p90_ms"] > 0
    assert i["baseline_ttft_p90_ms"] > 0
    assert checks["ttft_p90_ratio"]["value"] == pytest.approx(i["ttft_p90_ms"] / i["baseline_ttft_p90_ms"], abs=1e-4)
    disturbed = i["refused"] + i["moved"] - i["baseline_refused"] - i["baseline_moved"]
    assert checks["interactive_disturbed"]["value"] == disturbed
    assert checks["completed_in_window"]["value"] == pytest.approx(b["took_s"] / b["window_s"], abs=1e-4)
    assert checks["completed_in_window"]["ok"] is True
    assert checks["cost_ratio"]["value"] == pytest.approx(b["cost"] / b["cost_as_interactive"], abs=1e-4)
    # the ledger's rows of the lines, summed, against the batch object's own cost (the store's running sum)
    assert b["reported_cost"] == pytest.approx(b["cost"], rel=1e-6)
    assert sum(p["cost"] for p in b["paths"].values()) == pytest.approx(b["cost"], rel=1e-6)


@pytest.mark.slow
async def test_batch_beside_users_scaled_down_runs_and_judges_from_data() -> None:
    """The shipped file at 1/50 of its times with 200 lines: a baseline run without the batch, then the run with
    it; every custom_id answered once (8 % on the batch lane at the live price, the rest on the secondary's Batch
    API at half price, so the cost check reads 0.54), the five checks computed from their fields, one verdict each
    with its number."""
    cfg = _short(200)
    data, said, pages = await _run(cfg)
    runs = {r["name"]: r for r in data["runs"]}
    assert list(runs) == ["adaptive (no batch)", "adaptive"]
    base, run = runs["adaptive (no batch)"], runs["adaptive"]
    assert base["without_batch"] is True
    assert "batch" not in base
    assert data["scenario"]["batch"]["lines"] == 200
    b = run["batch"]
    _answered_once(b, 200)
    assert b["baseline"] == "adaptive (no batch)"
    # the primary has no Batch API; the secondary's is cheapest: batch.lane_share 0.08 of the lines (the first
    # 16) run on the batch lane on the primary's spare budget, the other 184 in the secondary's job
    assert set(b["paths"]) == {"batch-lane", "provider-batch"}
    lane, job = b["paths"]["batch-lane"], b["paths"]["provider-batch"]
    assert (lane["lines"], lane["providers"]) == (16, {"primary": 16})
    assert (job["lines"], job["providers"]) == (184, {"secondary": 184})
    assert lane["cost"] == pytest.approx(lane["cost_as_interactive"], rel=1e-6)  # the lane pays the live price
    assert job["cost"] == pytest.approx(0.5 * job["cost_as_interactive"], rel=1e-6)  # price.batch ratio 0.5
    assert b["checks"]["cost_ratio"]["value"] == pytest.approx(0.54, abs=5e-3)  # 0.5 + 0.5 x 0.08
    _checks_from_fields(b)
    # the interactive load is the same in both runs (same seed), and the phases hold only the load's requests
    assert b["interactive"]["requests"] == b["interactive"]["baseline_requests"] == run["overall"]["requests"] > 0
    assert run["overall"]["gateway_requests"] == base["overall"]["gateway_requests"]
    lines = [v for v in said if v.startswith("batch (adaptive):")]
    assert len(lines) == 5
    assert f"{b['checks']['cost_ratio']['value']:.2f}×" in lines[-1]
    assert "200 of 200 custom_ids answered" in lines[2]
    assert "the batch beside the load" in pages.lower()
    assert 'data-chart="batch-progress"' in pages  # the HTML charts its lines answered and waiting over time


@pytest.mark.slow
async def test_batch_on_the_lane_uses_the_primarys_spare_budget() -> None:
    """With no Batch API anywhere the lines run on the batch lane through the request path: its use of the
    primary's spare pacing budget is measured over the time lines waited (and the cost is the live price)."""
    cfg = _short(40, secondary_batch_api=False)
    data, said, _ = await _run(cfg)
    b = data["runs"][-1]["batch"]
    _answered_once(b, 40)
    assert set(b["paths"]) >= {"batch-lane"}
    assert b["paths"]["batch-lane"]["lines"] == 40
    assert b["checks"]["cost_ratio"]["value"] == pytest.approx(1.0, abs=1e-3)  # the lane pays the live price
    (spare,) = b["spare"]
    assert spare["provider"] == "primary"
    assert spare["target_rps"] == pytest.approx(18.0)
    assert spare["to_s"] > spare["from_s"]
    assert spare["target"] == pytest.approx(spare["target_rps"] * (spare["to_s"] - spare["from_s"]), abs=0.02)
    assert spare["spare"] == pytest.approx(spare["target"] - spare["interactive"], abs=0.02)
    assert spare["lane"] > 0  # the lane ran lines on the primary while the load ran
    if spare["share"] is not None:
        assert b["checks"]["lane_spare_share"]["value"] == pytest.approx(spare["share"], abs=1e-4)
    _checks_from_fields(b)
    assert any("lane requests of" in v for v in said)


def test_batch_section_is_validated_and_scaled(tmp_path: Path) -> None:
    text = SHIPPED.read_text(encoding="utf-8")
    cfg = load_scenario(SHIPPED)
    assert cfg.batch is not None
    assert cfg.batch.lines == 5000
    assert cfg.batch.window_s == 86400.0
    scaled = cfg.scaled(0.1)
    assert scaled.batch is not None
    assert (scaled.batch.submit_at, scaled.batch.wait, scaled.batch.completion_window) == (0.0, 300.0, "24h")
    later = cfg.model_copy(update={"batch": cfg.batch.model_copy(update={"submit_at": 10.0})}).scaled(0.1)
    assert later.batch is not None
    assert later.batch.submit_at == pytest.approx(1.0)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("submit_at: 0s", "submit_at: 200s").replace("24h", "25m"), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_scenario(bad)
    said = str(err.value)
    assert "completion_window" in said
    bad.write_text(text.replace("submit_at: 0s", "submit_at: 200s"), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_scenario(bad)
    assert "batch.submit_at" in str(err.value)
    assert "after the end of the load" in str(err.value)
