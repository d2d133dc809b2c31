"""The ``weighted`` policy lives in ``tailgate.routing.weighted`` (kept there); re-exported here."""

from tailgate.routing.weighted import Route, WeightedPolicy

__all__ = ["Route", "WeightedPolicy"]
