"""The dashboard: a leaderboard, time series, an hour-of-day heatmap and the gateway's live state, in one
offline page over the tailgate store (docs/dashboard.md).

A lower layer under the faces: the gateway mounts it with its live state and drain/enable controls,
``tailgate monitor --serve`` without them. It reads the store (``tailgate.ledger``) and never writes it.
"""

from tailgate.dashboard.api import Controls, LiveCallback, live_view, mount

__all__ = ["Controls", "LiveCallback", "live_view", "mount"]
