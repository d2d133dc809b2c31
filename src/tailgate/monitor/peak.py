"""The monitor's scheduled peak-hour load test (``tailgate monitor --peak-at 11:00``).

Our users load-test at their real peak, around 11:00 on weekdays, when their providers are slowest. At the configured
local time the monitor runs a short bench profile against every provider × model — a closed-loop sweep
(``--peak-levels``) and, if asked, a capacity search (``--peak-find-max``) — and stores one row per pair in
``load_tests`` (P90/P99 at the highest level, the decay ratio across the levels, the capacity found), which
the leaderboard shows as its own columns.

Within pacing limits: a provider with ``limits.rpm`` gets at most its per-minute budget over each level
(``requests_cap``), so the test never pushes it past what the gateway itself would send. The bench
profile runner is injected (the CLI passes :func:`tailgate.bench.profile.run_profile`): the monitor does
not import the bench face.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tailgate.config.resolve import ResolvedProvider
from tailgate.ledger.loadtests import LoadTest, insert_load_test
from tailgate.ledger.schema import open_db
from tailgate.monitor.runner import Target
from tailgate.stats.shown import MINIMUMS, percentile_minimum
from tailgate.upstream import Endpoint, endpoint_for

__all__ = [
    "PeakProfile",
    "PeakSchedule",
    "ProfileResult",
    "ProfileRunner",
    "peak_cells",
    "peak_line",
    "peak_loop",
    "requests_cap",
    "run_peak",
]

log = logging.getLogger("tailgate.monitor")

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class ProfileResult(Protocol):
    """The numbers a profile run gives back (``tailgate.bench.profile.ProfileResult`` has this shape)."""

    @property
    def requests(self) -> int: ...
    @property
    def errors(self) -> int: ...
    @property
    def ttft_p90_ms(self) -> float | None: ...
    @property
    def ttft_p99_ms(self) -> float | None: ...
    @property
    def e2e_p90_ms(self) -> float | None: ...
    @property
    def e2e_p99_ms(self) -> float | None: ...
    @property
    def decay_p99_e2e(self) -> float | None: ...
    @property
    def capacity(self) -> float | None: ...
    @property
    def capacity_by(self) -> str | None: ...
    def detail(self) -> str:
        """The per-level numbers as the JSON text ``load_tests.detail`` keeps."""
        ...


ProfileRunner = Callable[..., Awaitable[ProfileResult]]
"""``run_profile(endpoint, model, *, levels, duration_s, warmup_s, max_tokens, find_max_expr, max_requests)``."""


def parse_days(text: str) -> frozenset[int]:
    """``mon-fri``, ``daily``, ``sat,sun`` → weekday numbers (Monday = 0)."""
    text = text.strip().lower()
    if text in ("daily", "every", "all", "*"):
        return frozenset(range(7))
    out: set[int] = set()
    for part in text.split(","):
        a, dash, b = part.strip().partition("-")
        if a not in DAYS or (dash and b not in DAYS):
            raise ValueError(f"--peak-days: cannot read {part.strip()!r}; use e.g. mon-fri, daily or sat,sun")
        i, j = DAYS.index(a), DAYS.index(b) if dash else DAYS.index(a)
        out.update(range(i, j + 1) if i <= j else [*range(i, 7), *range(j + 1)])
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class PeakSchedule:
    """A local wall-clock time on some weekdays; ``tz`` None means the machine's local time zone."""

    hour: int
    minute: int
    days: frozenset[int]
    tz: dt.tzinfo | None = None

    @classmethod
    def parse(cls, at: str, days: str = "mon-fri", tz: dt.tzinfo | None = None) -> PeakSchedule:
        m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*", at)
        if m is None or int(m.group(1)) > 23 or int(m.group(2)) > 59:
            raise ValueError(f"--peak-at: {at!r} is not a local time HH:MM (e.g. 11:00)")
        return cls(int(m.group(1)), int(m.group(2)), parse_days(days), tz)

    def next_after(self, now: dt.datetime) -> dt.datetime:
        """The first scheduled moment strictly after ``now`` (an aware datetime)."""
        local = now.astimezone(self.tz)
        for ahead in range(8):
            day = local.date() + dt.timedelta(days=ahead)
            at = dt.datetime(day.year, day.month, day.day, self.hour, self.minute, tzinfo=local.tzinfo)
            if self.tz is None:
                at = at.replace(tzinfo=None).astimezone()  # the local offset of that day (DST)
            if at > local and at.weekday() in self.days:
                return at
        raise ValueError("no scheduled day")  # pragma: no cover - parse_days never yields an empty set

    def seconds_until(self, now: dt.datetime) -> float:
        return (self.next_after(now) - now).total_seconds()


@dataclass(frozen=True, slots=True)
class PeakProfile:
    """What one scheduled test runs against each provider × model."""

    levels: tuple[int, ...] = (1, 10, 50)
    duration_s: float = 30.0
    warmup_s: float = 2.0
    max_tokens: int = 128
    find_max: tuple[str, ...] = ()

    def label(self) -> str:
        text = f"c={','.join(map(str, self.levels))} {self.duration_s:g}s"
        return text + (f" find-max {' and '.join(self.find_max)}" if self.find_max else "")


