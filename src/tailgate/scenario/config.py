"""The scenario file (``tailgate scenario FILE``): simulated providers, a fault timeline, a load, policies.

```yaml
name: primary-degrades
providers:                          # simulated providers: the simulator's schema (tailgate mock --config)
  primary: {preset: provider-a}
  secondary: {preset: provider-a}
gateway:                            # a gateway config; providers' base_url and api_keys are filled in
  models:
    deepseek-v3.2:
      routes:
        - {provider: primary, model: deepseek-v3.2, weight: 80}
        - {provider: secondary, model: deepseek-v3.2, weight: 20, classes: [batch]}
  routing: {slo: {ttft_p90: 1.5s, e2e_p90: 3s}}
timeline:
  - {at: 30s, phase: degraded, provider: primary, set: {latency_multiplier: 5}}
  - {at: 90s, phase: recovered, provider: primary, clear: true}
load: {rate: 20, duration: 120s, classes: {interactive: 80%, batch: 20%}, max_tokens: 64}
policies: [weighted, adaptive, least-latency]
```

Validated once at load by the project's loader, so every error reads ``file:line: path: message``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from tailgate.config.loader import load_model
from tailgate.config.schema import GatewayConfig, HedgeConfig, SLOConfig
from tailgate.config.units import Fraction, Seconds
from tailgate.sim.config import SimProviderConfig
from tailgate.sim.faults import Faults
from tailgate.wire.batch import parse_completion_window

__all__ = [
    "BATCH_ENDPOINTS",
    "POLICIES",
    "BatchLoad",
    "LoadConfig",
    "MonitorSection",
    "PolicyRun",
    "ScenarioConfig",
    "ScenarioStep",
    "load_scenario",
]

PolicyName = Literal["weighted", "adaptive", "least-latency", "cost"]
POLICIES: tuple[str, ...] = ("weighted", "adaptive", "least-latency", "cost")
Name = Annotated[str, Field(min_length=1, max_length=64)]
PositiveSeconds = Annotated[Seconds, Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _problem(loc: tuple[int | str, ...], kind: str, message: str, value: Any) -> InitErrorDetails:
    return {"type": PydanticCustomError(kind, message), "loc": loc, "input": value}


class ScenarioStep(_Strict):
    """One moment of the timeline: start a phase, and/or change one provider's faults."""

    at: Seconds
    """Seconds after the load starts."""
    phase: Name | None = None
    """Start a new phase with this name (the results are split by phase)."""
    provider: Name | None = None
    set: Faults | None = None
    """Faults merged into the provider's active set (the simulator's ``POST /sim/faults``)."""
    clear: bool = False
    """Clear the provider's faults first (``DELETE /sim/faults``)."""

    @model_validator(mode="after")
    def _does_something(self) -> ScenarioStep:
        acts = self.set is not None or self.clear
        if acts and self.provider is None:
            raise ValueError("'set' and 'clear' need 'provider' (whose faults to change)")
        if self.provider is not None and not acts:
            raise ValueError("a step naming a provider needs 'set' (faults to apply) or 'clear: true'")
        if not acts and self.phase is None:
            raise ValueError("a step needs 'phase' (a phase marker) or 'provider' with 'set'/'clear'")
        return self

    @property
    def kind(self) -> Literal["fault", "recovery", "marker"]:
        """``fault`` (something set), ``recovery`` (only cleared) or ``marker`` (a phase boundary)."""
        if self.set is not None:
            return "fault"
        return "recovery" if self.clear else "marker"


class LoadConfig(_Strict):
    """The client load: open loop (``rate``) or closed loop (``concurrency``), the same for every policy."""

    rate: Annotated[float, Field(gt=0, le=100_000)] | None = None
    """Open loop: requests per second; latency counts from each request's intended send time."""
    arrival: Literal["constant", "poisson"] = "poisson"
    concurrency: Annotated[int, Field(ge=1, le=100_000)] | None = None
    """Closed loop: this many clients, each sending its next request when the previous one ends."""
    duration: PositiveSeconds = 120.0
    classes: dict[Name, Fraction] = Field(default_factory=dict)
    """Traffic-class mix sent as ``x-tailgate-class``, e.g. ``{interactive: 80%, batch: 20%}``."""
    stream: bool = True
    max_tokens: Annotated[int, Field(ge=1, le=100_000)] = 64
    input_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 128
    max_in_flight: Annotated[int, Field(ge=1)] = 10_000
    api: Literal["openai", "anthropic"] = "openai"
    """The protocol the load speaks to the gateway: OpenAI chat, or Anthropic's Messages API (``/v1/messages``)."""
    workload: Literal["synthetic", "multi-turn"] = "synthetic"
    """``multi-turn``: conversations of ``turns`` turns that grow (bench's ``multi-turn`` shape: each turn resends
    the conversation so far; ``input_tokens`` per user turn, ``max_tokens`` per answer), sent in order."""
    turns: Annotated[int, Field(ge=1, le=1000)] = 6
    tool_calls: Fraction = 0.0
    """Share of the requests that declare a tool (``get_forecast``) with ``tool_choice: required``; the client
    checks each answer's tool call (valid JSON, the declared tool, its schema) and the results count the broken
    ones that reached it (``tool_calls_broken``). OpenAI chat only."""

    @model_validator(mode="after")
    def _one_mode(self) -> LoadConfig:
        if (self.rate is None) == (self.concurrency is None):
            raise ValueError("give exactly one of 'rate' (open loop) or 'concurrency' (closed loop)")
        if self.classes and sum(self.classes.values()) <= 0:
            raise ValueError("'classes' shares must add up to more than 0")
        if self.tool_calls and self.api != "openai":
            raise ValueError("'tool_calls' needs api: openai (the tool-call check reads chat answers)")
        return self


