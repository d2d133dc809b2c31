"""The ``tailgate.scenario/v1`` results document as typed structs (schema in docs/scenarios.md).

:func:`tailgate.scenario.analysis.analyze_run` builds a :class:`ScenarioRun` per policy; the report, the verdicts
and the writer read fields, never string keys. Field order is the key order of the files written before (a
test rewrites a stored file byte for byte); ``UNSET`` fields are left out of the file, ``None`` is ``null``.
"""

from __future__ import annotations

from msgspec import UNSET, Struct, UnsetType

__all__ = [
    "BatchOutcome",
    "BatchPath",
    "CanaryCounts",
    "Check",
    "ConfigEcho",
    "Event",
    "Hedge",
    "InteractiveSide",
    "OverTime",
    "PhaseSpan",
    "ScenarioDocument",
    "ScenarioInfo",
    "ScenarioRun",
    "Section",
    "SpareUse",
    "Stats",
    "Step",
    "UpstreamCounts",
]

ConfigEcho = dict[str, object]
"""A section of the scenario file as the config's ``model_dump`` writes it (routes, SLO, providers, load): its
schema is the config's own (:mod:`tailgate.scenario.config`), echoed into the results for the record."""


class Stats(Struct, kw_only=True):
    """P50/P90/P99/max/mean rounded to 0.1 ms, and count; every stat null when empty."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    mean: float | None = None
    count: int = 0


class UpstreamCounts(Struct, kw_only=True):
    requests: int = 0
    rate_limited: int = 0
    errors: int = 0


class CanaryCounts(Struct, kw_only=True):
    """The monitor's canaries (its ``accuracy`` probes) to one provider: graded answers and the right ones."""

    graded: int = 0
    right: int = 0


class Section(Struct, kw_only=True):
    """One phase of a run (``name``, ``start_s``, ``end_s`` set) or the whole run (``overall``: those unset)."""

    name: str | UnsetType = UNSET
    start_s: float | UnsetType = UNSET
    end_s: float | UnsetType = UNSET
    # what the client saw
    requests: int
    errors: int
    failed_before_first_token: int
    failed_after_first_token: int
    errors_by_class: dict[str, int]
    ttft_ms: Stats
    e2e_ms: Stats
    cache_hit_rate: float | None
    # what the gateway's ledger says it served
    gateway_requests: int
    share: dict[str, float | None]
    share_by_class: dict[str, dict[str, int | float]]
    """Per traffic class: ``requests`` and each provider's share."""
    no_provider: int
    multi_attempt: int
    cost_per_1k: float | None
    provider_e2e_ms: dict[str, Stats]
    # what the providers saw
    upstream: dict[str, UpstreamCounts]
    upstream_requests: int
    upstream_rate_limited: int
    upstream_rate_limited_ratio: float | None
    extra_upstream_ratio: float | None
    # answer quality (set when the load sends tool calls or a monitor runs beside)
    tool_calls_checked: int | UnsetType = UNSET
    """Tool-call requests (``load.tool_calls``) answered with a success, each answer checked at the client."""
    tool_calls_broken: int | UnsetType = UNSET
    """Of those, the answers that reached the client broken (no tool call, arguments not JSON, an undeclared
    tool, or arguments not matching the schema: the tool signals)."""
    degraded_served: dict[str, dict[str, int]] | UnsetType = UNSET
    """Per provider, the degraded answers the simulator served (its truth rows' ``degraded``: ``canary_wrong``,
    ``tool_args_invalid_json`` …), to the gateway and the monitor alike."""
    canaries: dict[str, CanaryCounts] | UnsetType = UNSET
    """Per provider, the monitor's canaries sent in the span and graded (``monitor:``)."""


class Event(Struct, kw_only=True):
    """A fault or recovery of one provider and how fast the routing followed it."""

    at_s: float
    provider: str
    kind: str
    phase: str | UnsetType = UNSET
    cutover_s: float | UnsetType | None = UNSET
    below_10pct_s: float | UnsetType | None = UNSET
    readmit_s: float | UnsetType | None = UNSET
    configured_s: float | UnsetType | None = UNSET
    share_before: float | UnsetType | None = UNSET
    """A fault's provider's served share of the requests sent since its previous step (or the start)."""
    share_after: float | UnsetType | None = UNSET
    """Its served share of the requests sent from the fault to its next step (or the end)."""
    moved_s: float | UnsetType | None = UNSET
    """Seconds from the fault to the first request from which the provider served less than half its
    ``share_before`` of the next requests (``window_requests``); null: never."""

    def seconds(self, key: str) -> float | None:
        """One of the timing fields by its name (None when unset, null or unknown)."""
        value = {
            "cutover_s": self.cutover_s,
            "below_10pct_s": self.below_10pct_s,
            "readmit_s": self.readmit_s,
            "configured_s": self.configured_s,
            "moved_s": self.moved_s,
        }.get(key)
        return None if value is None or isinstance(value, UnsetType) else value


class OverTime(Struct, kw_only=True):
    bucket_s: float
    share: dict[str, list[float | None]]
    p99_e2e_ms: list[float | None]


class Hedge(Struct, kw_only=True):
    after: str | float
    """A percentile of the first route's TTFT (``p90``…) or seconds."""
    budget: float