def requests_cap(provider: ResolvedProvider, profile: PeakProfile) -> int | None:
    """At most the provider's per-minute budget over one level (warm-up included); None without ``rpm``."""
    rpm = provider.limits.rpm
    if rpm is None:
        return None
    return max(1, int(rpm / 60.0 * (profile.duration_s + profile.warmup_s)))


async def run_peak(
    providers: Mapping[str, ResolvedProvider],
    targets: Sequence[Target],
    profile: PeakProfile,
    runner: ProfileRunner,
    db_path: str | Path,
    *,
    wall: Callable[[], float] = time.time,
    endpoint: Callable[[ResolvedProvider], Endpoint] = endpoint_for,
) -> list[LoadTest]:
    """Test every pair one after another (one provider's peak test never loads another's numbers)."""
    rows: list[LoadTest] = []
    for target in targets:
        provider = providers[target.provider]
        ts = wall()
        try:
            result = await runner(
                endpoint(provider),
                target.model,
                levels=profile.levels,
                duration_s=profile.duration_s,
                warmup_s=profile.warmup_s,
                max_tokens=profile.max_tokens,
                find_max_expr=profile.find_max,
                max_requests=requests_cap(provider, profile),
            )
        except Exception as exc:  # one provider's failure must not end the others' tests
            log.warning("peak test of %s / %s failed: %r", target.provider, target.model, exc)
            continue
        rows.append(
            LoadTest(
                ts=ts,
                provider=target.provider,
                model=target.model,
                profile=profile.label(),
                requests=result.requests,
                errors=result.errors,
                ttft_p90_ms=result.ttft_p90_ms,
                ttft_p99_ms=result.ttft_p99_ms,
                e2e_p90_ms=result.e2e_p90_ms,
                e2e_p99_ms=result.e2e_p99_ms,
                decay_p99_e2e=result.decay_p99_e2e,
                capacity=result.capacity,
                capacity_by=result.capacity_by,
                detail=result.detail(),
            )
        )
    await asyncio.to_thread(_store, db_path, rows)
    return rows


def _store(db_path: str | Path, rows: list[LoadTest]) -> None:
    conn = open_db(db_path)
    try:
        for row in rows:
            insert_load_test(conn, row)
    finally:
        conn.close()


def _peak_n(test: LoadTest, level: int) -> int:
    """Successful requests of one level of the test (``-1``: the highest, ``0``: the lowest)."""
    levels = test.levels()
    if not levels:
        return max(0, test.requests - test.errors)
    lv = levels[level]
    return max(0, int(lv.get("requests") or 0) - int(lv.get("errors") or 0))


def _peak_value(value: float | None, n: int, q: int) -> str:
    minimum = percentile_minimum(q)
    if n < minimum:
        return f"n<{minimum}"
    return "-" if value is None else f"{value / 1000.0:.2f}"


def peak_cells(test: LoadTest | None) -> dict[str, str]:
    """The peak-hour load test columns: TTFT P90 / P99 (s) at the highest level with its request count,
    the decay ratio (withheld unless both levels have P99's minimum), the capacity found."""
    if test is None:
        return dict.fromkeys(("peak_n", "peak_p90", "peak_p99", "peak_decay", "peak_capacity"), "-")
    top, low = _peak_n(test, -1), _peak_n(test, 0)
    p99_min = MINIMUMS["p99"]
    if test.decay_p99_e2e is None:
        decay = "-"
    elif min(top, low) < p99_min:
        decay = f"n<{p99_min}"
    else:
        decay = f"{test.decay_p99_e2e:.2f}×"
    cap = "-" if test.capacity is None else f"{test.capacity:g}"
    return {
        "peak_n": str(top),
        "peak_p90": _peak_value(test.ttft_p90_ms, top, 90),
        "peak_p99": _peak_value(test.ttft_p99_ms, top, 99),
        "peak_decay": decay,
        "peak_capacity": cap,
    }


def peak_line(row: LoadTest) -> str:
    """The log line of one stored test: whole numbers, seconds to 2 decimals, withheld below the minimums."""
    cells = peak_cells(row)
    capacity = "not searched" if row.capacity is None else f"{row.capacity:g} {row.capacity_by or ''}".rstrip()

    def secs(cell: str) -> str:
        return cell if cell.startswith("n<") or cell == "-" else f"{cell} s"

    return (
        f"peak test {row.provider} / {row.model}: {row.requests} requests, {row.errors} errors; "
        f"highest level TTFT P90 {secs(cells['peak_p90'])}, P99 {secs(cells['peak_p99'])} (n={cells['peak_n']}); "
        f"decay (P99 E2E, highest ÷ lowest level) {cells['peak_decay']}; capacity {capacity}"
    )


async def peak_loop(
    stop: asyncio.Event,
    schedule: PeakSchedule,
    run: Callable[[], Awaitable[list[LoadTest]]],
    echo: Callable[[str], None],
    *,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now().astimezone(),
) -> None:
    """Wait for each scheduled moment and run the test, until ``stop``."""
    while not stop.is_set():
        due = schedule.next_after(now())
        echo(f"peak-hour load test due {due.isoformat(timespec='minutes')}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, (due - now()).total_seconds()))
        if stop.is_set():
            return
        try:
            rows = await run()
        except (OSError, sqlite3.Error) as exc:
            echo(f"error: peak-hour load test not stored: {exc}")
            continue
        for r in rows:
            echo(peak_line(r))
