"""Routing policies, one module each, all with ``order(routes, traffic_class=None, exclude=()) -> list[Route]``.

- ``weighted``: static weights.
- ``adaptive``: configured weight × a smoothed health factor from P90 TTFT/E2E vs the SLO and the error rate.
- ``least-latency``: power of two choices on peak-EWMA latency × (in-flight + 1).
- ``cost``: cheapest route meeting the SLO, else the fastest.
"""

from tailgate.routing.policies._common import SLO, Policy, should_shed, split_by_class, weighted_order
from tailgate.routing.policies.adaptive import AdaptivePolicy, health_factor
from tailgate.routing.policies.cost import CostPolicy, Price
from tailgate.routing.policies.least_latency import LeastLatencyPolicy
from tailgate.routing.policies.weighted import WeightedPolicy

__all__ = [
    "SLO",
    "AdaptivePolicy",
    "CostPolicy",
    "LeastLatencyPolicy",
    "Policy",
    "Price",
    "WeightedPolicy",
    "health_factor",
    "should_shed",
    "split_by_class",
    "weighted_order",
]
