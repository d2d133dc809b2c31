"""What one simulated provider is made from (``ProviderSpec``): built from CLI flags or sim YAML, read by the
provider and its HTTP face alike, so it sits below both."""

from __future__ import annotations

from dataclasses import dataclass, field

from tailgate.sim.faults import Faults, TimelineEntry
from tailgate.sim.presets import EngineParams

__all__ = ["ProviderSpec"]


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """Everything needed to start one simulated provider (built from CLI flags or sim YAML)."""

    name: str
    params: EngineParams
    preset: str = "custom"
    host: str = "127.0.0.1"
    port: int = 0
    seed: int = 0
    time_scale: float = 1.0
    models: tuple[str, ...] = ()
    api_keys: tuple[str, ...] = ()
    faults: Faults = field(default_factory=Faults)
    timeline: tuple[TimelineEntry, ...] = ()
    strict_fields: bool = True
    """Refuse unknown top-level fields; which vendor fields are *known* depends on the dialect."""
    truth_size: int = 5000
    truth_jsonl: str | None = None

    @property
    def strict(self) -> bool:
        """Refuse unknown top-level request fields?"""
        return self.strict_fields
