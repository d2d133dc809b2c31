"""The capacity finder (``--find-max``): the largest concurrency or arrival rate at which every threshold holds.

The search is two pure pieces and a driver:

* :class:`Search` decides the next level: **grow** geometrically (×2 from ``start``) until a level fails
  or the ceiling passes, then **bisect** between the largest passing and the smallest failing level until
  they are one *step* apart (step = ``precision`` × the passing level, at least 1 concurrent user or
  ``min_rate_step`` req/s). The answer is the largest passing level; the uncertainty is the bracket
  ``[answer, failed_at)``: the true boundary lies inside it.
* :func:`judge` turns the runs of one level into a verdict. A level whose value of some threshold lies
  within ``margin`` of its limit is *near the boundary* and is run again (``repeats`` times in all): the
  verdict is the majority, so one noisy level does not decide.
* :func:`find_max` runs the search for one target through the load generator and returns every run it
  made plus the ``capacity`` entry of the results document (docs/bench-results.md): the answer, its
  bracket, the curve walked (every level's numbers, repeats pooled exactly), the knee and the decay
  ratio at the answer.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from tailgate.bench.results import RunRecorder
from tailgate.bench.schema import Capacity, CapacityPoint, DecayAtAnswer, Run, UnsetType
from tailgate.bench.thresholds import Threshold

BY = ("concurrency", "rate")


@dataclass(frozen=True)
class FindSpec:
    """What to search for and how finely."""

    thresholds: tuple[Threshold, ...]
    by: str = "concurrency"
    start: float = 1.0
    ceiling: float = 1024.0
    precision: float = 0.1
    repeats: int = 3
    margin: float = 0.1
    min_rate_step: float = 0.5

    def step(self, level: float) -> float:
        """How close the bracket must close around ``level`` (the search's resolution there)."""
        floor = 1.0 if self.by == "concurrency" else self.min_rate_step
        return max(floor, self.precision * level)


@dataclass
class Search:
    """Grow, then bisect. Feed it verdicts with :meth:`record`; :meth:`next_level` is None when done."""

    spec: FindSpec
    lo: float | None = None
    """The largest level that passed."""
    hi: float | None = None
    """The smallest level that failed."""
    growing: bool = True
    _next: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._next = self._norm(min(self.spec.start, self.spec.ceiling))

    def _norm(self, level: float) -> float:
        return float(max(1, round(level))) if self.spec.by == "concurrency" else round(level, 3)

    def next_level(self) -> float | None:
        return self._next

    def record(self, level: float, passed: bool) -> None:
        if passed:
            self.lo = level if self.lo is None else max(self.lo, level)
        else:
            self.hi = level if self.hi is None else min(self.hi, level)
        if self.growing and passed:
            if level >= self.spec.ceiling:
                self._next = None  # the ceiling holds: the answer is "at least the ceiling"
                return
            self._next = self._norm(min(level * 2.0, self.spec.ceiling))
            return
        self.growing = False
        self._next = self._bisect()

    def _bisect(self) -> float | None:
        lo = 0.0 if self.lo is None else self.lo
        hi = self.hi
        if hi is None:
            return None
        if hi - lo <= self.spec.step(lo):
            return None
        mid = self._norm((lo + hi) / 2.0)
        if not lo < mid < hi:
            return None
        return mid

    @property
    def step_at_answer(self) -> float | None:
        return None if self.lo is None or self.hi is None else round(self.hi - self.lo, 3)


def near(th: Threshold, value: float | None, margin: float) -> bool:
    """Whether a value lies within ``margin`` (relative) of the threshold's limit: a coin-flip level."""
    if value is None:
        return False
    scale = abs(th.limit) if th.limit else 1.0
    return abs(value - th.limit) <= margin * scale


Values = dict[str, float | bool | None]
"""One run's value per threshold expression (and ``completed_per_s``/``keeps_up`` when searching by rate)."""


def verdict(thresholds: Sequence[Threshold], run: Run, margin: float) -> tuple[bool, bool, Values]:
    """(passed, near the boundary, value per expression) of one run."""
    passed, close = True, False
    values: Values = {}
    for th in thresholds:
        value, _ = th.value(run)
        values[th.text] = value
        ok = (not th.applies(run)) if value is None else th.check(value)
        passed = passed and ok
        close = close or near(th, value, margin)
    return passed, close, values


def completed_per_s(run: Run) -> float | None:
    """Open loop: requests finished per second in the run's steady part, None when too short to tell.

    The timeline counts finished requests per second; the first seconds (until the first answers come
    back, E2E P50 rounded up) and the last one are left out. A provider that keeps up finishes what it is
    offered; one past its service rate finishes at that rate while its queue grows.
    """
    duration = run.throughput.duration_s or 0.0
    e2e = run.metric("e2e_ms", "p50") or 0.0
    inner = run.points()[int(e2e / 1000.0) + 1 : int(duration)]
    if len(inner) < 3:
        return None
    return round(sum(b.ok + b.errors for b in inner) / len(inner), 3)


def keeps_up(run: Run) -> tuple[bool | None, float | None]:
    """(whether an open-loop run finished what it was offered, its completion rate); (None, …) if unknown.

    Past its service rate a provider's queue grows for as long as the level lasts, so its latency is only
    bounded by the level's length: such a level fails whatever its percentiles (5 % and one request of
    slack for counting whole requests per second).
    """
    rate = run.load.get_rate()
    done = completed_per_s(run)
    if rate is None or done is None:
        return None, done
    return bool(done >= 0.95 * rate - 1.0), done


RunLevel = Callable[[float], Awaitable[Run]]
"""Runs one level once (a concurrency or a rate) against one target and returns its run object."""


@dataclass
class _Level:
    """One level searched: its verdict, the votes of its repeats, their runs' indexes and values, pooled."""

    level: float
    passed: bool
    votes: list[bool]
    runs: list[int]
    values: list[Values]
    pooled: Run


async def find_max(
    spec: FindSpec, run_level: RunLevel, *, stopped: Callable[[], bool] = lambda: False
) -> tuple[list[Run], Capacity]:
    """Search one target. Returns (every run made, in order; the ``capacity`` entry for the document)."""
    search = Search(spec)
    runs: list[Run] = []
    levels: list[_Level] = []
    while (level := search.next_level()) is not None and not stopped():
        tries: list[Run] = []
        votes: list[bool] = []
        values: list[Values] = []
        while True:
            run = await run_level(level)
            runs.append(run)
            tries.append(run)
            ok, close, vals = verdict(spec.thresholds, run, spec.margin)
            if spec.by == "rate":
                steady, done = keeps_up(run)
                vals["completed_per_s"] = done
                if steady is False:
                    ok, vals["keeps_up"] = False, False
            votes.append(ok)
            values.append(vals)
            if not close and len(tries) == 1:
                break
            need = spec.repeats // 2 + 1  # a majority of the repeats decides, as soon as it exists
            if votes.count(True) >= need or votes.count(False) >= need or len(tries) >= spec.repeats:
                break
            if stopped():
                break
        passed = votes.count(True) > len(votes) / 2
        search.record(level, passed)
        levels.append(
            _Level(
                level=level,
                passed=passed,
                votes=votes,
                runs=[len(runs) - len(tries) + i for i in range(len(tries))],
                values=values,
                pooled=_pooled(tries),
            )
        )
    return runs, _capacity(spec, search, levels, runs)


def _pooled(tries: list[Run]) -> Run:
    """One run object of the repeats of a level, merged exactly (histograms, counts)."""
    acc = RunRecorder.from_run(tries[0])
    for other in tries[1:]:
        acc.merge(RunRecorder.from_run(other))
    if len(tries) > 1:
        # The repeats ran one after another: the pooled window is the sum of their windows, not the span
        # from the first start to the last stop (which would count the gaps and understate req/s).
        total = sum(t.throughput.duration_s or 0.0 for t in tries)
        if acc.t_start is not None:
            acc.t_stop = acc.t_start + total
    return acc.to_run()


def _point(level: _Level) -> CapacityPoint:
    run = level.pooled
    thr = run.throughput
    good = run.goodput
    return CapacityPoint(
        level=level.level,
        passed=level.passed,
        repeats=len(level.votes),
        req_per_s=thr.req_per_s,
        attempts_per_s=thr.attempts_per_s,
        output_tokens_per_s=thr.output_tokens_per_s,
        goodput_req_per_s=None if isinstance(good, UnsetType) else good.req_per_s,
        error_rate=run.error_rate,
        rate_limited=run.refused(),
        ttft_ms_p50=run.metric("ttft_ms", "p50"),
        ttft_ms_p90=run.metric("ttft_ms", "p90"),
        ttft_ms_p99=run.metric("ttft_ms", "p99"),
        e2e_ms_p50=run.metric("e2e_ms", "p50"),
        e2e_ms_p90=run.metric("e2e_ms", "p90"),
        e2e_ms_p99=run.metric("e2e_ms", "p99"),
        mean_tok_s=run.metric("output_tokens_per_s", "mean"),
        completed_per_s=_median([v.get("completed_per_s") for v in level.values]),
        values=level.values,
    )


def _rate_text(x: float | None) -> str:
    return "?" if x is None else f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def _median(xs: Sequence[float | bool | None]) -> float | None:
    vals = sorted(float(x) for x in xs if x is not None)
    return None if not vals else vals[len(vals) // 2]


def knee(points: Sequence[tuple[float, float]]) -> float | None:
    """The knee of an increasing latency-vs-load curve (Kneedle's difference curve, Satopää et al. 2011).

    Both axes are scaled to [0, 1]; the knee is the level where the curve lies furthest below the
    straight line from its first to its last point, i.e. the last level before latency turns upward.
    None with fewer than three points or a curve that never bends (no point ≥ 0.1 below the line).
    """
    pts = sorted((x, y) for x, y in points if y is not None and not math.isnan(y))
    if len(pts) < 3:
        return None
    x0, x1 = pts[0][0], pts[-1][0]
    y0, y1 = min(y for _, y in pts), max(y for _, y in pts)
    if x1 <= x0 or y1 <= y0:
        return None
    best, at = 0.0, None
    for x, y in pts:
        xn, yn = (x - x0) / (x1 - x0), (y - y0) / (y1 - y0)
        if xn - yn > best:
            best, at = xn - yn, x
    return at if best >= 0.1 else None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return round(a / b, 3)


def _curve_metric(spec: FindSpec) -> tuple[str, str]:
    """The latency statistic the knee is read from: the first latency threshold's, else P90 E2E."""
    for th in spec.thresholds:
        if not th.scalar and th.metric in ("ttft_ms", "e2e_ms") and th.stat in ("p50", "p90", "p99"):
            return th.metric, str(th.stat)
    return "e2e_ms", "p90"


def _capacity(spec: FindSpec, search: Search, levels: list[_Level], runs: list[Run]) -> Capacity:
    points = sorted((_point(lv) for lv in levels), key=lambda p: p.level)
    metric, stat = _curve_metric(spec)
    knee_at = knee([(p.level, y) for p in points if (y := p.latency(metric, stat)) is not None])
    name = runs[0].target.name if runs else None
    answer = search.lo
    base = points[0] if points else None
    at = next((p for p in points if p.level == answer), None)
    decay = None
    if base is not None and at is not None:
        decay = DecayAtAnswer(
            base_level=base.level,
            level=answer,
            p99_e2e_ratio=_ratio(at.e2e_ms_p99, base.e2e_ms_p99),
            p99_ttft_ratio=_ratio(at.ttft_ms_p99, base.ttft_ms_p99),
            mean_tok_s_ratio=_ratio(at.mean_tok_s, base.mean_tok_s),
        )
    limited = [p.level for p in points if p.rate_limited]
    behind = [
        p.completed_per_s
        for p in points
        if p.completed_per_s is not None and not p.passed and p.completed_per_s < 0.95 * p.level - 1.0
    ]
    return Capacity(
        target=name,
        by=spec.by,
        thresholds=[th.text for th in spec.thresholds],
        answer=answer,
        failed_at=search.hi,
        uncertainty=search.step_at_answer,
        ceiling=spec.ceiling,
        ceiling_held=search.hi is None and answer is not None,
        knee=knee_at,
        knee_metric=f"{stat}({metric})",
        decay_at_answer=decay,
        rate_limited_from=min(limited) if limited else None,
        service_rate_per_s=_median(behind) if spec.by == "rate" else None,
        curve=points,
        levels_run=[lv.level for lv in levels],
        runs=[i for lv in levels for i in lv.runs],
        summary=describe(spec, search, name, min(limited) if limited else None)
        + (f"; offered more, it finishes ~{_rate_text(_median(behind))} req/s (its service rate)" if behind else ""),
    )


def _fmt(level: float | None, by: str) -> str:
    if level is None:
        return "-"
    return f"{level:g}" + ("" if by == "concurrency" else " req/s")


def describe(spec: FindSpec, search: Search, name: str | None, limited_from: float | None) -> str:
    """One sentence for the summary: the answer, its bracket, and why it might be the limiter's."""
    what = " and ".join(th.text for th in spec.thresholds)
    unit = ("concurrent request" + ("" if search.lo == 1 else "s")) if spec.by == "concurrency" else "req/s"
    if search.lo is None:
        text = f"{name}: {what} fails already at {_fmt(search.hi, spec.by)} (the lowest level tried)"
    elif search.hi is None:
        text = f"{name}: {what} holds up to the ceiling {_fmt(search.lo, spec.by)} (raise --find-ceiling)"
    else:
        text = (
            f"{name}: {what} holds up to {search.lo:g} {unit} and fails at {search.hi:g} "
            f"(the boundary lies in [{search.lo:g}, {search.hi:g}))"
        )
    if limited_from is not None:
        text += f"; 429s from {_fmt(limited_from, spec.by)}: past it this measures the rate limiter"
    return text
