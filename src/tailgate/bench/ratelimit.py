"""Rate-limit honesty: when a provider refuses with 429, say so, and say where its limit is.

Our users found a provider that allowed only ~20 requests/s per API key until support raised it;
a load test that does not notice measures the limiter, not the service. So:

* :func:`assess` looks at every run of a target: when any was refused with 429 (``rate_limited``), it
  estimates the rate the provider *admitted* per key in its most refused run (open loop: the offered
  rate × the admitted fraction; closed loop: the median of the per-second admitted counts, first and
  last second left out, as a token bucket's initial burst and the run's ragged end are not the limit),
  reads the ``x-ratelimit-*`` headers and the largest ``Retry-After``, and writes the flag
  "rate-limited above ~N req/s per key: these numbers measure the limiter, not the service". bench
  uses one API key per target, so per target is per key.
* :func:`find_limit` ramps an open-loop rate (×``factor`` per step) until the provider refuses more
  than ``refuse_fraction`` of a step, then reports the observed limit as req/s and RPM (and TPM when
  the headers carry ``x-ratelimit-limit-tokens``). It never sends more than ``cap`` requests in all:
  a step that would pass the cap is shortened, and the search stops with "no limit below …".
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from tailgate.bench.schema import HeaderRate, LimitEntry, RateFlag, Run, UnsetType

FLAG = "rate-limited above ~{n} req/s per key: these numbers measure the limiter, not the service"


STEADY_MIN = 5
"""Admitted requests after the first 429 needed before the steady-state rate replaces the run's average."""


def admitted_per_s(run: Run) -> float | None:
    """Steady-state admitted (not refused) requests per second of one run.

    Open loop: requests admitted after the first 429 per second from then on (the bucket is empty from
    there, so this is its refill rate: :func:`steady_rate`); without enough of them, the
    offered rate × the admitted fraction. Closed loop: the median of the per-second counts of finished
    requests, first and last second left out.
    """
    timeline = run.points()
    refused = run.refused()
    requests = run.requests
    rl = run.rate_limit
    if (
        not isinstance(rl, UnsetType)
        and not isinstance(rl.steady_per_s, UnsetType)
        and not isinstance(rl.steady_admitted, UnsetType)
        and rl.steady_admitted >= STEADY_MIN
    ):
        return round(rl.steady_per_s, 3)
    rate = run.load.get_rate()
    if run.load.mode == "open" and rate and requests:
        return round(rate * (requests - refused) / requests, 3)
    interior = timeline[1:-1]
    if len(interior) >= 3:
        # Errors other than 429 are admitted too (the provider took them in); the timeline does not split
        # error kinds, so they are apportioned: refused share of the run's errors is left out.
        errors = max(1, sum(b.errors for b in timeline))
        keep = 1.0 - refused / errors if refused else 1.0
        return round(float(statistics.median(b.ok + b.errors * keep for b in interior)), 3)
    duration = run.throughput.duration_s
    if not duration:
        return None
    return round((run.requests - refused) / duration, 3)


PERIODS = (1.0, 60.0, 3600.0, 86400.0)
"""The periods a ``x-ratelimit-limit-requests`` value can count over: second, minute, hour, day."""


def _reset_s(text: str | None) -> float | None:
    """``x-ratelimit-reset-*`` (``1s``, ``250ms``, ``6m0s``, ``1h2m``) → seconds; None if unreadable."""
    if not text:
        return None
    total, found = 0.0, False
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text.strip()):
        total += float(number) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
        found = True
    return total if found else None


def header_rate(headers: Mapping[str, str], remaining_min: Mapping[str, int] | None = None) -> HeaderRate | None:
    """The limit the provider states in ``x-ratelimit-*-requests``, as requests per second.

    The headers give a count (``limit-requests``) but not its period. A bucket that refills evenly
    is full again after ``reset = (limit − remaining) × period / limit``, so the period is
    ``reset × limit / (limit − remaining)``, snapped to a second, minute, hour or day. Without a reset
    header the period is taken as a minute (OpenAI documents its request limits per minute) and said so.
    """
    limit = _num(headers.get("limit-requests"))
    if limit is None or limit <= 0:
        return None
    remaining = _num(headers.get("remaining-requests"))
    if remaining_min and "remaining-requests" in remaining_min:
        remaining = float(remaining_min["remaining-requests"])
    reset = _reset_s(headers.get("reset-requests"))
    if reset is not None and reset > 0 and remaining is not None and remaining < limit:
        raw = reset * limit / (limit - remaining)
        period = min(PERIODS, key=lambda p: abs(math.log(raw / p)))
        how = f"period from x-ratelimit-reset-requests ({headers.get('reset-requests')})"
    else:
        period, how = 60.0, "no usable reset header: read as per minute, OpenAI's convention"
    return HeaderRate(limit=limit, period_s=period, per_s=round(limit / period, 4), how=how)


AGREE = 0.05
"""Measured and stated limits within 5 % of each other agree."""


