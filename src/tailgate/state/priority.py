"""Priority at the pacer: interactive requests first, the batch lane on what they leave.

**The promise** (one sentence, :func:`keep_level`): *a batch-lane take never leaves a provider's pacing bucket
below what one interactive request needs plus the interactive reserve (the interactive demand measured over the
last window × the bucket's burst time, as much of it as the bucket holds beside a batch request) — so the first
interactive request at any moment is never delayed by batch work, and a burst of them is not delayed while it
stays within the measured interactive rate.*

The bucket is a token bucket (``rate`` per second, at most ``burst``) that may run into a ``debt`` of at most
one request where the limit's headroom covers it: an interactive request then goes as soon as the level is not
negative (a bucket of less than two requests would otherwise waste the refill that arrives while it is full and
nobody is there to take it: a fleet of replicas with small slices left a fifth of its budget idle). A batch
take must keep the reserve beside that, so it takes only tokens the interactive traffic measured over the last
window would not have used.

:class:`PaceBucket` is the bucket's arithmetic, in one place for both backends: ``LocalState.pace`` keeps one
per name in the process, ``RedisState.pace`` runs the same steps in Lua on Redis's clock (``_lua.PACE``), so a
fleet shares one bucket per provider. :class:`LaneMeter` measures the interactive demand the reserve is made
of. :func:`lane_of` says which lane a live request is in.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

__all__ = ["Lane", "LaneMeter", "PaceBucket", "keep_level", "lane_of", "lane_weights"]

Lane = Literal["interactive", "batch"]

INTERACTIVE_MARGIN = 1.25
"""In the fleet's split, interactive demand counts this much above its measured rate before batch gets the rest."""


def lane_of(traffic_class: str | None, body: Mapping[str, Any] | None) -> Lane:
    """A live request's lane: ``batch`` when its class is ``batch`` (``x-tailgate-class: batch`` or the key's
    default) or its body asks OpenAI's ``service_tier: "flex"``; ``interactive`` otherwise."""
    if traffic_class == "batch":
        return "batch"
    if body is not None and body.get("service_tier") == "flex":
        return "batch"
    return "interactive"


def keep_level(lane: Lane, amount: float, reserve: float, debt: float = 0.0) -> float:
    """The level a take of ``amount`` must leave in the bucket (the promise in the module docstring).

    Interactive: ``-debt`` — it goes whenever the bucket holds ``amount - debt`` (``debt`` ≤ ``amount``: a bucket
    may run that far below 0; 0, a plain token bucket). Batch: ``reserve`` (≥ 0) plus what an interactive take of
    the same size needs, ``amount - debt`` — so after any batch take an interactive one still goes, and the
    interactive traffic's reserve is still there."""
    debt = min(max(0.0, debt), amount)
    if lane == "interactive":
        return -debt
    return max(0.0, reserve) + amount - debt


def lane_weights(
    target: float | None, demands: Sequence[tuple[float, float]], margin: float = INTERACTIVE_MARGIN
) -> list[float]:
    """The fleet-wide priority of a provider's pacing split: each replica's weight from its (interactive, batch)
    demand (requests per second), its share of the target being its weight ÷ the weights' sum.

    A replica weighs its interactive demand × ``margin`` (room for its jitter), plus — only where the fleet's
    interactive demand × ``margin`` leaves part of ``target`` (requests per second) — that spare part in
    proportion to its batch demand. So batch work on one replica never takes the share another replica's
    interactive traffic needs; without batch demand (or without a request-rate target) the weights are the total
    demands, the split as before."""
    if target is None:
        return [max(0.0, i) + max(0.0, b) for i, b in demands]
    batch = sum(max(0.0, b) for _, b in demands)
    if batch <= 0:
        return [max(0.0, i) for i, _ in demands]
    spare = max(0.0, target - sum(max(0.0, i) * margin for i, _ in demands))
    return [max(0.0, i) * margin + spare * max(0.0, b) / batch for i, b in demands]


class PaceBucket:
    """A token bucket with a debt floor (see the module docstring); times in seconds on any one clock."""

    __slots__ = ("level", "updated")

    def __init__(self, level: float, updated: float) -> None:
        self.level = level
        self.updated = updated

    def take(self, now: float, amount: float, rate: float, burst: float, keep: float) -> tuple[bool, float, float]:
        """Refill to ``now``, then take ``amount`` if the level after it stays ≥ ``keep``.

        Returns ``(ok, retry_after_s, level after)``: when refused, the seconds until the same take could
        succeed at ``rate`` (``inf`` when it never can: ``amount + keep`` above ``burst``)."""
        if now > self.updated:
            self.level = min(burst, self.level + (now - self.updated) * rate)
            self.updated = now
        if self.level - amount >= keep:
            self.level -= amount
            return True, 0.0, self.level
        if amount + keep > burst or rate <= 0:
            return False, math.inf, self.level
        return False, (amount + keep - self.level) / rate, self.level


class LaneMeter:
    """Interactive demand (requests or tokens wanted, admitted or not) per second over the last ``window_s``.

    ``reserve(burst_s)`` is what :func:`keep_level` keeps for it: the demand × the bucket's burst time."""

    __slots__ = ("_clock", "_events", "_sum", "window_s")

    def __init__(self, window_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._events: collections.deque[tuple[float, float]] = collections.deque()
        self._sum = 0.0

    def add(self, amount: float = 1.0) -> None:
        now = self._clock()
        events = self._events
        events.append((now, amount))
        self._sum += amount
        if events[0][0] < now - self.window_s:  # the oldest is out of the window (an attempt's hot path)
            self._trim(now)

    def _trim(self, now: float | None = None) -> None:
        lo = (self._clock() if now is None else now) - self.window_s
        while self._events and self._events[0][0] < lo:
            self._sum -= self._events.popleft()[1]
        if not self._events:
            self._sum = 0.0

    def rate(self) -> float:
        """Demand per second over the window."""
        self._trim()
        return max(0.0, self._sum) / self.window_s

    def reserve(self, burst_s: float) -> float:
        """What a batch take must leave in a bucket of ``burst_s`` seconds for this demand."""
        return self.rate() * burst_s
