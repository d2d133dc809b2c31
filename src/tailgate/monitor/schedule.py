"""When the monitor's rounds start: a fixed interval with a random delay (jitter) inside each slot.

Round ``k`` is due at ``origin + k * interval + U(0, jitter * interval)``. The jitter keeps several
monitors (or one monitor and a provider's own minute boundaries) from probing in lock-step; the fixed
grid keeps the long-run rate at one round per interval. A round that overruns its slot is not made up:
the next round goes in the next slot that has not started yet.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable

__all__ = ["Schedule"]


class Schedule:
    """Round start times on a clock (monotonic seconds by default); ``rng`` and ``clock`` are injectable."""

    def __init__(
        self,
        interval_s: float,
        *,
        jitter: float = 0.1,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise ValueError(f"interval must be a positive number of seconds, got {interval_s!r}")
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"jitter must be in [0, 1), got {jitter!r}")
        self.interval_s = interval_s
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._clock = clock
        self._origin = clock()
        self._slot = -1

    def next_due(self) -> float:
        """Take the next slot that has not begun yet and return when its round is due (clock time)."""
        now = self._clock()
        current = math.floor((now - self._origin) / self.interval_s)
        # The first round goes at once (slot 0 without jitter); later ones take the next free slot.
        self._slot = 0 if self._slot < 0 else max(self._slot + 1, current + 1)
        if self._slot == 0:
            return self._origin
        offset = self._rng.uniform(0.0, self.jitter * self.interval_s)
        return self._origin + self._slot * self.interval_s + offset

    def delay(self) -> float:
        """Seconds from now until the next round (0.0 when it is due already)."""
        return max(0.0, self.next_due() - self._clock())