MonitorWorkload = Literal["short", "long", "accuracy"]
_MONITOR_WORKLOADS: tuple[MonitorWorkload, ...] = ("short", "long", "accuracy")


class MonitorSection(_Strict):
    """``tailgate monitor`` beside the gateway: probe rounds against the simulators into the gateway's store."""

    interval: PositiveSeconds = 60.0
    """Seconds between rounds (``tailgate monitor --interval``'s default); scaled by ``--time-scale``."""
    jitter: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """A random delay of up to this share of the interval in each slot (``--jitter``)."""
    workloads: list[MonitorWorkload] = Field(default_factory=lambda: list(_MONITOR_WORKLOADS), min_length=1)
    """The probes of each round (``--workload``); ``accuracy`` asks one canary of the canary set per round."""


BATCH_ENDPOINTS: tuple[str, ...] = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
"""The endpoints a scenario's batch may target (its lines are built for the endpoint's body)."""


class BatchLoad(_Strict):
    """A batch job the scenario submits through the gateway's OpenAI Batch API (``/v1/files`` + ``/v1/batches``),
    as a client would, beside the load (docs/scenarios.md, "A batch beside the load")."""

    lines: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    """Requests in the input file (``custom_id`` ``line-1`` … ``line-N``)."""
    model: Name | None = None
    """The alias every line names (default: the scenario's ``model``)."""
    endpoint: Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings"] = "/v1/chat/completions"
    submit_at: Seconds = 0.0
    """Seconds after the load starts: the upload and ``POST /v1/batches`` then."""
    completion_window: str = "24h"
    """The batch's ``completion_window`` (``1h`` … ``14d``); not scaled by ``--time-scale`` (the gateway's API
    takes hours or days)."""
    input_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 128
    """Prompt length of each line (a synthetic prompt, as the load's)."""
    max_tokens: Annotated[int, Field(ge=1, le=100_000)] = 64
    wait: PositiveSeconds = 600.0
    """After the load ends, the run waits at most this long for the batch to end (then it is reported as not
    done in time and cancelled). A bound, not a time of the scenario: ``--time-scale`` leaves it (the gateway's own
    work per line does not shrink with it)."""
    baseline: bool = True
    """Also run every policy without the batch (same seed, same load), first: the verdicts compare the
    interactive latency and moves against it."""

    @property
    def window_s(self) -> float:
        return parse_completion_window(self.completion_window)

    @model_validator(mode="after")
    def _window(self) -> BatchLoad:
        try:
            parse_completion_window(self.completion_window)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return self


class PolicyRun(_Strict):
    """One gateway to compare: a routing policy, optionally with hedging on."""

    name: Name | None = None
    """Label in the results (default: the policy name)."""
    policy: PolicyName
    hedge: HedgeConfig | Literal[False] | None = None
    """``models.<alias>.hedge`` for this run (e.g. ``{after: p95, budget: 5%}``); ``false``: hedging off;
    unset: whatever the gateway section says."""
    pacing: bool | None = None
    """``routing.pacing.enabled`` for this run (``false``: no pacing below known limits, only pauses on 429s)."""
    affinity: bool | None = None
    """``routing.affinity.enabled`` for this run (conversation affinity, docs/routing.md promise 7)."""
    quality: bool | None = None
    """``routing.quality.enabled`` for this run (routing on answer quality, docs/routing.md promise 8)."""

    @property
    def label(self) -> str:
        return self.name or self.policy


def _policy_entry(value: Any) -> Any:
    return {"policy": value} if isinstance(value, str) else value


