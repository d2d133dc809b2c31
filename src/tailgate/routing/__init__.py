"""Routing decisions: pure logic over routes, provider state and measured stats (no HTTP here).

Every time source is an injected ``clock`` (monotonic seconds); every random choice an injectable
``random.Random``. See docs/routing.md for the policies, formulas, defaults and how the gateway wires them.
"""

from tailgate.routing.affinity import Affinity, AffinitySettings, Sticky, affinity_key
from tailgate.routing.breaker import BreakerConfig, BreakerRegistry, CircuitBreaker, Transition
from tailgate.routing.health import HealthRegistry, ProviderHealth
from tailgate.routing.hedge import HedgeBudget, hedge_delay
from tailgate.routing.pacing import Pacer, retry_after_s
from tailgate.routing.policies import (
    SLO,
    AdaptivePolicy,
    CostPolicy,
    LeastLatencyPolicy,
    Policy,
    Price,
    WeightedPolicy,
    should_shed,
)
from tailgate.routing.quality import QualityBoard, QualitySettings, SignalCounts
from tailgate.routing.ratelimit import TokenBucket
from tailgate.routing.route import Route

__all__ = [
    "SLO",
    "AdaptivePolicy",
    "Affinity",
    "AffinitySettings",
    "BreakerConfig",
    "BreakerRegistry",
    "CircuitBreaker",
    "CostPolicy",
    "HealthRegistry",
    "HedgeBudget",
    "LeastLatencyPolicy",
    "Pacer",
    "Policy",
    "Price",
    "ProviderHealth",
    "QualityBoard",
    "QualitySettings",
    "Route",
    "SignalCounts",
    "Sticky",
    "TokenBucket",
    "Transition",
    "WeightedPolicy",
    "affinity_key",
    "hedge_delay",
    "retry_after_s",
    "should_shed",
]
