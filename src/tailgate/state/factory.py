"""Open the backend the config names (``state.backend``)."""

from __future__ import annotations

from tailgate.config.schema import StateConfig
from tailgate.state.local import LocalState
from tailgate.state.protocol import SharedState

__all__ = ["open_state"]


def open_state(config: StateConfig, *, replica: str | None = None) -> SharedState:
    """A not yet started backend for ``config`` (``await state.start()`` next)."""
    replica = replica or config.replica
    if config.backend == "redis":
        from tailgate.state.redis import RedisState  # redis-py is imported only when a fleet is configured

        return RedisState(config, replica=replica)
    return LocalState(replica)
