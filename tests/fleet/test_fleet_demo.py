"""`tailgate demo --replicas N`: the demo's gateway as a fleet on a private redis-server."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tailgate.cli import main


@pytest.mark.usefixtures("redis_binary")
# Thread method: once (issue 25's first CI run, after the fleet tests, machine at load 10) this test hung in the
# demo's event loop, where SIGALRM (the signal method) never got through; the thread method dumps every stack
# and ends the run, so a hang fails loudly with its cause instead of holding CI until its 90 minutes are up.
@pytest.mark.timeout(60, method="thread")
def test_demo_starts_a_fleet_and_stops_it() -> None:
    """Two replicas on one port answer the demo's check requests; the demo says it runs a fleet."""
    args = ["demo", "--duration", "0", "--requests", "2", "--time-scale", "0.05", "--replicas", "2"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "2 gateway replicas on one port" in result.output
    assert "Traceback" not in result.output
