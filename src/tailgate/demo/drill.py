"""The failover drill: its phases, and what happened in each, computed from plain records.

Our users' drill: shut the primary off at peak and verify the cut-over — theirs took
7 minutes. The demo degrades the primary (latency × 5), then takes it down (outage), then restores it,
while background traffic runs; this module turns what the traffic saw (one :class:`RequestRecord` per
request) and what the primary itself saw (arrival times from its ground truth) into a
:class:`PhaseReport` per phase. Pure functions: no I/O, no clock.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from tailgate.routing import Route
from tailgate.routing.promises import configured_split
from tailgate.stats import LatencyHistogram

PHASES = ("warm-up", "degraded", "outage", "restored")
"""Phase names in order. ``degraded`` starts with the latency fault, ``outage`` with the outage, ``restored``
with clearing all faults."""

CUTOVER_SHARE = 0.01
"""Cut-over: from the fault, the moment after which fewer than 1% of new requests reach the primary."""


@dataclass(frozen=True, slots=True)
class DrillPlan:
    """Phase lengths in seconds. ``restored`` is how long to watch after the restore before reporting."""

    warmup: float
    degraded: float
    outage: float
    restored: float

    @classmethod
    def for_duration(cls, duration: float | None) -> DrillPlan:
        """Scale the phases to a run: ``--duration 20`` gives 4 s phases and 8 s after the restore.

        Without a duration the drill runs once with phases long enough to see the adaptive policy
        settle (its windows are 60 s, its smoothing ~3 s) and the breaker's first cool-downs (5–10 s).
        """
        if duration is None:
            return cls(warmup=20.0, degraded=20.0, outage=20.0, restored=30.0)
        fifth = duration / 5
        return cls(warmup=fifth, degraded=fifth, outage=fifth, restored=2 * fifth)

    @property
    def total(self) -> float:
        return self.warmup + self.degraded + self.outage + self.restored


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One background request as the client saw it. Times are wall-clock Unix seconds.

    ``sent`` is the *intended* send time (open loop); latencies count from it. ``provider`` and
    ``attempts`` are the gateway's ``x-tailgate-provider`` / ``x-tailgate-attempts`` headers.
    ``streamed`` is True once the first token reached the client (a failure after that is mid-stream).
    """

    sent: float
    traffic_class: str
    stream: bool
    ok: bool
    provider: str | None = None
    attempts: int | None = None
    status: int | None = None
    error_class: str | None = None
    streamed: bool = False
    ttft_s: float | None = None
    e2e_s: float | None = None


@dataclass(frozen=True, slots=True)
class PhaseWindow:
    """One phase as it actually ran: its name and wall-clock bounds."""

    name: str
    start: float
    end: float


@dataclass(slots=True)
class PhaseReport:
    """What happened in one phase (requests counted by intended send time; latencies of interactive ones)."""

    name: str
    start: float
    end: float
    sent: int = 0
    ok: int = 0
    failed_before_stream: int = 0
    failed_mid_stream: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    ttft_p90: float | None = None
    ttft_p99: float | None = None
    e2e_p90: float | None = None
    e2e_p99: float | None = None
    served: dict[str, float] = field(default_factory=dict)
    """Share of successful requests per serving provider (0–1)."""
    primary_arrivals: int = 0
    """Requests that reached the primary in this phase (its own ground truth: retried ones included)."""
    primary_share_end: float | None = None
    """Requests reaching the primary ÷ requests sent, over the last quarter of the phase (where it settled)."""
    cutover_s: float | None = None
    """Fault → fewer than 1% of new requests reach the primary (degraded and outage phases)."""
    readmitted_s: float | None = None
    """Restore → the first request the primary served again (restored phase)."""
    recovered_s: float | None = None
    """Restore → the primary serves at least half of its warm-up share again (2 s windows)."""

    @property
    def failed(self) -> int:
        return self.failed_before_stream + self.failed_mid_stream

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def primary_attempt_share(self) -> float | None:
        """Requests reaching the primary ÷ requests sent (can exceed its served share: failed tries count)."""
        return self.primary_arrivals / self.sent if self.sent else None


def configured_shares(routes: Sequence[Route], batch_share: float) -> dict[str, float]:
    """Share of all requests each provider is configured to serve while every route meets its SLO: the
    interactive requests by the route weights, the batch ones by the weights of the routes that list
    ``batch`` (the router's promise 1). The drill table sets the served split of every phase against it."""
    out: dict[str, float] = {}
    for cls, weight in (("interactive", 1.0 - batch_share), ("batch", batch_share)):
        for route, share in configured_split(routes, cls).items():
            out[route.provider] = out.get(route.provider, 0.0) + weight * share
    return out


def _percentile(values: Sequence[float], q: float) -> float | None:
    if len(values) == 0:
        return None
    h = LatencyHistogram()
    h.record_many(v * 1000.0 for v in values)
    return h.percentile(q) / 1000.0