def verdict(measured: float | None, stated: HeaderRate | None) -> tuple[str, float | None, str]:
    """(which to trust: ``header`` | ``measured`` | ``none``, that rate, one sentence saying why)."""
    if stated is None:
        if measured is None:
            return "none", None, "no limit measured and none stated"
        return (
            "measured",
            measured,
            "the provider states no limit in x-ratelimit-* headers: the measured rate is the answer",
        )
    per_s = stated.per_s
    if measured is None:
        return "header", per_s, "nothing measured: only the provider's stated limit"
    off = abs(measured - per_s) / per_s
    if off <= AGREE:
        return (
            "header",
            per_s,
            f"the measured rate agrees with the stated limit (within {100 * off:.0f} %): trust the header, "
            "the provider's own exact number",
        )
    return (
        "measured",
        measured,
        f"they differ by {100 * off:.0f} %: trust the measured rate, what this key was actually admitted "
        "(the header may count another scope or period)",
    )


def _num(text: str | None) -> float | None:
    try:
        return float(str(text).strip())
    except (TypeError, ValueError):
        return None


def assess(runs: Sequence[Run]) -> list[RateFlag]:
    """One entry per target whose runs met 429s: the admitted rate, the headers, and the flag text."""
    by_target: dict[str, list[Run]] = {}
    for run in runs:
        by_target.setdefault(run.target.name, []).append(run)
    out: list[RateFlag] = []
    for name, target_runs in by_target.items():
        limited = [r for r in target_runs if r.refused() > 0]
        if not limited:
            continue
        # The most refused run says the most about the limit: its admitted rate is the limiter's.
        worst = max(limited, key=lambda r: r.refused() / max(1, r.requests))
        per_s = admitted_per_s(worst)
        headers: dict[str, str] = {}
        remaining: dict[str, int] = {}
        retry: float | None = None
        for r in target_runs:
            if isinstance(r.rate_limit, UnsetType):
                continue
            headers.update(r.rate_limit.headers)
            for k, v in r.rate_limit.remaining_min.items():
                remaining[k] = min(v, remaining.get(k, v))
            ra = r.rate_limit.retry_after_s_max
            if ra is not None:
                retry = max(retry or 0.0, ra)
        refused = sum(r.refused() for r in target_runs)
        requests = sum(r.requests for r in target_runs)
        shown = "?" if per_s is None else f"{per_s:.0f}" if per_s >= 10 else f"{per_s:.1f}"
        stated = header_rate(headers, remaining)
        trust, answer, why = verdict(per_s, stated)
        steady = None if isinstance(worst.rate_limit, UnsetType) else worst.rate_limit.steady_admitted
        out.append(
            RateFlag(
                target=name,
                per_s=per_s,
                rpm=None if per_s is None else round(per_s * 60.0, 1),
                tpm_header=_num(headers.get("limit-tokens")),
                limit_requests_header=_num(headers.get("limit-requests")),
                retry_after_s_max=retry,
                refused=refused,
                requests=requests,
                from_run=list(runs).index(worst),
                steady_admitted=None if isinstance(steady, UnsetType) else steady,
                header=stated,
                trust=trust,
                answer_per_s=answer,
                why=why,
                flag=FLAG.format(n=shown),
            )
        )
    return out


@dataclass(frozen=True)
class LimitSpec:
    """The ramp of ``--find-limit``."""

    start: float = 2.0
    factor: float = 1.5
    ceiling: float = 2000.0
    refuse_fraction: float = 0.05
    cap: int = 5000
    """Never send more requests than this in all (each step's warm-up included)."""
    step_s: float = 5.0
    warmup_s: float = 1.0
    confirm_admitted: int = 40
    """Admitted requests the answer should rest on: the steady state counts ±1 request, so 40 is ±2.5 %.
    When the refused step admitted fewer after its first 429, one more step at ≥ 1.5× the estimate
    measures long enough for this many."""


RunRate = Callable[[float, float], Awaitable[Run]]
"""Runs an open loop at (rate, measured seconds) and returns the run object."""


def _sent(rate: float, seconds: float, warmup_s: float) -> int:
    return int(rate * (seconds + warmup_s)) + 1


