"""The ``tailgate.bench/v1`` results document as typed structs, from the recorder to the writers.

Every object of the document (docs/bench-results.md) is a :class:`msgspec.Struct` here; the code between
:class:`~tailgate.bench.results.RunRecorder` and the writers passes these, never plain dicts, so strict mypy
checks every field read. JSON appears only at the edge: :func:`to_json_obj` (the document's builtins, key
order = field order) for the writers, :func:`read_document` for a file read back.

The field order of each struct is the key order of the files written before the structs existed (a test
rewrites stored files byte for byte: tests/bench/test_results_compat.py). A field that the writer leaves out
unless it applies (``tokens.reasoning``, ``goodput``, ``workload``, ...) defaults to :data:`msgspec.UNSET`,
which is omitted on output; ``None`` is written as ``null``. A field that files written by earlier versions
lack defaults to ``UNSET`` too, so those files still read and write back unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import msgspec
from msgspec import UNSET, Struct, UnsetType, field

from tailgate.stats._schema import HistogramWire

__all__ = [
    "UNSET",
    "Accuracy",
    "BenchDocument",
    "CacheSummary",
    "Capacity",
    "CapacityPoint",
    "Clock",
    "DecayAtAnswer",
    "DecayRow",
    "Goodput",
    "HeaderRate",
    "InputCost",
    "LimitEntry",
    "Load",
    "PriceShown",
    "PromptTokens",
    "RateFlag",
    "RateLimit",
    "Run",
    "Stats",
    "Target",
    "ThresholdResult",
    "Throughput",
    "TimelinePoint",
    "Tokens",
    "UnsetType",
    "WorkloadInfo",
    "from_json_obj",
    "to_json_obj",
    "to_json_obj_map",
]

Num = int | float
"""A number as the file has it (an int stays an int on the way back: ``20`` never becomes ``20.0``)."""


class Target(Struct, kw_only=True, frozen=True):
    """The endpoint a run measured."""

    name: str
    base_url: str | UnsetType = UNSET
    model: str | UnsetType = UNSET
    api: str | UnsetType = UNSET
    """Written only for ``anthropic`` (``openai`` is the default)."""


class Load(Struct, kw_only=True, frozen=True):
    """The load level of a run; the fields a mode uses, in the order each mode writes them:
    closed ``mode, concurrency``; open ``mode, rate, arrival``; replay ``mode, replay, time_scale, rate``;
    stage ``mode, stage, from, to, duration_s``."""

    mode: str
    replay: str | UnsetType = UNSET
    time_scale: Num | UnsetType = UNSET
    stage: int | UnsetType = UNSET
    from_: Num | UnsetType = field(default=UNSET, name="from")
    to: Num | UnsetType = UNSET
    duration_s: Num | UnsetType = UNSET
    concurrency: int | UnsetType = UNSET
    rate: Num | UnsetType | None = UNSET
    arrival: str | UnsetType = UNSET

    def items(self) -> list[tuple[str, object]]:
        """The fields this load sets, by their file names, in file order (``from``, not ``from_``)."""
        data = msgspec.to_builtins(self)
        assert isinstance(data, dict)
        return list(data.items())

    def get_rate(self) -> float | None:
        return None if self.rate is None or isinstance(self.rate, UnsetType) else float(self.rate)

    def get_concurrency(self) -> int | None:
        return None if isinstance(self.concurrency, UnsetType) else self.concurrency


class Stats(Struct, kw_only=True):
    """P50/P90/P95/P99/max/mean rounded to 3 decimals, and count; every stat null when empty."""

    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
    mean: float | None = None
    count: int = 0

    def stat(self, name: str) -> float | None:
        """One statistic by its key (``p50`` … ``mean``); None for an unknown key."""
        value = getattr(self, name, None) if name in _STAT_NAMES else None
        return None if value is None else float(value)


_STAT_NAMES = frozenset(("p50", "p90", "p95", "p99", "max", "mean"))


class Throughput(Struct, kw_only=True):
    duration_s: float | None = None
    req_per_s: float | None = None
    attempts_per_s: float | None = None
    output_tokens_per_s: float | None = None


class Tokens(Struct, kw_only=True):
    output: int
    input: int | None = None
    estimated: bool = False
    reasoning: int | UnsetType = UNSET
    """Of ``output``, spent thinking; written only when non-zero."""


class TimelinePoint(Struct, kw_only=True):
    t: int
    ok: int
    errors: int
    output_tokens: int


class Accuracy(Struct, kw_only=True):
    right: int
    total: int
    pct: float


class Clock(Struct, kw_only=True):
    start: float | None = None
    stop: float | None = None
    last: float | None = None


class Goodput(Struct, kw_only=True):
    expr: str
    limits_ms: dict[str, float]
    good: int
    req_per_s: float | None = None
    fraction: float | None = None


class PromptTokens(Struct, kw_only=True):
    count: int
    intended_mean: float
    usage_mean: float
    usage_minus_intended_mean: float


class CacheSummary(Struct, kw_only=True):
    requests: int
    reported: int
    reported_prompt_tokens: int
    cached_tokens: int
    hit_rate: float | None = None


class RateLimit(Struct, kw_only=True):
    steady_per_s: float | UnsetType = UNSET
    steady_admitted: int | UnsetType = UNSET
    steady_s: float | UnsetType = UNSET
    refused: int = 0
    refused_ms: Stats = field(default_factory=Stats)
    retry_after_s_max: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    remaining_min: dict[str, int] = field(default_factory=dict)
    histogram: HistogramWire | UnsetType = UNSET


class PriceShown(Struct, kw_only=True):
    input: float
    cached_input: float


class InputCost(Struct, kw_only=True):
    per_1k_requests: float
    uncached_per_1k_requests: float
    currency: str
    price: PriceShown


class Run(Struct, kw_only=True):
    """One run: one target at one load level or stage (``RunRecorder.to_run``)."""

    target: Target
    load: Load
    requests: int
    successes: int
    errors: dict[str, int]
    error_examples: dict[str, str] | UnsetType = UNSET
    error_rate: float | None = None
    cancelled: int | UnsetType = UNSET
    throughput: Throughput
    tokens: Tokens
    metrics: dict[str, Stats]
    timeline: list[TimelinePoint] | UnsetType = UNSET
    accuracy: Accuracy | UnsetType | None = UNSET
    clock: Clock | UnsetType = UNSET
    histograms: dict[str, HistogramWire] | UnsetType = UNSET
    """Written by every run; a hand-made document without them still reads (the report then names the runs)."""
    goodput: Goodput | UnsetType = UNSET
    prompt_tokens: PromptTokens | UnsetType = UNSET
    cache: CacheSummary | UnsetType = UNSET
    rate_limit: RateLimit | UnsetType = UNSET
    input_cost: InputCost | UnsetType | None = UNSET
    """Added by the command from ``--price``."""

    def metric(self, name: str, stat: str) -> float | None:
        """``metrics[name][stat]`` or None when the run has no such value."""
        s = self.metrics.get(name)
        return None if s is None else s.stat(stat)

    def histogram(self, name: str) -> HistogramWire | None:
        """``histograms[name]`` or None."""
        return None if isinstance(self.histograms, UnsetType) else self.histograms.get(name)

    def refused(self) -> int:
        """Requests refused with 429."""
        return self.errors.get("rate_limited", 0)

    def points(self) -> list[TimelinePoint]:
        return [] if isinstance(self.timeline, UnsetType) else self.timeline


# -- the document's other sections -----------------------------------------------------------------


class DecayRow(Struct, kw_only=True):
    target: str
    concurrency: int
    p99_e2e_ratio: float | None
    p99_ttft_ratio: float | None
    mean_tok_s_ratio: float | None
    req_per_s: float | None
    p99_e2e_ms: float | None
    p99_ttft_ms: float | None
    mean_tok_s: float | None
    output_tokens_per_s: float | None
    output_tokens_per_s_ratio: float | None
    error_rate: float | None


class ThresholdResult(Struct, kw_only=True):
    expr: str
    run: int
    target: str | None
    load: Load
    value: float | None
    limit: float
    unit: str
    passed: bool
    note: str | None


class HeaderRate(Struct, kw_only=True):
    """The limit stated in ``x-ratelimit-*-requests`` headers, per second."""

    limit: float
    period_s: float
    per_s: float
    how: str


class RateFlag(Struct, kw_only=True):
    """A target whose runs met 429s (the document's ``rate_limits``)."""

    target: str
    per_s: float | None
    rpm: float | None
    tpm_header: float | None
    limit_requests_header: float | None
    retry_after_s_max: float | None
    refused: int
    requests: int
    from_run: int
    steady_admitted: int | None
    header: HeaderRate | None
    trust: str
    answer_per_s: float | None
    why: str
    flag: str


class LimitEntry(Struct, kw_only=True):
    """One target's ``--find-limit`` answer (the document's ``limits``)."""

    target: str | None
    found: bool
    per_s: float | None
    rpm: float | None
    tpm_header: float | None
    limit_requests_header: float | None
    header: HeaderRate | None
    trust: str | None
    answer_per_s: float | None
    why: str | None
    steady_admitted: int | None
    retry_after_s_max: float | None
    refused_at_offered_per_s: float | None
    rates_tried: list[float | None]
    requests_sent_max: int
    cap: int
    note: str | None
    summary: str


class CapacityPoint(Struct, kw_only=True):
    """One level of a capacity search's curve (its repeats pooled)."""

    level: float
    passed: bool
    repeats: int
    req_per_s: float | None
    attempts_per_s: float | None
    output_tokens_per_s: float | None
    goodput_req_per_s: float | None
    error_rate: float | None
    rate_limited: int
    ttft_ms_p50: float | None
    ttft_ms_p90: float | None
    ttft_ms_p99: float | None
    e2e_ms_p50: float | None
    e2e_ms_p90: float | None
    e2e_ms_p99: float | None
    mean_tok_s: float | None
    completed_per_s: float | None
    values: list[dict[str, float | bool | None]]
    """Per repeat: each threshold's value by its expression (and ``completed_per_s``/``keeps_up`` by rate)."""

    def latency(self, metric: str, stat: str) -> float | None:
        """``{metric}_{stat}`` of the curve (``e2e_ms``/``ttft_ms`` × ``p50``/``p90``/``p99``)."""
        value = getattr(self, f"{metric}_{stat}", None) if metric in ("ttft_ms", "e2e_ms") else None
        return None if value is None else float(value)


class DecayAtAnswer(Struct, kw_only=True):
    base_level: float
    level: float | None
    p99_e2e_ratio: float | None
    p99_ttft_ratio: float | None
    mean_tok_s_ratio: float | None


class Capacity(Struct, kw_only=True):
    """One target's ``--find-max`` answer (the document's ``capacity``)."""

    target: str | None
    by: str
    thresholds: list[str]
    answer: float | None
    failed_at: float | None
    uncertainty: float | None
    ceiling: float
    ceiling_held: bool
    knee: float | None
    knee_metric: str
    decay_at_answer: DecayAtAnswer | None
    rate_limited_from: float | None
    service_rate_per_s: float | None
    curve: list[CapacityPoint]
    levels_run: list[float]
    runs: list[int]
    summary: str


class WorkloadInfo(Struct, kw_only=True):
    """A named workload (``--workload``/``--tokenizer``): the document's ``workload``."""

    name: str
    tokenizer: str
    exact_lengths: bool
    library: str | None
    prefix_tokens: int | UnsetType = UNSET
    unique_tokens_mean: Num | UnsetType = UNSET
    prefix_share: float | UnsetType = UNSET
    input_cost_ratio_all_hits: float | UnsetType = UNSET
    cache_price_ratio: float | UnsetType = UNSET
    cache_price_from: str | UnsetType = UNSET
    turns: int | UnsetType = UNSET


class BenchDocument(Struct, kw_only=True):
    """The whole ``results.json``."""

    schema: str
    tailgate_version: str
    command: list[str]
    started_at: float
    finished_at: float
    runs: list[Run]
    decay: list[DecayRow] = field(default_factory=list)
    thresholds: list[ThresholdResult] = field(default_factory=list)
    thresholds_passed: bool | None = None
    notes: list[str] = field(default_factory=list)
    limits: list[LimitEntry] | UnsetType = UNSET
    capacity: list[Capacity] | UnsetType = UNSET
    workload: WorkloadInfo | UnsetType = UNSET
    rate_limits: list[RateFlag] | UnsetType = UNSET


T = TypeVar("T")


def to_json_obj(obj: Struct) -> object:
    """The JSON-able builtins of a struct (dicts in field order, ``UNSET`` fields left out)."""
    return msgspec.to_builtins(obj)


def to_json_obj_map(obj: Mapping[str, Struct]) -> object:
    """The JSON-able builtins of a mapping of structs."""
    return msgspec.to_builtins(obj)


def from_json_obj(data: object, kind: type[T]) -> T:
    """A struct from decoded JSON; a missing or mistyped field raises :class:`msgspec.ValidationError`
    (a ``ValueError``) naming its path."""
    return msgspec.convert(data, kind)
