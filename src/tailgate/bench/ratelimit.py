"""Rate-limit honesty: when a provider refuses with 429, say so, and say where its limit is.

Our users found a provider that allowed only ~20 requests/s per API key until support raised it
(FIELD-NOTES.md); a load test that does not notice measures the limiter, not the service. So:

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

import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FLAG = "rate-limited above ~{n} req/s per key: these numbers measure the limiter, not the service"


def admitted_per_s(run: Mapping[str, Any]) -> float | None:
    """Steady-state admitted (not refused) requests per second of one run.

    Open loop: the offered rate × the admitted fraction (the schedule is exact, so this needs no timing);
    a warm-up at the same rate has drained the bucket's initial burst. Closed loop: the median of the
    per-second counts of finished requests, first and last second left out.
    """
    timeline = run.get("timeline") or []
    refused = (run.get("errors") or {}).get("rate_limited", 0)
    load = run.get("load") or {}
    requests = int(run.get("requests") or 0)
    if load.get("mode") == "open" and load.get("rate") and requests:
        return round(float(load["rate"]) * (requests - int(refused)) / requests, 3)
    interior = timeline[1:-1]
    if len(interior) >= 3:
        # Errors other than 429 are admitted too (the provider took them in); the timeline does not split
        # error kinds, so they are apportioned: refused share of the run's errors is left out.
        errors = max(1, sum(b["errors"] for b in timeline))
        keep = 1.0 - refused / errors if refused else 1.0
        return round(float(statistics.median(b["ok"] + b["errors"] * keep for b in interior)), 3)
    duration = (run.get("throughput") or {}).get("duration_s")
    if not duration:
        return None
    return round((int(run["requests"]) - int(refused)) / float(duration), 3)


def _num(text: Any) -> float | None:
    try:
        return float(str(text).strip())
    except (TypeError, ValueError):
        return None


def assess(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per target whose runs met 429s: the admitted rate, the headers, and the flag text."""
    by_target: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        name = str((run.get("target") or {}).get("name"))
        by_target.setdefault(name, []).append(run)
    out: list[dict[str, Any]] = []
    for name, target_runs in by_target.items():
        limited = [r for r in target_runs if (r.get("errors") or {}).get("rate_limited", 0) > 0]
        if not limited:
            continue
        # The most refused run says the most about the limit: its admitted rate is the limiter's.
        worst = max(limited, key=lambda r: r["errors"]["rate_limited"] / max(1, r["requests"]))
        per_s = admitted_per_s(worst)
        headers: dict[str, str] = {}
        retry: float | None = None
        for r in target_runs:
            rl = r.get("rate_limit") or {}
            headers.update(rl.get("headers") or {})
            ra = rl.get("retry_after_s_max")
            if ra is not None:
                retry = max(retry or 0.0, float(ra))
        refused = sum(r["errors"]["rate_limited"] for r in target_runs)
        requests = sum(r["requests"] for r in target_runs)
        shown = "?" if per_s is None else f"{per_s:.0f}" if per_s >= 10 else f"{per_s:.1f}"
        out.append(
            {
                "target": name,
                "per_s": per_s,
                "rpm": None if per_s is None else round(per_s * 60.0, 1),
                "tpm_header": _num(headers.get("limit-tokens")),
                "limit_requests_header": _num(headers.get("limit-requests")),
                "retry_after_s_max": retry,
                "refused": refused,
                "requests": requests,
                "from_run": list(runs).index(worst),
                "flag": FLAG.format(n=shown),
            }
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


RunRate = Callable[[float, float], Awaitable[dict[str, Any]]]
"""Runs an open loop at (rate, measured seconds) and returns the run object."""


async def find_limit(
    spec: LimitSpec, run_rate: RunRate, *, stopped: Callable[[], bool] = lambda: False
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Ramp until refused; returns (the runs, the ``limit`` entry of the document)."""
    runs: list[dict[str, Any]] = []
    sent = 0
    rate = spec.start
    found: dict[str, Any] | None = None
    note = None
    while rate <= spec.ceiling and not stopped():
        budget = spec.cap - sent
        seconds = min(spec.step_s, (budget - 1) / rate - spec.warmup_s)
        if seconds < 1.0:
            note = f"stopped at the safety cap of {spec.cap} requests"
            break
        run = await run_rate(rate, seconds)
        runs.append(run)
        sent += int(rate * (seconds + spec.warmup_s)) + 1
        refused = run["errors"].get("rate_limited", 0)
        if run["requests"] and refused / run["requests"] >= spec.refuse_fraction:
            found = assess([run])[0]
            found["offered_per_s"] = rate
            break
        rate = round(rate * spec.factor, 3)
    else:
        if not stopped():
            note = f"no 429 up to the ceiling of {spec.ceiling:g} req/s"
    target = (runs[0]["target"] if runs else {}).get("name")
    entry: dict[str, Any] = {
        "target": target,
        "found": found is not None,
        "per_s": None if found is None else found["per_s"],
        "rpm": None if found is None else found["rpm"],
        "tpm_header": None if found is None else found["tpm_header"],
        "limit_requests_header": None if found is None else found["limit_requests_header"],
        "retry_after_s_max": None if found is None else found["retry_after_s_max"],
        "refused_at_offered_per_s": None if found is None else found["offered_per_s"],
        "rates_tried": [r["load"].get("rate") for r in runs],
        "requests_sent_max": sent,
        "cap": spec.cap,
        "note": note,
    }
    if found is not None:
        tpm = f", TPM {found['tpm_header']:g} (header)" if found["tpm_header"] else ""
        entry["summary"] = (
            f"{target}: refused from {found['offered_per_s']:g} req/s offered; admitted ~{found['per_s']:.1f} req/s "
            f"per key (RPM ~{found['rpm']:.0f}{tpm})"
        )
    else:
        last = entry["rates_tried"][-1] if entry["rates_tried"] else None
        entry["summary"] = f"{target}: no rate limit found below {last} req/s ({note})"
    return runs, entry
