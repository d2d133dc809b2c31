"""The example configs in examples/ stay valid."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tailgate.cli import main

EXAMPLES = Path(__file__).parents[1] / "examples"


def test_example_sim_config_is_valid() -> None:
    """examples/sim.yaml passes `tailgate mock --check`: both providers, exactly as configured."""
    result = CliRunner().invoke(main, ["mock", "--config", str(EXAMPLES / "sim.yaml"), "--check"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [cell.strip() for cell in lines[2].strip("┃").split("┃")] == [
        "provider",
        "preset",
        "port",
        "models",
        "faults",
    ]
    rows = [[cell.strip() for cell in line.strip("│").split("│")] for line in lines if line.startswith("│")]
    assert rows == [
        ["provider-a", "provider-a", "9311", "deepseek-v3.2", "-"],
        ["aggregator", "aggregator", "9312", "deepseek-v3.2", "-"],
    ]


def test_example_gateway_config_is_valid() -> None:
    """examples/gateway.yaml passes `tailgate config check` and routes 80/20: each route's row, exactly."""
    result = CliRunner().invoke(main, ["config", "check", str(EXAMPLES / "gateway.yaml")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].endswith("gateway.yaml: ok")
    routes = [line.split() for line in lines if line.strip().startswith(("0 ", "1 "))]
    assert routes == [
        ["0", "primary", "-", "http://127.0.0.1:9311/v1", "deepseek-v3.2", "80", "80.0%", "all"],
        ["1", "secondary", "-", "http://127.0.0.1:9312/v1", "deepseek-v3.2", "20", "20.0%", "batch"],
    ]
