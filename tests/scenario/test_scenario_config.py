"""Scenario files: the shipped ones load, and mistakes are reported as file:line: path: message."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tailgate.cli import main
from tailgate.config.loader import ConfigError
from tailgate.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

GOOD = """\
providers:
  primary: {preset: provider-a}
  secondary: {preset: provider-b}
gateway:
  models:
    m:
      routes:
        - {provider: primary, model: m, weight: 80}
        - {provider: secondary, model: m, weight: 20}
timeline:
  - {at: 10s, phase: slow, provider: primary, set: {latency_multiplier: 5}}
load: {rate: 5, duration: 20s}
"""


def _load(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    return info.value.problems


@pytest.mark.parametrize("name", sorted(p.name for p in SCENARIOS.glob("*.yaml")))
def test_shipped_scenarios_load(name: str) -> None:
    """Every scenario we ship is valid, runs in at most 3 minutes per policy — but quantized-primary, whose
    question is a move within 5 minutes of a fault at 60 s (7 minutes per policy) — and compares at least two runs
    (two policies, or a policy with and without the scenario's batch)."""
    cfg = load_scenario(SCENARIOS / name)
    assert cfg.load.duration <= (420 if name == "quantized-primary.yaml" else 180)
    with_baseline = cfg.batch is not None and cfg.batch.baseline
    assert len(cfg.policies) * (2 if with_baseline else 1) >= 2


def test_a_good_file_loads_with_defaults(tmp_path: Path) -> None:
    """Unnamed providers join the gateway section; policies default to weighted, adaptive, least-latency."""
    path = tmp_path / "s.yaml"
    path.write_text(GOOD, encoding="utf-8")
    cfg = load_scenario(path)
    assert set(cfg.gateway.providers) == {"primary", "secondary"}
    assert [p.label for p in cfg.policies] == ["weighted", "adaptive", "least-latency"]
    assert cfg.alias == "m"


def test_policy_entries_set_hedge_and_pacing(tmp_path: Path) -> None:
    """An entry may turn hedging on (or off with false) and pacing off; names must be unique."""
    text = GOOD + (
        "policies: [weighted, {name: hedged, policy: adaptive, hedge: {after: p95}},"
        " {name: plain, policy: adaptive, hedge: false, pacing: false}]\n"
    )
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    cfg = load_scenario(path)
    hedged, plain = cfg.policies[1], cfg.policies[2]
    assert cfg.hedge_of(hedged) is not None
    assert cfg.hedge_of(plain) is None
    assert plain.pacing is False
    problems = _load(tmp_path, GOOD + "policies: [adaptive, {policy: adaptive, hedge: {after: 1s}}]\n")
    assert problems == [
        f"{tmp_path / 's.yaml'}:13: policies[1]: another entry has this name; give 'name' (got 'adaptive')"
    ]


def test_unknown_timeline_provider_names_file_line_and_path(tmp_path: Path) -> None:
    """A step naming a provider that is not simulated points at that step's line."""
    problems = _load(tmp_path, GOOD.replace("phase: slow, provider: primary", "phase: slow, provider: primry"))
    assert len(problems) == 1
    assert problems[0].startswith(f"{tmp_path / 's.yaml'}:11: timeline[0].provider: no simulated provider")


def test_fault_field_errors_are_located(tmp_path: Path) -> None:
    """Fault fields are the simulator's own schema: a bad value is reported at its path."""
    problems = _load(tmp_path, GOOD.replace("latency_multiplier: 5", "latency_multiplier: -1"))
    assert problems == [
        f"{tmp_path / 's.yaml'}:11: timeline[0].set.latency_multiplier: Input should be greater than 0 (got -1)"
    ]


def test_load_needs_one_mode_and_steps_before_the_end(tmp_path: Path) -> None:
    """Both rate and concurrency is an error, and so is a step after the load ends."""
    problems = _load(
        tmp_path, GOOD.replace("load: {rate: 5, duration: 20s}", "load: {rate: 5, concurrency: 3, duration: 5s}")
    )
    assert any(
        p.endswith("load: Value error, give exactly one of 'rate' (open loop) or 'concurrency' (closed loop)")
        for p in problems
    )
    problems = _load(tmp_path, GOOD.replace("duration: 20s", "duration: 5s"))
    assert problems == [
        f"{tmp_path / 's.yaml'}:11: timeline[0].at: after the end of the load (load.duration is 5s) (got 10.0)"
    ]


def test_gateway_section_errors_keep_the_gateway_path(tmp_path: Path) -> None:
    """The gateway section is the gateway's schema: an unknown route provider and a base_url are refused."""
    text = GOOD.replace("{provider: secondary, model: m, weight: 20}", "{provider: third, model: m, weight: 20}")
    problems = _load(tmp_path, text)
    assert problems[0].startswith(f"{tmp_path / 's.yaml'}:9: gateway.models.m.routes[1].provider: no provider")
    text = GOOD.replace("gateway:\n", "gateway:\n  providers:\n    primary: {base_url: 'http://x/v1'}\n")
    problems = _load(tmp_path, text)
    assert problems == [
        f"{tmp_path / 's.yaml'}:6: gateway.providers.primary.base_url: leave base_url out: the scenario "
        "runner points it at the simulator (got 'http://x/v1')"
    ]


def test_unknown_keys_are_errors(tmp_path: Path) -> None:
    """A misspelt key is an error, not ignored."""
    problems = _load(tmp_path, GOOD.replace("load: {rate: 5,", "load: {rate: 5, max_token: 3,"))
    assert problems == [
        f"{tmp_path / 's.yaml'}:12: load.max_token: unknown field: did you mean 'max_tokens'? "
        "(unknown keys are errors, not ignored)"
    ]


def test_time_scale_shrinks_times_not_rates(tmp_path: Path) -> None:
    """--time-scale multiplies timeline, duration, engine time and SLO; the request rate stays."""
    path = tmp_path / "s.yaml"
    path.write_text(GOOD, encoding="utf-8")
    cfg = load_scenario(path).scaled(0.25)
    assert cfg.load.duration == 5.0
    assert cfg.load.rate == 5
    assert cfg.steps[0].at == 2.5
    assert cfg.time_scale == 0.25
    assert cfg.steps[0].set is not None
    assert cfg.steps[0].set.latency_multiplier == 5


def test_cli_check_reports_errors_with_exit_2(tmp_path: Path) -> None:
    """`tailgate scenario FILE --check` prints located errors and exits 2; --policy must be known."""
    path = tmp_path / "s.yaml"
    path.write_text(GOOD.replace("primary: {preset: provider-a}", "primary: {preset: provider-z}"), encoding="utf-8")
    result = CliRunner().invoke(main, ["scenario", str(path), "--check"])
    assert result.exit_code == 2
    assert f"{path}:2: providers.primary.preset: Input should be" in result.output
    path.write_text(GOOD, encoding="utf-8")
    result = CliRunner().invoke(main, ["scenario", str(path), "--check", "--policy", "fastest"])
    assert result.exit_code == 2
    assert "--policy fastest: not a policy of this scenario" in result.output
    result = CliRunner().invoke(main, ["scenario", str(path), "--check", "--policy", "cost"])
    assert result.exit_code == 0, result.output


def test_time_scale_shrinks_batch_faults() -> None:
    """The batch turnaround and expiry faults are durations: --time-scale multiplies them, an unset one stays."""
    from tailgate.scenario.config import _scaled_faults
    from tailgate.sim.faults import Faults

    scaled = _scaled_faults(Faults(batch_turnaround_s=10.0, batch_expire_after_s=None, batch_fail_rate=0.2), 0.1)
    assert scaled is not None
    assert scaled.batch_turnaround_s == pytest.approx(1.0)
    assert scaled.batch_expire_after_s is None
    assert scaled.batch_fail_rate == 0.2


def test_answer_quality_sections_load_scale_and_refuse_what_cannot_work(tmp_path: Path) -> None:
    """``monitor:`` defaults to ``tailgate monitor``'s (60 s, 10 % jitter, every workload) and its interval scales
    with the rest; ``load.tool_calls`` is a share; a policy entry may turn quality routing off; tool calls need the
    OpenAI load (the client's check reads chat answers)."""
    path = tmp_path / "s.yaml"
    text = GOOD.replace("load: {rate: 5, duration: 20s}", "load: {rate: 5, duration: 20s, tool_calls: 30%}")
    path.write_text(text + "monitor: {}\npolicies: [{name: no-quality, policy: adaptive, quality: false}]\n", "utf-8")
    cfg = load_scenario(path)
    assert cfg.load.tool_calls == pytest.approx(0.3)
    assert cfg.monitor is not None
    assert (cfg.monitor.interval, cfg.monitor.jitter, cfg.monitor.workloads) == (
        60.0,
        0.1,
        ["short", "long", "accuracy"],
    )
    assert cfg.policies[0].quality is False
    scaled = cfg.scaled(0.1)
    assert scaled.monitor is not None
    assert scaled.monitor.interval == pytest.approx(6.0)
    assert scaled.load.tool_calls == pytest.approx(0.3)  # a share, not a time
    bad = text.replace("tool_calls: 30%}", "tool_calls: 30%, api: anthropic}")
    problems = _load(tmp_path, bad + "monitor: {interval: 0s, workloads: [nope]}\n")
    joined = "\n".join(problems)
    assert "'tool_calls' needs api: openai" in joined
    assert "monitor.interval" in joined
    assert "monitor.workloads[0]: Input should be 'short', 'long' or 'accuracy'" in joined
