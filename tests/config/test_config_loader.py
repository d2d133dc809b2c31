"""Config files: env interpolation, human units, and errors that name file, line and path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailgate.config import ConfigError, load_model, parse_duration, parse_fraction
from tailgate.sim.config import SimConfig, load_sim_config


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sim.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("30s", 30.0), ("1m30s", 90.0), ("2h", 7200.0), ("1.5", 1.5), (" 250us", 0.00025)],
)
def test_durations_parse(text: str, seconds: float) -> None:
    """Durations accept ms/s/m/h suffixes, combinations and bare seconds."""
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3 parsecs", "s", "1x", "m1"])
def test_bad_durations_say_what_was_expected(text: str) -> None:
    """A bad duration names the accepted forms and the value."""
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(text)


def test_fractions_parse() -> None:
    """'5%' is 0.05; numbers pass through; junk is refused."""
    assert parse_fraction("5%") == pytest.approx(0.05)
    assert parse_fraction(0.2) == 0.2
    with pytest.raises(ValueError, match="fraction"):
        parse_fraction("lots")


def test_error_names_file_line_and_path(tmp_path: Path) -> None:
    """Each problem is reported as file:line: dotted.path: message, all of them at once."""
    path = _write(
        tmp_path,
        "providers:\n"
        "  a:\n"
        "    preset: provider-a\n"
        "  b:\n"
        "    preset: provider-b\n"
        "    engine:\n"
        "      slots: -3\n"
        "      slotz: 4\n"
        "    faults: {error_rate: 2}\n",
    )
    with pytest.raises(ConfigError) as exc:
        load_sim_config(path)
    problems = exc.value.problems
    assert f"{path}:7: providers.b.engine.slots: Input should be greater than or equal to 1 (got -3)" in problems
    assert any(p.startswith(f"{path}:8: providers.b.engine.slotz: unknown field") for p in problems)
    assert any(p.startswith(f"{path}:9: providers.b.faults.error_rate:") for p in problems)
    assert len(problems) == 3


def test_unknown_preset_lists_the_known_ones(tmp_path: Path) -> None:
    """A misspelled preset is an error that lists the valid names."""
    path = _write(tmp_path, "providers:\n  a: {preset: provider-z}\n")
    with pytest.raises(ConfigError) as exc:
        load_sim_config(path)
    assert "providers.a.preset" in exc.value.problems[0]
    assert "'aggregator'" in exc.value.problems[0]


def test_env_interpolation_with_defaults_and_missing(tmp_path: Path) -> None:
    """${VAR} and ${VAR:-default} are replaced; an unset variable without default names its path."""
    path = _write(
        tmp_path, "seed: ${SEED}\nproviders:\n  a: {preset: instant, port: '${PORT:-0}', api_keys: ['${KEY}']}\n"
    )
    cfg = load_model(path, SimConfig, env={"SEED": "7", "KEY": "sk-1"})
    assert cfg.seed == 7
    assert cfg.providers["a"].api_keys == ["sk-1"]
    assert cfg.providers["a"].port == 0
    with pytest.raises(ConfigError) as exc:
        load_model(path, SimConfig, env={"SEED": "7"})
    assert exc.value.problems == [f"{path}: providers.a.api_keys[0]: environment variable KEY is not set"]


def test_literal_dollar_brace_escape(tmp_path: Path) -> None:
    """$${X} stays a literal ${X}."""
    path = _write(tmp_path, "providers:\n  a: {preset: instant, api_keys: ['$${NOT_A_VAR}']}\n")
    assert load_model(path, SimConfig, env={}).providers["a"].api_keys == ["${NOT_A_VAR}"]


def test_yaml_syntax_error_and_missing_file(tmp_path: Path) -> None:
    """Broken YAML reports the line; a missing file says it cannot be read."""
    path = _write(tmp_path, "providers:\n  a: {preset: instant\n")
    with pytest.raises(ConfigError) as exc:
        load_sim_config(path)
    assert exc.value.problems[0].startswith(f"{path}:")
    assert "not valid YAML" in exc.value.problems[0]
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_sim_config(tmp_path / "nope.yaml")


def test_duplicate_ports_and_empty_providers(tmp_path: Path) -> None:
    """Two providers on one port, or no providers at all, are refused with a clear message."""
    path = _write(tmp_path, "providers:\n  a: {port: 9001}\n  b: {port: 9001}\n")
    with pytest.raises(ConfigError, match="both use port 9001"):
        load_sim_config(path)
    with pytest.raises(ConfigError, match="providers"):
        load_sim_config(_write(tmp_path, "seed: 1\n"))


def test_specs_apply_overrides_timeline_and_seeds(tmp_path: Path) -> None:
    """Engine overrides, faults and timelines reach the provider specs; seeds differ per provider."""
    path = _write(
        tmp_path,
        "seed: 3\ntime_scale: 0.5\nproviders:\n"
        "  a: {preset: provider-a, engine: {slots: 8}, faults: {error_rate: 5%}}\n"
        "  b: {preset: aggregator, timeline: [{at: 1m, set: {outage: true}}, {at: 90s, clear: true}]}\n",
    )
    a, b = load_sim_config(path).specs()
    assert a.params.slots == 8
    assert a.params.step_ms == 8.4  # untouched preset value
    assert a.faults.error_rate == pytest.approx(0.05)
    assert a.time_scale == 0.5
    assert [e.at for e in b.timeline] == [60.0, 90.0]
    assert b.timeline[0].set is not None
    assert b.timeline[0].set.outage
    assert a.seed != b.seed


def test_timeline_entry_must_do_something(tmp_path: Path) -> None:
    """A timeline entry with neither set nor clear is an error at its path."""
    path = _write(tmp_path, "providers:\n  a:\n    timeline:\n      - {at: 5s}\n")
    with pytest.raises(ConfigError) as exc:
        load_sim_config(path)
    assert "providers.a.timeline[0]" in exc.value.problems[0]
