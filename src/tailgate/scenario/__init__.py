"""Scenarios (``tailgate scenario FILE``): compare routing policies on a scripted fault timeline.

A composition layer like ``tailgate.demo``: it starts simulated providers (``tailgate.sim``), one gateway
per policy (``tailgate.gateway``), and drives the load tester's generator (``tailgate.bench``) through it,
then compares latency, errors, shares and cut-over times per phase. See docs/scenarios.md.
"""

from tailgate.scenario.config import ScenarioConfig, load_scenario
from tailgate.scenario.document import SCHEMA, build_document, check_document
from tailgate.scenario.runner import run_scenario

__all__ = ["SCHEMA", "ScenarioConfig", "build_document", "check_document", "load_scenario", "run_scenario"]
