"""Pass/fail thresholds on a load test's runs, in the spirit of k6 (``--threshold 'p90(e2e)<3s'``).

Grammar (whitespace allowed between tokens, case-insensitive)::

    STAT(METRIC) OP NUMBER[UNIT]     latency: p90(e2e)<3s   p99(ttft)<=800ms   avg(itl)<50ms   max(e2e)<10s
                                     per-request tok/s: p50(tok_s_req)>=20
    error_rate OP NUMBER[%]          error_rate<1%   (a bare number is a fraction: error_rate<0.01)
    req_per_s OP NUMBER              successful requests per second: req_per_s>=20
    tok_s OP NUMBER                  aggregate output tokens per second: tok_s>100

- STAT: ``p50 p90 p95 p99`` or any ``pNN[.N]`` (e.g. ``p99.9``, from the run's histogram), ``avg``/``mean``,
  ``med``/``median`` (= p50), ``min``, ``max``.
- METRIC: ``e2e ttft itl tpot`` (ms) and ``lag`` (open-loop schedule lag, ms); ``tok_s_req`` (tokens/s per
  request). The full names (``e2e_ms``, ``output_tokens_per_s``, ``schedule_lag_ms``, ...) work too.
- UNIT for latencies: ``us``, ``ms``, ``s``, ``m``; a bare number means ms. Rates take a bare number or ``/s``.
- OP: ``<  <=  >  >=  ==  !=``.

Every threshold is checked against every run (target × load level/stage). A value that the run could
not measure (no successful request, no ITL gaps in a non-streamed run) fails the threshold: no evidence
is not a pass. A metric that does not apply to the run (``lag`` in a closed-loop run) passes, noted.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec

from tailgate.bench.schema import Run, ThresholdResult, Throughput, UnsetType
from tailgate.stats import LatencyHistogram

__all__ = ["ACCEPTED_FORMS", "Threshold", "ThresholdError", "breached", "evaluate", "parse_threshold"]

ACCEPTED_FORMS = (
    "accepted forms:\n"
    "  STAT(METRIC) OP NUMBER[UNIT]  e.g. p90(e2e)<3s, p99(ttft)<=800ms, avg(itl)<50ms, max(e2e)<10s\n"
    "      STAT: p50 p90 p95 p99 pNN[.N] avg mean med min max\n"
    "      METRIC: e2e ttft itl tpot lag (UNIT us/ms/s/m; bare number = ms), tok_s_req (tokens/s per request)\n"
    "  error_rate OP N%   (or a fraction 0-1)   e.g. error_rate<1%\n"
    "  req_per_s OP N     (successful requests/s) e.g. req_per_s>=20\n"
    "  tok_s OP N         (aggregate output tokens/s) e.g. tok_s>100\n"
    "  OP: < <= > >= == !="
)


class ThresholdError(ValueError):
    """A threshold expression that does not parse; the message names the offending token."""


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}

# alias -> (canonical metric name, kind); kind "latency" takes time units, "rate" a bare number or /s.
_METRICS: dict[str, tuple[str, str]] = {
    "e2e": ("e2e_ms", "latency"),
    "e2e_ms": ("e2e_ms", "latency"),
    "ttft": ("ttft_ms", "latency"),
    "ttft_ms": ("ttft_ms", "latency"),
    "itl": ("itl_ms", "latency"),
    "itl_ms": ("itl_ms", "latency"),
    "tpot": ("tpot_ms", "latency"),
    "tpot_ms": ("tpot_ms", "latency"),
    "lag": ("schedule_lag_ms", "latency"),
    "schedule_lag": ("schedule_lag_ms", "latency"),
    "schedule_lag_ms": ("schedule_lag_ms", "latency"),
    "tok_s_req": ("output_tokens_per_s", "rate"),
    "output_tokens_per_s": ("output_tokens_per_s", "rate"),
}

# run-level scalars: alias -> (canonical name, kind)
_SCALARS: dict[str, tuple[str, str]] = {
    "error_rate": ("error_rate", "fraction"),
    "req_per_s": ("req_per_s", "rate"),
    "rps": ("req_per_s", "rate"),
    "tok_s": ("output_tokens_per_s", "rate"),
}

_STAT_ALIASES = {"avg": "mean", "mean": "mean", "med": "p50", "median": "p50", "min": "min", "max": "max"}
_SUMMARY_STATS = frozenset({"p50", "p90", "p95", "p99", "max", "mean"})

_TIME_UNITS = {"": 1.0, "ms": 1.0, "us": 0.001, "µs": 0.001, "s": 1000.0, "m": 60_000.0}
_RATE_UNITS = {"", "/s"}

_OP_RE = re.compile(r"<=|>=|==|!=|<|>|=")
_LHS_RE = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:\(\s*([^()]*?)\s*\))?\s*$")
_RHS_RE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*?)\s*$")
_PCT_RE = re.compile(r"^p(\d{1,3}(?:\.\d+)?)$")


def _fail(text: str, problem: str, token: str) -> ThresholdError:
    return ThresholdError(f"bad threshold {text!r}: {problem}: {token!r}\n{ACCEPTED_FORMS}")


@dataclass(frozen=True, slots=True)
class Threshold:
    """One parsed expression. ``limit`` is in the canonical unit: ms, a fraction, or per second."""

    text: str
    stat: str | None  # "p90", "p99.9", "mean", "min", "max"; None for run-level scalars
    percentile: float | None  # the q of a pNN stat
    metric: str  # "e2e_ms", ..., or a scalar: "error_rate", "req_per_s", "output_tokens_per_s"
    scalar: bool  # True: a run-level value (error_rate, req_per_s, tok_s), not a metric distribution
    op: str
    limit: float
    unit: str  # "ms", "fraction", "1/s"

    def check(self, value: float) -> bool:
        """Whether ``value`` (canonical unit) satisfies the threshold."""
        return _OPS[self.op](value, self.limit)

    def applies(self, run: Run) -> bool:
        """False for a metric the run does not measure at all (``lag`` in a closed loop)."""
        return self.scalar or self.metric in run.metrics

    def value(self, run: Run) -> tuple[float | None, str | None]:
        """The run's value for this threshold and a note: (None, why) when it has none."""
        if self.scalar:
            raw = run.error_rate if self.metric == "error_rate" else _throughput(run.throughput, self.metric)
            return (None, "no requests measured") if raw is None else (float(raw), None)
        summary = run.metrics.get(self.metric)
        if summary is None:
            return None, f"{self.metric} is not measured in this run"
        if not summary.count:
            return None, f"no {self.metric} samples"
        if self.stat in _SUMMARY_STATS and (known := summary.stat(str(self.stat))) is not None:
            return known, None
        hist_data = run.histogram(self.metric)
        if hist_data is None:
            return None, f"{self.stat} needs the {self.metric} histogram, which the run lacks"
        h = LatencyHistogram.from_dict(msgspec.structs.asdict(hist_data))
        v = h.min if self.stat == "min" else h.percentile(self.percentile if self.percentile is not None else 50.0)
        return round(v, 3), None


