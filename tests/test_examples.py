"""The example configs in examples/ stay valid."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tailgate.cli import main

EXAMPLES = Path(__file__).parents[1] / "examples"


def test_example_sim_config_is_valid() -> None:
    """examples/sim.yaml passes `tailgate mock --check`."""
    result = CliRunner().invoke(main, ["mock", "--config", str(EXAMPLES / "sim.yaml"), "--check"])
    assert result.exit_code == 0, result.output
    assert "aggregator" in result.output


def test_example_gateway_config_is_valid() -> None:
    """examples/gateway.yaml passes `tailgate config check` and routes 80/20."""
    result = CliRunner().invoke(main, ["config", "check", str(EXAMPLES / "gateway.yaml")])
    assert result.exit_code == 0, result.output
    assert "80" in result.output
