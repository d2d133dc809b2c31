"""The example configs in examples/ stay valid."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tailgate.cli import main
from tailgate.config.check import placeholder

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


def test_the_example_admin_key_is_warned_about() -> None:
    """examples/gateway.yaml falls back to the admin key `change-me-admin`: `config check` warns that it is an
    example value; with TG_ADMIN_KEY set to a real key the warning is gone."""
    path = str(EXAMPLES / "gateway.yaml")
    fallback = CliRunner().invoke(main, ["config", "check", path], env={"TG_ADMIN_KEY": None})
    assert fallback.exit_code == 0, fallback.output
    assert "admin_key: an example value ('change-me…'), not a secret" in fallback.output
    own = CliRunner().invoke(main, ["config", "check", path], env={"TG_ADMIN_KEY": "tg-admin-9c1f27ab40e6d3b8"})
    assert own.exit_code == 0, own.output
    assert "example value" not in own.output


def test_known_placeholders_are_told_from_real_keys() -> None:
    """change-me*, sk-xxx…, your-key… and friends are placeholders; generated-looking keys are not."""
    for value in ("change-me-admin", "changeme", "sk-xxxxxxxx", "your-key-here", "sk-your-api-key", "<api key>",
                  "sk-...", "secret", "REPLACE_ME"):  # fmt: skip
        assert placeholder(value) is not None, value
    for value in ("sk-3f9a1c0e7b2d4a6f8e0c1b3d5f7a9c2e", "tg-admin-9c1f27ab40e6d3b8", "sk-demo-primary-0000"):
        assert placeholder(value) is None, value
