"""Helpers for the ``tailgate mock`` command: preset listing and specs from flags."""

from __future__ import annotations

from dataclasses import asdict

from rich.table import Table

from tailgate.sim.presets import PRESETS, preset
from tailgate.sim.provider import ProviderSpec


def preset_table() -> Table:
    table = Table(
        "preset",
        "slots",
        "queue",
        "prefill tok/s",
        "step ms (+/seq)",
        "pre-queue median s",
        "swing",
        "accuracy",
        "dialect",
        "thinking",
        "what it is",
        title="simulator presets",
    )
    for name, (params, description) in PRESETS.items():
        p = asdict(params)
        table.add_row(
            name,
            str(p["slots"]),
            str(p["queue_limit"]),
            f"{p['prefill_tps']:g}",
            f"{p['step_ms']:g} (+{p['step_per_seq_ms']:g})",
            f"{p['pre_median_s']:g}",
            f"{p['swing']:g}×",
            f"{p['accuracy']:.2%}",
            p["dialect"],
            "on" if p["thinking"] else "off",
            description,
        )
    return table


def specs_from_flags(
    name: str, host: str, port: int, seed: int, time_scale: float, models: tuple[str, ...]
) -> list[ProviderSpec]:
    return [
        ProviderSpec(
            name=name,
            params=preset(name),
            preset=name,
            host=host,
            port=port,
            seed=seed,
            time_scale=time_scale,
            models=models,
        )
    ]