def parse_threshold(text: str) -> Threshold:
    """Parse one expression; raises :class:`ThresholdError` naming the offending token."""
    if not isinstance(text, str) or not text.strip():
        raise _fail(str(text), "empty expression", str(text))
    ops = list(_OP_RE.finditer(text))
    if not ops:
        raise _fail(text, "no comparison operator (< <= > >= == !=)", text.strip())
    if len(ops) > 1:
        raise _fail(text, "more than one comparison operator", ops[1].group())
    m_op = ops[0]
    op = m_op.group()
    if op == "=":
        raise _fail(text, "unknown operator (use == to compare for equality)", op)
    lhs, rhs = text[: m_op.start()], text[m_op.end() :]

    m = _LHS_RE.match(lhs)
    if m is None:
        raise _fail(text, "cannot read the left side", lhs.strip() or "(nothing before the operator)")
    head, arg = m.group(1).lower(), m.group(2)
    stat: str | None
    percentile: float | None = None
    if arg is None:
        if head not in _SCALARS:
            if head in _METRICS:
                raise _fail(text, "a metric needs a statistic, e.g. p90(" + head + ")", head)
            raise _fail(text, "unknown metric", head)
        metric, kind = _SCALARS[head]
        stat = None
        scalar = True
    else:
        pm = _PCT_RE.match(head)
        if pm is not None:
            percentile = float(pm.group(1))
            if not 0.0 <= percentile <= 100.0:
                raise _fail(text, "percentile must be within 0-100", head)
            stat = head
        elif head in _STAT_ALIASES:
            stat = _STAT_ALIASES[head]
            if stat == "p50":
                percentile = 50.0
        else:
            raise _fail(text, "unknown statistic", head)
        if stat is not None and percentile is not None and stat not in _SUMMARY_STATS:
            # normalize p90.0 -> p90 so the summary value is used
            as_int = f"p{percentile:g}"
            if as_int in _SUMMARY_STATS:
                stat = as_int
        name = arg.lower()
        if name not in _METRICS:
            if name in _SCALARS:
                raise _fail(text, f"{name} is a single value per run; write it without a statistic", name)
            raise _fail(text, "unknown metric", arg or "()")
        metric, kind = _METRICS[name]
        scalar = False

    r = _RHS_RE.match(rhs)
    if r is None:
        raise _fail(text, "expected a number with an optional unit", rhs.strip() or "(nothing after the operator)")
    number_text, unit_text = r.group(1), r.group(2)
    number = float(number_text)
    if not math.isfinite(number) or number < 0:
        raise _fail(text, "the limit must be a finite number >= 0", number_text)
    unit_key = unit_text.lower()
    limit: float
    if kind == "latency":
        if unit_key not in _TIME_UNITS:
            raise _fail(text, "unknown time unit (us, ms, s, m; bare number = ms)", unit_text)
        limit = number * _TIME_UNITS[unit_key]
        unit = "ms"
    elif kind == "fraction":
        if unit_key == "%":
            limit = number / 100.0
        elif unit_key == "":
            if number > 1.0:
                raise _fail(
                    text, f"an error rate is a fraction 0-1 or a percentage (did you mean {number_text}%?)", rhs.strip()
                )
            limit = number
        else:
            raise _fail(text, "unknown unit for a rate of errors (use % or a fraction)", unit_text)
        unit = "fraction"
    else:
        if unit_key not in _RATE_UNITS:
            raise _fail(text, "unknown unit for a per-second rate (a bare number or /s)", unit_text)
        limit = number
        unit = "1/s"
    return Threshold(
        text=text.strip(),
        stat=stat,
        percentile=percentile,
        metric=metric,
        scalar=scalar,
        op=op,
        limit=round(limit, 9),
        unit=unit,
    )


