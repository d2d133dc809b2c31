"""Routing decisions: pure logic over routes, provider state and measured stats (no HTTP here)."""

from tailgate.routing.ratelimit import TokenBucket
from tailgate.routing.weighted import Route, WeightedPolicy

__all__ = ["Route", "TokenBucket", "WeightedPolicy"]
