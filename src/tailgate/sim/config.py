"""The simulator's YAML config (``tailgate mock --config sim.yaml``): several providers, one process.

```yaml
seed: 7
time_scale: 1.0            # multiply every preset time (0.01 runs the same shapes 100× faster)
control_port: 9100         # optional: /sim/<name>/{faults,truth,state} for all providers on one port
providers:
  primary:
    preset: provider-a
    port: 9001
    models: [deepseek-v3.2]          # empty: any model name is accepted
    engine: {slots: 64}              # override any preset parameter
    faults: {error_rate: 0.01}
    timeline:
      - {at: 30s, set: {latency_multiplier: 5}}
      - {at: 60s, clear: true}
```
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tailgate.config.loader import load_model
from tailgate.sim.faults import Faults, TimelineEntry
from tailgate.sim.presets import PRESETS, EngineParams, preset
from tailgate.sim.provider import ProviderSpec

PresetName = Literal[
    "instant",
    "provider-a",
    "provider-b",
    "provider-c",
    "provider-d",
    "provider-e",
    "aggregator",
    "naive",
    "openai",
    "vllm",
    "sglang",
    "reasoner",
]
Port = Annotated[int, Field(ge=0, le=65535)]


class EngineOverrides(BaseModel):
    """Any :class:`~tailgate.sim.presets.EngineParams` field; unset fields keep the preset's value."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slots: int | None = Field(None, ge=1)
    queue_limit: int | None = Field(None, ge=0)
    overflow_status: Literal[429, 503] | None = None
    prefill_tps: float | None = Field(None, gt=0)
    step_ms: float | None = Field(None, ge=0)
    step_per_seq_ms: float | None = Field(None, ge=0)
    jitter: float | None = Field(None, ge=0, le=3)
    pre_median_s: float | None = Field(None, ge=0)
    pre_sigma: float | None = Field(None, ge=0, le=3)
    swing: float | None = Field(None, ge=1)
    swing_period_s: float | None = Field(None, gt=0)
    default_output_tokens: int | None = Field(None, ge=1)
    max_output_tokens: int | None = Field(None, ge=1)
    accuracy: float | None = Field(None, ge=0, le=1)
    embed_ms: float | None = Field(None, ge=0)
    dialect: Literal["openai", "vllm", "sglang", "maas"] | None = None
    thinking: bool | None = None
    reasoning_median: float | None = Field(None, ge=1)
    reasoning_sigma: float | None = Field(None, ge=0, le=3)
    tool_call_rate: float | None = Field(None, ge=0, le=1)
    tool_result_call_rate: float | None = Field(None, ge=0, le=1)
    tool_arguments: dict[str, dict[str, Any]] | None = None
    max_tokens_cap: bool | None = None
    prefix_cache: bool | None = None
    cache_block_tokens: int | None = Field(None, ge=1, le=1_000_000)
    cache_blocks: int | None = Field(None, ge=1, le=100_000_000)
    cache_ttl_s: float | None = Field(None, gt=0)
    anthropic: bool | None = None
    price_input: float | None = Field(None, ge=0)
    price_output: float | None = Field(None, ge=0)
    price_currency: str | None = Field(None, min_length=1, max_length=8)
    batch_api: bool | None = None
    batch_price_ratio: float | None = Field(None, ge=0, le=1)
    batch_turnaround_s: float | None = Field(None, gt=0, le=14 * 86400)

    def apply(self, base: EngineParams) -> EngineParams:
        overrides = self.model_dump(exclude_none=True)
        if self.tool_arguments is not None:  # frozen params: (name, arguments JSON) pairs, in the given order
            overrides["tool_arguments"] = tuple((k, json.dumps(v)) for k, v in self.tool_arguments.items())
        return base.with_overrides(overrides)


class SimProviderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: PresetName = "provider-a"
    port: Port = 0
    models: list[str] = Field(default_factory=list)
    api_keys: list[str] = Field(default_factory=list)
    engine: EngineOverrides = Field(default_factory=EngineOverrides)
    faults: Faults = Field(default_factory=Faults)
    timeline: list[TimelineEntry] = Field(default_factory=list)
    strict_fields: bool = True
    """Refuse unknown request fields with a 400 as OpenAI does; false ignores them like many providers.
    The vendor fields of the preset's dialect (vLLM's ``ignore_eos`` …) are known, so never refused."""
    seed: int | None = None
    truth_jsonl: str | None = None


class SimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    host: str = "127.0.0.1"
    time_scale: float = Field(1.0, gt=0, le=100)
    control_port: Port | None = None
    truth_size: int = Field(5000, ge=1, le=1_000_000)
    providers: dict[str, SimProviderConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct_ports(self) -> SimConfig:
        seen: dict[int, str] = {}
        for name, prov in self.providers.items():
            if prov.port and prov.port in seen:
                raise ValueError(f"providers {seen[prov.port]} and {name} both use port {prov.port}")
            if prov.port:
                seen[prov.port] = name
        return self

    def specs(self) -> list[ProviderSpec]:
        """One :class:`ProviderSpec` per provider, seeds derived from the top-level seed."""
        out = []
        for i, (name, prov) in enumerate(self.providers.items()):
            out.append(
                ProviderSpec(
                    name=name,
                    params=prov.engine.apply(preset(prov.preset)),
                    preset=prov.preset,
                    host=self.host,
                    port=prov.port,
                    seed=prov.seed if prov.seed is not None else self.seed * 1000 + i,
                    time_scale=self.time_scale,
                    models=tuple(prov.models),
                    api_keys=tuple(prov.api_keys),
                    faults=prov.faults,
                    timeline=tuple(prov.timeline),
                    strict_fields=prov.strict_fields,
                    truth_size=self.truth_size,
                    truth_jsonl=prov.truth_jsonl,
                )
            )
        return out


def load_sim_config(path: str | Path) -> SimConfig:
    """Load and validate a simulator YAML file (errors name file, line and path)."""
    return load_model(path, SimConfig)


assert set(PresetName.__args__) == set(PRESETS), "PresetName must list every preset"  # type: ignore[attr-defined]