def _throughput(t: Throughput, metric: str) -> float | None:
    """A scalar of the run's ``throughput`` by its key (``req_per_s``, ``output_tokens_per_s``, ...)."""
    return {
        "req_per_s": t.req_per_s,
        "attempts_per_s": t.attempts_per_s,
        "output_tokens_per_s": t.output_tokens_per_s,
        "duration_s": t.duration_s,
    }.get(metric)


def evaluate(thresholds: Sequence[Threshold], runs: Sequence[Run]) -> list[ThresholdResult]:
    """One entry per (threshold, run), thresholds outer, runs in order.

    Entry: ``{"expr", "run" (index into runs), "target" (name), "load", "value", "limit", "unit",
    "passed", "note"}``; ``value`` and ``limit`` in the canonical unit (ms, a fraction, per second),
    ``value`` null with a ``note`` when the run has no such value.
    """
    out: list[ThresholdResult] = []
    for th in thresholds:
        for i, run in enumerate(runs):
            value, note = th.value(run)
            # Not applicable (e.g. lag in a closed loop) passes; applicable but unmeasured fails.
            passed = not th.applies(run) if value is None else th.check(value)
            base_url = run.target.base_url
            out.append(
                ThresholdResult(
                    expr=th.text,
                    run=i,
                    target=run.target.name or (None if isinstance(base_url, UnsetType) else base_url),
                    load=run.load,
                    value=value,
                    limit=th.limit,
                    unit=th.unit,
                    passed=passed,
                    note=note,
                )
            )
    return out


def breached(results: Sequence[ThresholdResult]) -> bool:
    """True when any evaluated threshold failed."""
    return any(not r.passed for r in results)