class ScenarioConfig(_Strict):
    """A whole scenario file."""

    name: Name | None = None
    description: str = ""
    seed: int = 0
    time_scale: Annotated[float, Field(gt=0, le=100)] = 1.0
    """The simulators' engine time scale (preset times ×); ``--time-scale`` multiplies every time on top."""
    model: Name | None = None
    """The alias the load sends (default: the only alias under ``gateway.models``)."""
    providers: dict[Name, SimProviderConfig] = Field(min_length=1)
    gateway: GatewayConfig
    initial_phase: Name = "healthy"
    timeline: list[ScenarioStep] = Field(default_factory=list)
    load: LoadConfig
    monitor: MonitorSection | None = None
    """``tailgate monitor``'s rounds beside each run (none unless given)."""
    batch: BatchLoad | None = None
    """A batch submitted through the gateway's Batch API during the load (none by default)."""
    policies: list[PolicyRun] = Field(
        default_factory=lambda: [
            PolicyRun(policy="weighted"),
            PolicyRun(policy="adaptive"),
            PolicyRun(policy="least-latency"),
        ],
        min_length=1,
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_gateway(cls, data: Any) -> Any:
        """Every simulated provider is a gateway provider; the runner fills base_url and api_keys."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        sims = out.get("providers")
        gw = out.get("gateway")
        if isinstance(sims, dict) and isinstance(gw, dict):
            gw = dict(gw)
            given = gw.get("providers")
            provs = dict(given) if isinstance(given, dict) else {}
            for name in sims:
                if provs.get(name) is None:
                    provs[name] = {}
            gw["providers"] = provs if given is None or isinstance(given, dict) else given
            out["gateway"] = gw
        if isinstance(out.get("policies"), list):
            out["policies"] = [_policy_entry(p) for p in out["policies"]]
        return out

    @model_validator(mode="after")
    def _consistent(self) -> ScenarioConfig:
        problems: list[InitErrorDetails] = []
        for name, prov in self.gateway.providers.items():
            if name not in self.providers:
                known = ", ".join(self.providers)
                problems.append(
                    _problem(
                        ("gateway", "providers", name),
                        "unknown_provider",
                        f"no simulated provider of this name under 'providers' (known: {known})",
                        name,
                    )
                )
            elif prov.base_url is not None:
                problems.append(
                    _problem(
                        ("gateway", "providers", name, "base_url"),
                        "base_url_set",
                        "leave base_url out: the scenario runner points it at the simulator",
                        prov.base_url,
                    )
                )
        for name, sim in self.providers.items():
            if sim.port != 0:
                problems.append(
                    _problem(
                        ("providers", name, "port"), "fixed_port", "scenarios bind port 0 (leave port out)", sim.port
                    )
                )
        for i, step in enumerate(self.timeline):
            if step.provider is not None and step.provider not in self.providers:
                problems.append(
                    _problem(
                        ("timeline", i, "provider"),
                        "unknown_provider",
                        f"no simulated provider of this name under 'providers' (known: {', '.join(self.providers)})",
                        step.provider,
                    )
                )
            if step.at >= self.load.duration:
                problems.append(
                    _problem(
                        ("timeline", i, "at"),
                        "after_end",
                        f"after the end of the load (load.duration is {self.load.duration:g}s)",
                        step.at,
                    )
                )
        if self.batch is not None:
            if self.batch.model is not None and self.batch.model not in self.gateway.models:
                problems.append(
                    _problem(
                        ("batch", "model"),
                        "unknown_alias",
                        "no alias of this name under 'gateway.models'",
                        self.batch.model,
                    )
                )
            if self.batch.submit_at >= self.load.duration:
                problems.append(
                    _problem(
                        ("batch", "submit_at"),
                        "after_end",
                        f"after the end of the load (load.duration is {self.load.duration:g}s)",
                        self.batch.submit_at,
                    )
                )
            if not self.gateway.batch.enabled:
                problems.append(
                    _problem(
                        ("gateway", "batch", "enabled"),
                        "batch_disabled",
                        "the scenario submits a batch: leave the gateway's Batch API on",
                        False,
                    )
                )
        if self.model is not None and self.model not in self.gateway.models:
            problems.append(
                _problem(("model",), "unknown_alias", "no alias of this name under 'gateway.models'", self.model)
            )
        if self.model is None and len(self.gateway.models) != 1:
            problems.append(
                _problem(("model",), "missing_alias", "several aliases under 'gateway.models': say which to load", None)
            )
        seen: set[str] = set()
        for i, run in enumerate(self.policies):
            if run.label in seen:
                problems.append(
                    _problem(("policies", i), "duplicate_policy", "another entry has this name; give 'name'", run.label)
                )
            seen.add(run.label)
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    def hedge_of(self, run: PolicyRun) -> HedgeConfig | None:
        """The hedging a run's gateway does for the scenario's alias (the run's, else the alias's, else routing's)."""
        if run.hedge is False:
            return None
        if run.hedge is not None:
            return run.hedge
        alias_hedge = self.gateway.models[self.alias].hedge
        return alias_hedge if alias_hedge is not None else self.gateway.routing.hedge

    @property
    def alias(self) -> str:
        return self.model if self.model is not None else next(iter(self.gateway.models))

    @property
    def batch_alias(self) -> str:
        """The alias a batch's lines name (``batch.model``, else the scenario's)."""
        return self.batch.model if self.batch is not None and self.batch.model is not None else self.alias

    @property
    def steps(self) -> list[ScenarioStep]:
        """The timeline in time order (stable for equal times)."""
        return sorted(self.timeline, key=lambda s: s.at)

    def select(self, names: list[str]) -> list[PolicyRun]:
        """The runs to do: ``--policy`` names (an entry's name, or a bare policy name), in the order given."""
        if not names:
            return list(self.policies)
        by_label = {r.label: r for r in self.policies}
        out = []
        for name in names:
            if name in by_label:
                out.append(by_label[name])
            elif name in POLICIES:
                out.append(PolicyRun(policy=name))  # type: ignore[arg-type]  # checked against POLICIES
            else:
                known = ", ".join([*by_label, *(p for p in POLICIES if p not in by_label)])
                raise ValueError(f"--policy {name}: not a policy of this scenario (known: {known})")
        return out

    def scaled(self, x: float) -> ScenarioConfig:
        """The same scenario with every time multiplied by ``x`` (rates and limits unchanged).

        Timeline, load duration, the simulators' engine times, fault durations, the SLO, a fixed hedge delay,
        the monitor's interval and a batch's ``submit_at`` scale; request rates, rate limits, concurrency and a
        batch's ``completion_window`` and ``wait`` (a bound, not a time of the scenario) do not. The gateway's own
        time constants (health window, smoothing, breaker cool-down, the quality window) do not scale.
        """
        if x == 1.0:
            return self
        timeline = [s.model_copy(update={"at": s.at * x, "set": _scaled_faults(s.set, x)}) for s in self.timeline]
        providers = {
            n: p.model_copy(update={"faults": _scaled_faults(p.faults, x) or p.faults})
            for n, p in self.providers.items()
        }
        routing = self.gateway.routing.model_copy(
            update={
                "slo": _scaled_slo(self.gateway.routing.slo, x),
                "hedge": _scaled_hedge(self.gateway.routing.hedge, x),
            }
        )
        models = {
            alias: m.model_copy(
                update={"slo": None if m.slo is None else _scaled_slo(m.slo, x), "hedge": _scaled_hedge(m.hedge, x)}
            )
            for alias, m in self.gateway.models.items()
        }
        policies = [
            p.model_copy(update={"hedge": p.hedge if p.hedge is False else _scaled_hedge(p.hedge, x)})
            for p in self.policies
        ]
        batch = self.batch
        if batch is not None:
            batch = batch.model_copy(update={"submit_at": batch.submit_at * x})
        return self.model_copy(
            update={
                "batch": batch,
                "time_scale": self.time_scale * x,
                "timeline": timeline,
                "providers": providers,
                "gateway": self.gateway.model_copy(update={"routing": routing, "models": models}),
                "load": self.load.model_copy(update={"duration": self.load.duration * x}),
                "monitor": None
                if self.monitor is None
                else self.monitor.model_copy(update={"interval": self.monitor.interval * x}),
                "policies": policies,
            }
        )


_TIME_FAULTS = (
    "spike_s",
    "stall_headers_s",
    "stall_first_token_s",
    "slow_drip_s",
    "batch_turnaround_s",
    "batch_expire_after_s",
)


def _scaled_faults(faults: Faults | None, x: float) -> Faults | None:
    if faults is None:
        return None
    set_fields = faults.model_fields_set
    update = {k: getattr(faults, k) * x for k in _TIME_FAULTS if k in set_fields and getattr(faults, k) is not None}
    if not update:
        return faults
    # Rebuild through validation so the "explicitly set" fields (what a merge applies) are kept.
    return Faults.model_validate({**faults.model_dump(include=set_fields), **update})


def _scaled_slo(slo: SLOConfig, x: float) -> SLOConfig:
    return SLOConfig(
        ttft_p90=None if slo.ttft_p90 is None else slo.ttft_p90 * x,
        e2e_p90=None if slo.e2e_p90 is None else slo.e2e_p90 * x,
    )


def _scaled_hedge(hedge: HedgeConfig | None, x: float) -> HedgeConfig | None:
    if hedge is None or isinstance(hedge.after, str):
        return hedge
    return hedge.model_copy(update={"after": hedge.after * x})


def load_scenario(path: str | Path) -> ScenarioConfig:
    """Load and validate a scenario YAML file (errors name file, line and path)."""
    return load_model(path, ScenarioConfig)
