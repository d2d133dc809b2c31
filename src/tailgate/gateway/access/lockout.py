"""The per-address lockout of the access guard (``server.admin_max_failures`` per ``admin_failure_window``):
an address with too many failed key checks gets a 429 + Retry-After for its wrong keys for a while
(docs/reliability.md). The guard asks only after a key failed: a right key is never refused here."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError

__all__ = ["SourceLockout"]


class SourceLockout:
    """Failed key checks per client address: past ``max_failures`` within ``window_s`` that address's wrong
    keys are refused (429 + Retry-After) until the window since its first failure ends. Memory is bounded: at
    most ``max_sources`` addresses are remembered."""

    def __init__(
        self,
        max_failures: int,
        window_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_sources: int = 10_000,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.clock = clock
        self.max_sources = max_sources
        self._failures: dict[str, tuple[float, int]] = {}
        """address → (time of the first failure in this window, failures)."""

    def refusal(self, source: str | None) -> WireError | None:
        """A 429 when ``source`` is locked out now, else None."""
        entry = self._failures.get(source or "")
        if entry is None:
            return None
        start, count = entry
        left = start + self.window_s - self.clock()
        if left <= 0:
            del self._failures[source or ""]
            return None
        if count < self.max_failures:
            return None
        err = wire_errors.rate_limited(
            f"Too many failed key checks from this address; retry after {left:.0f}s (server.admin_max_failures)."
        )
        err.headers = {"Retry-After": str(max(1, math.ceil(left)))}
        return err

    def failed(self, source: str | None) -> None:
        key, now = source or "", self.clock()
        start, count = self._failures.get(key, (now, 0))
        if now - start >= self.window_s:
            start, count = now, 0
        if key not in self._failures and len(self._failures) >= self.max_sources:
            oldest = min(self._failures, key=lambda k: self._failures[k][0])
            del self._failures[oldest]
        self._failures[key] = (start, count + 1)
