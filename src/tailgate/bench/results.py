"""Results of a load test: one :class:`RunRecorder` per run, the ``results.json`` document, CSV.

A *run* is one target at one load level (a closed-loop concurrency, an open-loop rate) or stage.
:class:`RunRecorder` folds every :class:`~tailgate.upstream.events.CallResult` of a run into
mergeable histograms and counters, so a run costs O(buckets) memory however long it lasts and the
recorders of several generator processes merge exactly. ``to_dict`` gives the run object of the
JSON schema (documented in docs/bench-results.md); it carries the serialized histograms, so runs
can be merged and reports re-rendered from the file alone.

Counting rules (docs/metrics.md):

- ``requests`` = successes + errors. A ``cancelled`` call (the generator stopped consuming it, e.g. at
  Ctrl-C or the end of the run) is neither: it is left out of the run and only counted as
  ``cancelled``.
- Latency metrics (TTFT, E2E, ITL, TPOT, per-request tok/s), token counts and throughput come from
  successful requests only; a failure's partial timings would mix two populations.
- Open loop: TTFT and E2E are measured from the *intended* send time, i.e. the call's own value plus
  the schedule lag (actual − intended send). ITL, TPOT and per-request tok/s are differences of
  times within the call, so the lag cancels out of them. The lag itself is recorded in
  ``schedule_lag_ms`` for every request, successful or not.
- ITL is pooled: every gap of every request is one sample.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec

from tailgate.bench.cache import CacheTally
from tailgate.bench.goodput import SLO
from tailgate.bench.labels import describe_load, label, run_label, target_name
from tailgate.bench.ratelimit import steady_rate
from tailgate.bench.schema import (
    UNSET,
    Accuracy,
    Clock,
    Goodput,
    Load,
    PromptTokens,
    RateLimit,
    Run,
    Stats,
    Target,
    Throughput,
    TimelinePoint,
    Tokens,
    UnsetType,
    from_json_obj,
    to_json_obj,
)
from tailgate.stats import LatencyHistogram
from tailgate.stats._schema import HistogramWire
from tailgate.upstream.events import CallResult

__all__ = [
    "CSV_METRICS",
    "ERROR_KEYS",
    "METRIC_NAMES",
    "SCHEMA",
    "SCHEMA_VERSION",
    "ResultsError",
    "RunRecorder",
    "describe_load",
    "error_key",
    "label",
    "run_label",
    "summarize",
    "target_name",
]

SCHEMA_NAME = "tailgate.bench"
SCHEMA_VERSION = 1
SCHEMA = f"{SCHEMA_NAME}/v{SCHEMA_VERSION}"

ERROR_KEYS = (
    "rate_limited",
    "insufficient_quota",
    "http_4xx",
    "http_5xx",
    "timeout",
    "connect",
    "malformed",
    "cut",
    "stream_error",
    "other",
)

#: Latency-like metrics every run reports, in report order.
METRIC_NAMES = ("ttft_ms", "e2e_ms", "itl_ms", "tpot_ms", "output_tokens_per_s")
#: Open-loop runs also report this one.
LAG_METRIC = "schedule_lag_ms"
#: The metrics with P50/P90/P95/P99/max/mean columns in the CSV.
CSV_METRICS = METRIC_NAMES
STATS = ("p50", "p90", "p95", "p99", "max", "mean")

_EXAMPLE_MAX = 300
_DIRECT_KEYS = frozenset(ERROR_KEYS) - {"timeout", "other"}


class ResultsError(ValueError):
    """A results file or run object that this version cannot read."""


def error_key(error_class: str) -> str | None:
    """The ``errors`` key an upstream error class is counted under; None for ``cancelled``."""
    if error_class == "cancelled":
        return None
    if error_class in _DIRECT_KEYS:
        return error_class
    if error_class.startswith("timeout"):
        return "timeout"
    return "other"  # http_other and anything a later upstream version adds


def _is_open_loop(load: Load) -> bool:
    """Open loop: ``mode == "open"``, or a stage that paces by rate rather than concurrency."""
    return load.mode == "open" or (load.mode == "stage" and load.get_rate() is not None)


def _r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def summarize(h: LatencyHistogram) -> Stats:
    """P50/P90/P95/P99/max/mean rounded to 3 decimals, and count; every stat null when empty."""
    if h.count == 0:
        return Stats()
    s = h.summary()
    return Stats(
        p50=round(s["p50"], 3),
        p90=round(s["p90"], 3),
        p95=round(s["p95"], 3),
        p99=round(s["p99"], 3),
        max=round(s["max"], 3),
        mean=round(s["mean"], 3),
        count=s["count"],
    )


def _wire(h: LatencyHistogram) -> HistogramWire:
    d = h.to_dict()
    return HistogramWire(
        version=d["version"],
        unit=d["unit"],
        count=d["count"],
        total=d["total"],
        min=d["min"],
        max=d["max"],
        buckets=d["buckets"],
    )


def _histogram(w: HistogramWire) -> LatencyHistogram:
    return LatencyHistogram.from_dict(msgspec.structs.asdict(w))


def _example(result: CallResult) -> str:
    if result.detail:
        text = result.detail
    elif result.error is not None:
        text = str(result.error)
    else:
        text = f"{result.error_class} (status {result.status})" if result.status else str(result.error_class)
    return text if len(text) <= _EXAMPLE_MAX else text[: _EXAMPLE_MAX - 1] + "…"


class RunRecorder:
    """Aggregates one run (one target at one load level/stage) exactly and cheaply.

    Call :meth:`start` when measurement begins (after warm-up), :meth:`add` for every finished
    call, :meth:`stop` at the end; :meth:`to_dict` gives the run object of the results schema.
    ``requests``, ``successes``, ``errors`` and :meth:`live_p90_e2e` are the live view for a
    progress display.
    """

    def __init__(self, target: Target, load: Load) -> None:
        self.target = target
        self.load = load
        self.open_loop = _is_open_loop(self.load)
        self.requests = 0
        self.successes = 0
        self.errors = 0
        self.cancelled = 0
        self.error_counts: dict[str, int] = dict.fromkeys(ERROR_KEYS, 0)
        self.error_examples: dict[str, str] = {}
        self.output_tokens = 0
        self.input_tokens: int | None = None
        self.tokens_estimated = False
        self.accuracy_right = 0
        self.accuracy_total = 0
        self.t_start: float | None = None
        self.t_stop: float | None = None
        self.t_last: float | None = None  # latest t_done seen (duration fallback when never stopped)
        # second (relative to t_start) -> [ok, errors, output_tokens]
        self.timeline: dict[int, list[int]] = {}
        self.ttft = LatencyHistogram()
        self.ttft_answer = LatencyHistogram()
        """Time to the first answer token (not reasoning): beside TTFT, what a thinking model's user waits for."""
        self.reasoning_tokens = 0
        self.e2e = LatencyHistogram()
        self.itl = LatencyHistogram()
        self.tpot = LatencyHistogram()
        self.tok_s = LatencyHistogram()
        self.lag = LatencyHistogram()
        # Goodput (--goodput) and rate-limit honesty (docs/bench.md): additive to the v1 run object.
        self.slo: SLO | None = None
        self.good = 0
        self.refused = LatencyHistogram()
        """Latency of the requests the provider refused with 429 (kept apart from the admitted ones)."""
        self.retry_after_max: float | None = None
        self.ratelimit_headers: dict[str, str] = {}
        """The last ``x-ratelimit-*`` values seen (limit, remaining, reset; requests and tokens)."""
        self.remaining_min: dict[str, int] = {}
        self.sends: list[tuple[float, bool]] = []
        """Open loop: (send time, refused with 429) of every counted request, for the limiter's steady state."""
        self.prompt_counts = [0, 0, 0]
        """Successes with a known intended prompt length and usage: [count, sum intended, sum usage]."""
        self.cache = CacheTally()
        """Prompt caching, from usage (:mod:`tailgate.bench.cache`)."""

    def note_prompt(self, intended: int, result: CallResult) -> None:
        """Compare a request's intended prompt length with the provider's ``usage.prompt_tokens``."""
        if result.ok and result.prompt_tokens is not None:
            c = self.prompt_counts
            c[0] += 1
            c[1] += intended
            c[2] += result.prompt_tokens

    def note_headers(self, headers: Mapping[str, str]) -> None:
        """Keep the ``x-ratelimit-*`` headers of a response (the latest value, the lowest remaining)."""
        for name, value in headers.items():
            low = name.lower()
            if not low.startswith("x-ratelimit-"):
                continue
            key = low[len("x-ratelimit-") :]
            self.ratelimit_headers[key] = value
            if key.startswith("remaining-"):
                try:
                    n = int(float(value))
                except ValueError:
                    continue
                old = self.remaining_min.get(key)
                self.remaining_min[key] = n if old is None else min(old, n)

    # -- recording ---------------------------------------------------------------------------

    def start(self, t: float) -> None:
        """``time.perf_counter()`` when measurement begins (after warm-up)."""
        self.t_start = t

    def stop(self, t: float) -> None:
        """End of measurement; the run's duration is ``stop − start``."""
        self.t_stop = t

    def add(
        self,
        result: CallResult,
        *,
        lag_ms: float = 0.0,
        t_done: float | None = None,
        accuracy: bool | None = None,
        sent_at: float | None = None,
    ) -> None:
        """Fold in one finished call.

        ``lag_ms``: open loop, actual − intended send time (>= 0; negative values count as 0);
        added to TTFT and E2E and recorded as ``schedule_lag_ms``. ``t_done``: perf_counter when the
        call finished, for the per-second timeline (now when omitted). ``accuracy``: whether the
        answer was right, for runs that check answers. ``sent_at``: open loop, perf_counter when the
        request went out (kept with whether it was refused: the limiter's steady state, ``ratelimit.steady_rate``).
        """
        ec = result.error_class
        key = None if ec is None else error_key(ec)
        if ec is not None and key is None:
            self.cancelled += 1
            return
        if t_done is None:
            t_done = time.perf_counter()
        if self.t_start is None:
            self.t_start = t_done
        if self.t_last is None or t_done > self.t_last:
            self.t_last = t_done
        second = max(0, int(t_done - self.t_start))
        bucket = self.timeline.get(second)
        if bucket is None:
            bucket = self.timeline[second] = [0, 0, 0]
        lag = lag_ms if lag_ms > 0.0 else 0.0
        if sent_at is not None and self.open_loop:
            self.sends.append((sent_at, key == "rate_limited"))
        self.requests += 1
        if self.open_loop:
            self.lag.record(lag)
        if key is not None:
            self.errors += 1
            self.error_counts[key] += 1
            if key not in self.error_examples:
                self.error_examples[key] = _example(result)
            bucket[1] += 1
            if key == "rate_limited":
                if result.e2e_ms is not None:
                    self.refused.record(result.e2e_ms + lag)
                ra = result.retry_after_s
                if ra is not None and (self.retry_after_max is None or ra > self.retry_after_max):
                    self.retry_after_max = ra
        else:
            self.successes += 1
            out = result.output_tokens
            self.output_tokens += out
            bucket[0] += 1
            bucket[2] += out
            if result.prompt_tokens is not None:
                self.input_tokens = (self.input_tokens or 0) + result.prompt_tokens
                self.cache.add(result)
            if result.tokens_estimated and out > 0:
                self.tokens_estimated = True
            ttft = result.ttft_ms
            e2e = result.e2e_ms
            if ttft is not None:
                self.ttft.record(ttft + lag)
            if result.ttft_answer_ms is not None:
                self.ttft_answer.record(result.ttft_answer_ms + lag)
            self.reasoning_tokens += result.reasoning_tokens or 0
            if e2e is not None:
                self.e2e.record(e2e + lag)
            if result.itl_ms:
                self.itl.record_many(result.itl_ms)
            # Streamed calls only: a non-streamed body arrives whole, E2E − TTFT is its read, not decoding.
            if result.stream and ttft is not None and e2e is not None and out >= 2:
                span = e2e - ttft
                if span > 0.0:
                    self.tpot.record(span / (out - 1))
                    self.tok_s.record((out - 1) / (span / 1000.0))
        if self.slo is not None and key is None and self.slo.met(result, lag):
            self.good += 1
        if accuracy is not None:
            self.accuracy_total += 1
            if accuracy:
                self.accuracy_right += 1

    # -- live view ---------------------------------------------------------------------------

    def live_p90_e2e(self) -> float | None:
        """P90 of E2E so far (ms), None before the first success."""
        return self.e2e.percentile(90.0) if self.e2e.count else None

    @property
    def duration_s(self) -> float | None:
        """stop − start; until stopped, the latest finished call − start; None if unknown."""
        if self.t_start is None:
            return None
        end = self.t_stop if self.t_stop is not None else self.t_last
        return None if end is None else max(0.0, end - self.t_start)

    def _histograms(self) -> dict[str, LatencyHistogram]:
        hists = {
            "ttft_ms": self.ttft,
            "ttft_answer_ms": self.ttft_answer,
            "e2e_ms": self.e2e,
            "itl_ms": self.itl,
            "tpot_ms": self.tpot,
            "output_tokens_per_s": self.tok_s,
        }
        if self.open_loop:
            hists[LAG_METRIC] = self.lag
        return hists

    # -- merging -----------------------------------------------------------------------------

    def merge(self, other: RunRecorder) -> None:
        """Add ``other`` (same target and load, e.g. another worker's share) into this run exactly.

        Timelines are aligned on the earlier start; workers should share one start time
        (``perf_counter`` is system-wide on Linux and macOS), else a bucket may shift by the
        rounding of the start difference.
        """
        if other.target != self.target or other.load != self.load:
            raise ValueError(
                f"cannot merge runs of different targets/loads: {label(other.target, other.load)} "
                f"into {label(self.target, self.load)}"
            )
        self.sends += other.sends  # perf_counter times: system-wide, so the workers' sends interleave
        self.requests += other.requests
        self.successes += other.successes
        self.errors += other.errors
        self.cancelled += other.cancelled
        for k, n in other.error_counts.items():
            self.error_counts[k] = self.error_counts.get(k, 0) + n
        for k, ex in other.error_examples.items():
            self.error_examples.setdefault(k, ex)
        self.output_tokens += other.output_tokens
        if other.input_tokens is not None:
            self.input_tokens = (self.input_tokens or 0) + other.input_tokens
        self.tokens_estimated = self.tokens_estimated or other.tokens_estimated
        self.accuracy_right += other.accuracy_right
        self.accuracy_total += other.accuracy_total
        # Timeline: rebase both onto the earlier start.
        mine_start, their_start = self.t_start, other.t_start
        if their_start is not None and (mine_start is None or their_start < mine_start):
            shift_mine = 0 if mine_start is None else round(mine_start - their_start)
            self.timeline = {s + shift_mine: b for s, b in self.timeline.items()}
            shift_theirs = 0
            self.t_start = their_start
        else:
            shift_theirs = 0 if their_start is None or mine_start is None else round(their_start - mine_start)
        for s, b in other.timeline.items():
            mine = self.timeline.setdefault(s + shift_theirs, [0, 0, 0])
            mine[0] += b[0]
            mine[1] += b[1]
            mine[2] += b[2]
        if other.t_stop is not None and (self.t_stop is None or other.t_stop > self.t_stop):
            self.t_stop = other.t_stop
        if other.t_last is not None and (self.t_last is None or other.t_last > self.t_last):
            self.t_last = other.t_last
        self.ttft.merge(other.ttft)
        self.ttft_answer.merge(other.ttft_answer)
        self.reasoning_tokens += other.reasoning_tokens
        self.e2e.merge(other.e2e)
        self.itl.merge(other.itl)
        self.tpot.merge(other.tpot)
        self.tok_s.merge(other.tok_s)
        self.lag.merge(other.lag)
        self.good += other.good
        if self.slo is None:
            self.slo = other.slo
        self.refused.merge(other.refused)
        self.prompt_counts = [a + b for a, b in zip(self.prompt_counts, other.prompt_counts, strict=True)]
        self.cache.merge(other.cache)
        if other.retry_after_max is not None:
            self.retry_after_max = max(self.retry_after_max or 0.0, other.retry_after_max)
        self.ratelimit_headers.update(other.ratelimit_headers)
        for k, n in other.remaining_min.items():
            self.remaining_min[k] = min(n, self.remaining_min.get(k, n))

    # -- serialization -----------------------------------------------------------------------

    def to_run(self) -> Run:
        """The run object of the results schema (docs/bench-results.md)."""
        duration = self.duration_s
        hists = self._histograms()
        timeline: list[TimelinePoint] = []
        if self.timeline:
            for s in range(max(self.timeline) + 1):
                b = self.timeline.get(s, [0, 0, 0])
                timeline.append(TimelinePoint(t=s, ok=b[0], errors=b[1], output_tokens=b[2]))
        n, intended, usage = self.prompt_counts
        return Run(
            target=self.target,
            load=self.load,
            requests=self.requests,
            successes=self.successes,
            errors=dict(self.error_counts),
            error_examples={k: self.error_examples[k] for k in ERROR_KEYS if k in self.error_examples},
            error_rate=round(self.errors / self.requests, 6) if self.requests else None,
            cancelled=self.cancelled,
            throughput=Throughput(
                duration_s=_r3(duration),
                req_per_s=round(self.successes / duration, 3) if duration else None,
                attempts_per_s=round(self.requests / duration, 3) if duration else None,
                output_tokens_per_s=round(self.output_tokens / duration, 3) if duration else None,
            ),
            tokens=Tokens(
                output=self.output_tokens,
                input=self.input_tokens,
                estimated=self.tokens_estimated,
                reasoning=self.reasoning_tokens or UNSET,  # of output, spent thinking
            ),
            metrics={name: summarize(h) for name, h in hists.items()},
            timeline=timeline,
            accuracy=(
                Accuracy(
                    right=self.accuracy_right,
                    total=self.accuracy_total,
                    pct=round(100.0 * self.accuracy_right / self.accuracy_total, 3),
                )
                if self.accuracy_total
                else None
            ),
            clock=Clock(start=self.t_start, stop=self.t_stop, last=self.t_last),
            histograms={name: _wire(h) for name, h in hists.items()},
            goodput=UNSET
            if self.slo is None
            else Goodput(
                expr=self.slo.text,
                limits_ms=dict(self.slo.limits),
                good=self.good,
                req_per_s=round(self.good / duration, 3) if duration else None,
                fraction=round(self.good / self.requests, 6) if self.requests else None,
            ),
            prompt_tokens=UNSET
            if not n
            else PromptTokens(
                count=n,
                intended_mean=round(intended / n, 3),
                usage_mean=round(usage / n, 3),
                usage_minus_intended_mean=round((usage - intended) / n, 3),
            ),
            cache=self.cache.summary(),
            rate_limit=RateLimit(
                **steady_rate(self.sends),
                refused=self.error_counts.get("rate_limited", 0),
                refused_ms=summarize(self.refused),
                retry_after_s_max=self.retry_after_max,
                headers=dict(sorted(self.ratelimit_headers.items())),
                remaining_min=dict(sorted(self.remaining_min.items())),
                histogram=_wire(self.refused),
            ),
        )

    @classmethod
    def from_run(cls, d: Run) -> RunRecorder:
        """Rebuild a recorder from :meth:`to_run` output (e.g. to merge runs from files)."""
        try:
            rec = cls(d.target, d.load)
            rec.requests = d.requests
            rec.successes = d.successes
            rec.error_counts.update(d.errors)
            rec.errors = sum(rec.error_counts.values())
            rec.error_examples = {} if isinstance(d.error_examples, UnsetType) else dict(d.error_examples)
            rec.cancelled = 0 if isinstance(d.cancelled, UnsetType) else d.cancelled
            rec.output_tokens = d.tokens.output
            rec.input_tokens = d.tokens.input
            rec.tokens_estimated = d.tokens.estimated
            if d.accuracy:
                rec.accuracy_right = d.accuracy.right
                rec.accuracy_total = d.accuracy.total
            if not isinstance(d.clock, UnsetType):
                rec.t_start, rec.t_stop, rec.t_last = d.clock.start, d.clock.stop, d.clock.last
            if rec.t_start is None and rec.t_stop is None and d.throughput.duration_s is not None:
                rec.t_start, rec.t_stop = 0.0, float(d.throughput.duration_s)
            rec.timeline = {
                b.t: [b.ok, b.errors, b.output_tokens] for b in d.points() if b.ok or b.errors or b.output_tokens
            }
            hists = d.histograms
            if isinstance(hists, UnsetType):
                raise ResultsError(f"not a {SCHEMA} run object: it has no histograms")
            rec.ttft = _histogram(hists["ttft_ms"])
            if "ttft_answer_ms" in hists:  # absent in files written before it existed
                rec.ttft_answer = _histogram(hists["ttft_answer_ms"])
            rec.reasoning_tokens = 0 if isinstance(d.tokens.reasoning, UnsetType) else d.tokens.reasoning
            rec.e2e = _histogram(hists["e2e_ms"])
            rec.itl = _histogram(hists["itl_ms"])
            rec.tpot = _histogram(hists["tpot_ms"])
            rec.tok_s = _histogram(hists["output_tokens_per_s"])
            if LAG_METRIC in hists:
                rec.lag = _histogram(hists[LAG_METRIC])
            if not isinstance(d.goodput, UnsetType):
                rec.slo = SLO(tuple(d.goodput.limits_ms.items()), d.goodput.expr)
                rec.good = d.goodput.good
            if not isinstance(d.prompt_tokens, UnsetType):
                pt = d.prompt_tokens
                rec.prompt_counts = [pt.count, round(pt.intended_mean * pt.count), round(pt.usage_mean * pt.count)]
            if not isinstance(d.cache, UnsetType):  # absent in files written before it existed
                rec.cache = CacheTally.from_summary(d.cache)
            rl = d.rate_limit
            if not isinstance(rl, UnsetType):
                if not isinstance(rl.histogram, UnsetType):
                    rec.refused = _histogram(rl.histogram)
                rec.retry_after_max = rl.retry_after_s_max
                rec.ratelimit_headers = dict(rl.headers)
                rec.remaining_min = dict(rl.remaining_min)
        except (KeyError, ValueError) as exc:
            raise ResultsError(f"not a {SCHEMA} run object: missing or invalid {exc}") from exc
        if rec.successes + rec.errors != rec.requests:
            raise ResultsError(
                f"run object inconsistent: successes {rec.successes} + errors {rec.errors} != requests {rec.requests}"
            )
        return rec

    def to_dict(self) -> dict[str, Any]:  # reason: the JSON edge, the run object as a file holds it
        """:meth:`to_run` as JSON builtins (key order = the file's)."""
        out = to_json_obj(self.to_run())
        assert isinstance(out, dict)
        return out

    @classmethod
    def from_dict(cls, data: object) -> RunRecorder:
        """Rebuild a recorder from a run object read from a file (decoded JSON)."""
        try:
            run = from_json_obj(data, Run)
        except msgspec.ValidationError as exc:
            raise ResultsError(f"not a {SCHEMA} run object: {exc}") from exc
        return cls.from_run(run)

    def __repr__(self) -> str:
        return (
            f"RunRecorder({label(self.target, self.load)}, requests={self.requests}, "
            f"successes={self.successes}, errors={self.errors})"
        )
