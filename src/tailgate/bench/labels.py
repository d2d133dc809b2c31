"""The short human labels of a run: ``target · load`` (``closed c=10``, ``open 20/s poisson``, ``stage 2 10→50``)."""

from __future__ import annotations

from msgspec import UnsetType

from tailgate.bench.schema import Load, Run, Target

__all__ = ["describe_load", "label", "run_label", "target_name"]


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def describe_load(load: Load) -> str:
    """A short human label: ``closed c=10``, ``open 20/s poisson``, ``stage 2 10→50``."""
    parts = [load.mode]
    if load.mode == "stage" and not isinstance(load.stage, UnsetType):
        parts.append(str(load.stage))
    if not isinstance(load.from_, UnsetType) and not isinstance(load.to, UnsetType):
        parts.append(f"{_num(load.from_)}→{_num(load.to)}")
    if not isinstance(load.concurrency, UnsetType):
        parts.append(f"c={load.concurrency}")
    if (rate := load.get_rate()) is not None:
        parts.append(f"{_num(load.rate) if isinstance(load.rate, int) else _num(rate)}/s")
    if not isinstance(load.arrival, UnsetType) and load.arrival:
        parts.append(load.arrival)
    return " ".join(parts)


def target_name(target: Target) -> str:
    return target.name or (target.base_url if isinstance(target.base_url, str) else "") or "?"


def label(target: Target, load: Load) -> str:
    """``target · load``."""
    return f"{target_name(target)} · {describe_load(load)}"


def run_label(run: Run) -> str:
    """``target · load`` for a run object."""
    return label(run.target, run.load)