def cutover_time(fault: float, end: float, sends: Sequence[float], arrivals: Sequence[float]) -> float | None:
    """Seconds from ``fault`` to the cut-over; None when there is none with at least 1 s and 10 requests after it.

    The cut-over is the earliest moment ``c`` from which fewer than 1% of the requests sent reach the
    primary, both over the next second and over the rest of the phase. ``sends`` and ``arrivals`` are
    sorted wall-clock times (client sends; arrivals at the primary). The first condition puts ``c`` at
    the end of the stream of requests still reaching the primary; the second lets a lone trial request
    of a half-open breaker later in the phase pass without undoing the cut-over, as long as the share
    stays under 1% — the definition is about where the traffic went, not about silence.
    """
    lo_s, hi_s = bisect.bisect_left(sends, fault), bisect.bisect_left(sends, end)
    lo_a, hi_a = bisect.bisect_left(arrivals, fault), bisect.bisect_left(arrivals, end)

    def sent(a: float, b: float) -> int:
        return max(0, min(hi_s, bisect.bisect_right(sends, b)) - max(lo_s, bisect.bisect_right(sends, a)))

    def arrived(a: float, b: float) -> int:
        return max(0, min(hi_a, bisect.bisect_right(arrivals, b)) - max(lo_a, bisect.bisect_right(arrivals, a)))

    # Candidate moments: the fault itself, then each arrival (just after it: bisect_right above).
    for c in [fault, *arrivals[lo_a:hi_a]]:
        if end - c < 1.0 or sent(c, end) < 10:
            return None
        next_second = arrived(c, c + 1.0) < CUTOVER_SHARE * max(1, sent(c, c + 1.0))
        rest = arrived(c, end) < CUTOVER_SHARE * sent(c, end)
        if next_second and rest:
            return c - fault
    return None


def _served_share(records: Sequence[RequestRecord], provider: str) -> float | None:
    ok = [r for r in records if r.ok]
    return sum(1 for r in ok if r.provider == provider) / len(ok) if ok else None


def _recovered_time(
    restored: PhaseWindow, records: Sequence[RequestRecord], primary: str, target: float
) -> float | None:
    """Restore → the end of the first 2 s window in which the primary serves ≥ ``target`` of the successes."""
    t = restored.start
    while t + 2.0 <= restored.end:
        window = [r for r in records if t <= r.sent < t + 2.0]
        share = _served_share(window, primary)
        if share is not None and share >= target:
            return t + 2.0 - restored.start
        t += 0.5
    return None


def analyse(
    windows: Sequence[PhaseWindow], records: Sequence[RequestRecord], arrivals: Sequence[float], primary: str
) -> list[PhaseReport]:
    """One :class:`PhaseReport` per phase window, from the client's records and the primary's arrivals."""
    records = sorted(records, key=lambda r: r.sent)
    sends = [r.sent for r in records]
    arrivals = sorted(arrivals)
    reports: list[PhaseReport] = []
    for w in windows:
        rs = records[bisect.bisect_left(sends, w.start) : bisect.bisect_left(sends, w.end)]
        rep = PhaseReport(w.name, w.start, w.end, sent=len(rs))
        ttft: list[float] = []
        e2e: list[float] = []
        served: Counter[str] = Counter()
        for r in rs:
            if r.ok:
                rep.ok += 1
                served[r.provider or "?"] += 1
                if r.traffic_class == "interactive":  # the latency-sensitive class: batch work may wait
                    if r.e2e_s is not None:
                        e2e.append(r.e2e_s)
                    if r.stream and r.ttft_s is not None:
                        ttft.append(r.ttft_s)
                continue
            rep.errors[r.error_class or "error"] += 1
            if r.streamed:
                rep.failed_mid_stream += 1
            else:
                rep.failed_before_stream += 1
        rep.ttft_p90, rep.ttft_p99 = _percentile(ttft, 90), _percentile(ttft, 99)
        rep.e2e_p90, rep.e2e_p99 = _percentile(e2e, 90), _percentile(e2e, 99)
        rep.served = {name: n / rep.ok for name, n in served.most_common()} if rep.ok else {}
        rep.primary_arrivals = bisect.bisect_left(arrivals, w.end) - bisect.bisect_left(arrivals, w.start)
        tail = w.end - (w.end - w.start) / 4
        tail_sent = bisect.bisect_left(sends, w.end) - bisect.bisect_left(sends, tail)
        if tail_sent:
            tail_arrived = bisect.bisect_left(arrivals, w.end) - bisect.bisect_left(arrivals, tail)
            rep.primary_share_end = tail_arrived / tail_sent
        if w.name in ("degraded", "outage"):
            rep.cutover_s = cutover_time(w.start, w.end, sends, arrivals)
        if w.name == "restored":
            first = next((r.sent for r in rs if r.ok and r.provider == primary), None)
            rep.readmitted_s = None if first is None else max(0.0, first - w.start)
            warm = next((x for x in reports if x.name == "warm-up"), None)
            if warm is not None and warm.served.get(primary):
                rep.recovered_s = _recovered_time(w, rs, primary, 0.5 * warm.served[primary])
        reports.append(rep)
    return reports