class Check(Struct, kw_only=True):
    """One thing a batch scenario promises, judged from the run's numbers: ``value`` against ``limit`` by ``op``
    (``<=`` or ``>=``); ``ok`` null when there was nothing to judge it by (``value`` null)."""

    value: float | None
    op: str
    limit: float
    ok: bool | None


class SpareUse(Struct, kw_only=True):
    """How much of one provider's spare pacing budget the batch lane used while the batch had lines waiting."""

    provider: str
    target_rps: float
    """The pacing target: ``limits.rpm`` × ``routing.pacing.headroom`` ÷ 60."""
    from_s: float
    to_s: float
    target: float
    """Requests the target allows over the span."""
    interactive: int
    """Interactive requests the provider received in the span (its truth, 429s left out; matched to the ledger's
    interactive rows by the ``x-request-id`` the gateway sent)."""
    spare: float
    """``target`` − ``interactive``."""
    lane: int
    """The batch lane's requests the provider received in the span (the same way, matched to its ``batch-lane``
    rows); the gateway's probes count as neither."""
    share: float | None
    """``lane`` ÷ ``spare``; null when there was no spare."""


class BatchPath(Struct, kw_only=True):
    """The lines one path (``batch-lane``, ``provider-batch``) served: how many, by provider, at what cost."""

    lines: int
    providers: dict[str, int]
    cost: float
    cost_as_interactive: float


class InteractiveSide(Struct, kw_only=True):
    """The interactive load with the batch and in the baseline run without it (``baseline_*``)."""

    requests: int
    ttft_p90_ms: float | None
    refused: int
    """Interactive requests that failed for the client."""
    moved: int
    """Interactive requests served after more than one attempt, or by a provider the configured split gives
    none of their class (a pure fallback: a weight-0 route)."""
    baseline_requests: int | None = None
    baseline_ttft_p90_ms: float | None = None
    baseline_refused: int | None = None
    baseline_moved: int | None = None


class BatchOutcome(Struct, kw_only=True):
    """The scenario's batch in one run: what the client saw, what the ledger billed, and the checks."""

    id: str | None
    lines: int
    endpoint: str
    completion_window: str
    window_s: float
    submitted_s: float | None
    status: str | None
    took_s: float | None
    """Its batch object's end (``completed_at`` …) − ``created_at``."""
    request_counts: dict[str, int]
    answered: int
    """Distinct ``custom_id`` values in the output and error files."""
    answered_twice: int
    missing: int
    failed: int
    """Lines in the error file."""
    error: str | None
    paths: dict[str, BatchPath]
    cost: float | None
    """The ledger rows of its lines, summed."""
    cost_as_interactive: float | None
    """The same rows' tokens priced as interactive requests (the serving provider's live price, at that time)."""
    reported_cost: float | None
    """The batch object's ``tailgate.cost``."""
    pending_until_s: float | None
    """When its last line left the queue (taken by a path), as the runner saw the store."""
    spare: list[SpareUse]
    baseline: str | None
    """The run without the batch the interactive numbers compare against."""
    interactive: InteractiveSide
    checks: dict[str, Check]
    """``ttft_p90_ratio``, ``interactive_disturbed``, ``completed_in_window``, ``lane_spare_share``,
    ``cost_ratio``: docs/scenarios.md."""
    progress: list[list[float]]
    """``[t, completed, failed, pending]`` samples (at most 200)."""


class ScenarioRun(Struct, kw_only=True):
    """One policy's run."""

    name: str
    policy: str
    configured_by_class: dict[str, dict[str, float]]
    hedge: Hedge | None = None
    pacing: bool
    affinity: bool
    stopped_early: bool
    overall: Section
    phases: list[Section]
    events: list[Event]
    over_time: OverTime
    gateway_counters: dict[str, float]
    without_batch: bool | UnsetType = UNSET
    """True on a run that is the baseline of a run with the scenario's batch."""
    batch: BatchOutcome | UnsetType = UNSET
    """The scenario's batch, on a run that submitted it."""


class Step(Struct, kw_only=True):
    """One timeline step of the scenario file."""

    at: float
    kind: str
    phase: str | UnsetType = UNSET
    provider: str | UnsetType = UNSET
    clear: bool | UnsetType = UNSET
    set: ConfigEcho | UnsetType = UNSET


class PhaseSpan(Struct, kw_only=True):
    name: str
    start_s: float
    end_s: float


class ScenarioInfo(Struct, kw_only=True):
    """What was run: the scenario file's name, load, timeline, phases, and its config sections echoed."""

    name: str
    file: str
    description: str
    time_scale: float
    sim_time_scale: float
    seed: int
    alias: str
    routes: list[ConfigEcho]
    slo: ConfigEcho
    providers: dict[str, ConfigEcho]
    load: ConfigEcho
    timeline: list[Step]
    phases: list[PhaseSpan]
    window_requests: int
    batch: ConfigEcho | UnsetType = UNSET
    """The scenario's ``batch:`` section, when it has one."""


class ScenarioDocument(Struct, kw_only=True):
    """The whole ``--out`` document."""

    schema: str
    tailgate_version: str
    started_at: str
    command: list[str]
    partial: bool
    scenario: ScenarioInfo
    runs: list[ScenarioRun]
