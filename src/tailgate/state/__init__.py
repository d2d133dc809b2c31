"""Fleet state: one protocol (:class:`SharedState`), two backends (``local``, ``redis``). docs/fleet.md."""

from tailgate.state.factory import open_state
from tailgate.state.local import LocalState, default_replica_id
from tailgate.state.protocol import (
    Adjustment,
    Admission,
    Backend,
    Claim,
    Lease,
    Reservation,
    SharedState,
    Slot,
    StateStatus,
)

__all__ = [
    "Adjustment",
    "Admission",
    "Backend",
    "Claim",
    "Lease",
    "LocalState",
    "Reservation",
    "SharedState",
    "Slot",
    "StateStatus",
    "default_replica_id",
    "open_state",
]
