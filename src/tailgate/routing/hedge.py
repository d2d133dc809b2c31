"""Hedged requests: a budget that caps them, and when to fire one.

If a streamed request has no first token after ``hedge_delay(...)`` seconds, the gateway may send the same
request to the next route; the first to produce a token wins and the other is cancelled. ``HedgeBudget``
keeps the hedges at most ``ratio`` (5 %) of the requests over a sliding ``window_s`` (60 s): every client
request is counted with ``record_request()``; ``may_hedge()`` says yes only if one more hedge keeps
``hedges ≤ ratio × requests`` in the window, and then counts that hedge (call it only when about to
hedge). A fresh window therefore allows the first hedge after ``1 / ratio`` requests (20).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tailgate.stats.window import SlidingWindow

__all__ = ["HedgeBudget", "hedge_delay"]


def hedge_delay(
    p90_ttft: float | None,
    fixed: float | None = None,
    *,
    default: float = 1.0,
    minimum: float = 0.05,
) -> float:
    """Seconds to wait for a first token before hedging: ``fixed`` if given, else the provider's current
    P90 TTFT, else ``default`` (no samples yet); never below ``minimum``."""
    delay = fixed if fixed is not None else (p90_ttft if p90_ttft is not None else default)
    return max(minimum, delay)


class HedgeBudget:
    """Hedges ≤ ``ratio`` × requests over the last ``window_s`` seconds; see the module docstring."""

    def __init__(
        self,
        ratio: float = 0.05,
        window_s: float = 60.0,
        *,
        buckets: int = 12,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError("ratio must be in [0, 1]")
        self.ratio = ratio
        self._window = SlidingWindow(window_s, buckets, clock)

    def record_request(self, n: int = 1) -> None:
        """Count ``n`` client requests (not hedges)."""
        self._window.incr("requests", n)

    def can_hedge(self) -> bool:
        """Whether one more hedge would stay within the budget (counts nothing)."""
        c = self._window.counters()
        return c.get("hedges", 0) + 1 <= self.ratio * c.get("requests", 0)

    def may_hedge(self) -> bool:
        """True (and the hedge is counted) if one more hedge stays within the budget."""
        if self.can_hedge():
            self._window.incr("hedges")
            return True
        return False

    @property
    def requests(self) -> int:
        return self._window.counter("requests")

    @property
    def hedges(self) -> int:
        return self._window.counter("hedges")
