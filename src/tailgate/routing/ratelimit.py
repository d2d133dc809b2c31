"""A token bucket with an injectable clock (client-key RPM limits, later provider pacing)."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """``rate`` tokens per ``period`` seconds, holding at most ``burst`` (default: one period's worth)."""

    __slots__ = ("_clock", "_rate", "_tokens", "_updated", "burst")

    def __init__(
        self,
        rate: float,
        period: float = 60.0,
        *,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or period <= 0:
            raise ValueError(f"rate and period must be positive, got {rate}/{period}s")
        self._rate = rate / period
        self.burst = burst if burst is not None else max(1.0, rate)
        self._tokens = self.burst
        self._clock = clock
        self._updated = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._updated) * self._rate)
        self._updated = now

    def try_take(self, n: float = 1.0) -> bool:
        """Take ``n`` tokens if available."""
        self._refill()
        if self._tokens >= n:
            self._tokens -= n
            return True
        return False

    def take_debt(self, n: float) -> None:
        """Take ``n`` tokens whatever the bucket holds (it may go below zero: a debt the refill pays first)."""
        self._refill()
        self._tokens -= n

    def wait_time(self, n: float = 1.0) -> float:
        """Seconds until ``n`` tokens are available (0 when they are now)."""
        self._refill()
        return max(0.0, (n - self._tokens) / self._rate)

    def set_rate(self, rate: float, period: float = 60.0, *, burst: float | None = None) -> None:
        """Change the fill rate (and size) from now on; tokens held are kept up to the new size."""
        if rate <= 0 or period <= 0:
            raise ValueError(f"rate and period must be positive, got {rate}/{period}s")
        self._refill()
        self._rate = rate / period
        self.burst = burst if burst is not None else max(1.0, rate)
        self._tokens = min(self._tokens, self.burst)

    @property
    def remaining(self) -> float:
        self._refill()
        return self._tokens