async def find_limit(
    spec: LimitSpec, run_rate: RunRate, *, stopped: Callable[[], bool] = lambda: False
) -> tuple[list[Run], LimitEntry]:
    """Ramp until refused, then measure the limiter's steady state; returns (the runs, the ``limit`` entry).

    Each step is an open loop at a fixed rate. A token bucket admits its whole burst before it refuses,
    so a step's average admitted rate overstates the limit by burst / step length; the answer is the
    rate admitted *after the first 429* (the bucket is empty from there: its refill rate). When that
    rests on fewer than ``confirm_admitted`` requests, one confirming step at 1.5× the estimate (or the
    refused rate, if higher) runs long enough for them, within the cap.
    """
    runs: list[Run] = []
    sent = 0
    rate = spec.start
    found: RateFlag | None = None
    offered = 0.0
    note = None
    while rate <= spec.ceiling and not stopped():
        budget = spec.cap - sent
        seconds = min(spec.step_s, (budget - 1) / rate - spec.warmup_s)
        if seconds < 1.0:
            note = f"stopped at the safety cap of {spec.cap} requests"
            break
        run = await run_rate(rate, seconds)
        runs.append(run)
        sent += _sent(rate, seconds, spec.warmup_s)
        if run.requests and run.refused() / run.requests >= spec.refuse_fraction:
            found = assess([run])[0]
            offered = rate
            break
        rate = round(rate * spec.factor, 3)
    else:
        if not stopped():
            note = f"no 429 up to the ceiling of {spec.ceiling:g} req/s"
    if found is not None and found.per_s and not stopped():
        admitted = found.steady_admitted or 0
        if admitted < spec.confirm_admitted:
            est = found.per_s
            confirm = round(max(offered, 1.5 * est), 3)
            # Long enough to empty a bucket of one second's worth at (confirm − est) and then admit the rest.
            seconds = spec.confirm_admitted / est + est / max(confirm - est, 1e-9)
            seconds = min(seconds, (spec.cap - sent - 1) / confirm - spec.warmup_s)
            if seconds >= 1.0:
                run = await run_rate(confirm, seconds)
                runs.append(run)
                sent += _sent(confirm, seconds, spec.warmup_s)
                if run.refused():
                    better = assess([run])[0]
                    if (better.steady_admitted or 0) > admitted:
                        found = better
    target = runs[0].target.name if runs else None
    rates_tried = [r.load.get_rate() for r in runs]
    if found is not None:
        summary = _summary(str(target), found, offered)
    else:
        last = rates_tried[-1] if rates_tried else None
        below = "?" if last is None else _rate(last)
        summary = f"{target}: no rate limit found below {below} req/s ({note})"
    entry = LimitEntry(
        target=target,
        found=found is not None,
        per_s=None if found is None else found.per_s,
        rpm=None if found is None else found.rpm,
        tpm_header=None if found is None else found.tpm_header,
        limit_requests_header=None if found is None else found.limit_requests_header,
        header=None if found is None else found.header,
        trust=None if found is None else found.trust,
        answer_per_s=None if found is None else found.answer_per_s,
        why=None if found is None else found.why,
        steady_admitted=None if found is None else found.steady_admitted,
        retry_after_s_max=None if found is None else found.retry_after_s_max,
        refused_at_offered_per_s=None if found is None else offered,
        rates_tried=rates_tried,
        requests_sent_max=sent,
        cap=spec.cap,
        note=note,
        summary=summary,
    )
    return runs, entry


def _rate(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


_PERIOD_NAMES = {1.0: "s", 60.0: "min", 3600.0: "h", 86400.0: "day"}


def _summary(target: str, found: RateFlag, offered: float) -> str:
    """One line: the answer, the measured rate beside the stated one, and which to trust."""
    measured = found.per_s or 0.0
    n = found.steady_admitted
    basis = f"steady state, {n} admitted after the first 429" if n else "average over the refused step"
    parts = [
        f"{target}: refused from {_rate(offered)} req/s offered",
        f"measured ~{_rate(measured)} req/s per key (RPM ~{measured * 60:.0f}; {basis})",
    ]
    stated = found.header
    if stated:
        period = _PERIOD_NAMES.get(stated.period_s, f"{stated.period_s:g}s")
        parts.append(f"stated {stated.limit:g}/{period} = {_rate(stated.per_s)} req/s (x-ratelimit-limit-requests)")
    else:
        parts.append("no x-ratelimit-limit-requests header")
    if found.tpm_header:
        parts.append(f"TPM {found.tpm_header:g} (header)")
    answer = found.answer_per_s
    head = f"limit ~{_rate(answer)} req/s ({found.trust}): " if answer is not None else ""
    return head + "; ".join(parts) + f". {found.why[0].upper()}{found.why[1:]}."


class Steady(TypedDict, total=False):
    """The limiter's steady state of one run (the run object's ``rate_limit.steady_*``)."""

    steady_per_s: float
    steady_admitted: int
    steady_s: float


def steady_rate(sends: Sequence[tuple[float, bool]]) -> Steady:
    """What a limiter admits once its bucket is empty: requests admitted after the first 429 per second.

    ``sends``: an open-loop run's (send time, refused with 429) per request (``RunRecorder.sends``). A token
    bucket lets its whole burst through first, so the admitted rate of a run is the limit plus the burst
    spread over the run (a 10 req/s bucket read as ~11.8 over 3 s). From the first refused send on, the bucket
    is empty and admits exactly its refill rate: counting admitted sends from there to the last send measures
    the limit itself, ±1 request over the window. Empty when the run was not open loop or had no 429.
    """
    first_refused = min((t for t, refused in sends if refused), default=None)
    if first_refused is None:
        return {}
    window = max(t for t, _ in sends) - first_refused
    if window <= 0:
        return {}
    admitted = sum(1 for t, refused in sends if t > first_refused and not refused)
    return Steady(steady_per_s=round(admitted / window, 3), steady_admitted=admitted, steady_s=round(window, 3))
