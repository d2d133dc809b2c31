"""A circuit breaker per provider: closed → open → half-open → closed, with jittered back-off.

States and transitions (every one is appended to ``transitions`` as ``Transition(time, from_state,
to_state, reason)``, a bounded list, and passed to the optional ``on_transition`` callback):

- **closed** → **open** on the first of
  - the fault rate over the last ``window_s`` reaching ``error_rate_threshold`` with at least
    ``min_samples`` outcomes in the window,
  - ``consecutive_failures`` faults in a row,
  - one ``insufficient_quota`` (a 429 that waiting cannot fix).
- **open** → **half-open** once the cool-down has passed (checked lazily on ``state`` / ``allow()``).
  The cool-down is ``min(cooldown_s × 2**reopens, max_cooldown_s) × (1 ± jitter)``: it doubles on each
  re-open since the breaker last closed, is capped, and is spread by ``jitter`` drawn from the injected
  ``rng`` so breakers opened together do not all retry together.
- **half-open** admits ``trial_requests`` trials through ``allow()``; when that many successes are
  recorded it **closes** (back-off reset), one fault **re-opens** it (back-off doubled). A trial slot that
  gets no outcome within ``trial_timeout_s`` (the request vanished) is given back. Active probes may
  ``record()`` in half-open without ``allow()``: their outcomes count as trials.

Only provider faults count (see ``health.PROVIDER_FAULTS``); ``record(False, "http_4xx" |
"rate_limited" | "cancelled")`` is neutral and ignored, except that it frees a half-open trial slot.
Outcomes recorded while open (late answers to requests sent before it opened) are ignored.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from tailgate.routing.health import NEUTRAL_ERRORS
from tailgate.stats.window import SlidingWindow
from tailgate.upstream.events import CallResult, ErrorClass

__all__ = ["BreakerConfig", "BreakerRegistry", "BreakerState", "CircuitBreaker", "Transition"]

BreakerState = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """Breaker settings; the defaults are the documented ones (docs/routing.md)."""

    error_rate_threshold: float = 0.5
    min_samples: int = 20
    window_s: float = 30.0
    window_buckets: int = 10
    consecutive_failures: int = 5
    cooldown_s: float = 5.0
    max_cooldown_s: float = 10.0
    jitter: float = 0.2
    trial_requests: int = 3
    trial_timeout_s: float = 30.0
    log_size: int = 100

    def __post_init__(self) -> None:
        if not 0.0 < self.error_rate_threshold <= 1.0:
            raise ValueError("error_rate_threshold must be in (0, 1]")
        if self.min_samples < 1 or self.consecutive_failures < 1 or self.trial_requests < 1:
            raise ValueError("min_samples, consecutive_failures and trial_requests must be >= 1")
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError("jitter must be in [0, 1)")
        if self.cooldown_s <= 0 or self.max_cooldown_s < self.cooldown_s:
            raise ValueError("need 0 < cooldown_s <= max_cooldown_s")


@dataclass(frozen=True, slots=True)
class Transition:
    """One state change: clock time, states, and why."""

    time: float
    from_state: BreakerState
    to_state: BreakerState
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"time": self.time, "from": self.from_state, "to": self.to_state, "reason": self.reason}


class CircuitBreaker:
    """One provider's breaker; see the module docstring. ``clock`` and ``rng`` are injectable."""

    def __init__(
        self,
        name: str = "",
        config: BreakerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        on_transition: Callable[[str, Transition], None] | None = None,
    ) -> None:
        self.name = name
        self.config = c = config or BreakerConfig()
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_transition = on_transition
        self._window = SlidingWindow(c.window_s, c.window_buckets, clock)
        self._state: BreakerState = "closed"
        self._consecutive = 0
        self._reopens = 0  # opens since the breaker last closed, minus one
        self._open_until = 0.0
        self.last_cooldown_s = 0.0
        self._trials: list[float] = []  # admit times of trials awaiting an outcome
        self._trial_successes = 0
        self._log: deque[Transition] = deque(maxlen=c.log_size)

    # -- state -----------------------------------------------------------------------------

    def _move(self, to: BreakerState, reason: str) -> None:
        tr = Transition(self._clock(), self._state, to, reason)
        self._state = to
        self._log.append(tr)
        if self._on_transition is not None:
            self._on_transition(self.name, tr)

    def _open(self, reason: str) -> None:
        c = self.config
        if self._state == "closed":
            self._reopens = 0
        else:
            self._reopens += 1
        base = min(c.cooldown_s * 2.0**self._reopens, c.max_cooldown_s)
        self.last_cooldown_s = base * (1.0 + c.jitter * (2.0 * self._rng.random() - 1.0))
        self._open_until = self._clock() + self.last_cooldown_s
        self._trials.clear()
        self._trial_successes = 0
        self._consecutive = 0
        self._move("open", f"{reason}; cool-down {self.last_cooldown_s:.2f}s")

    def force_open(self, seconds: float, reason: str) -> None:
        """Open (or stay open) for ``seconds`` from now because the fleet says so (another replica opened it,
        or runs the half-open trials); the back-off count is left alone. docs/fleet.md."""
        self._open_until = self._clock() + max(0.0, seconds)
        self.last_cooldown_s = max(0.0, seconds)
        self._trials.clear()
        self._trial_successes = 0
        self._consecutive = 0
        if self._state != "open":
            self._move("open", reason)

    def force_close(self, reason: str) -> None:
        """Close now because the fleet says so (another replica's trials passed): back-off reset."""
        if self._state != "closed":
            self._reopens = 0
            self._window.reset()
            self._trials.clear()
            self._trial_successes = 0
            self._consecutive = 0
            self._move("closed", reason)

    def _tick(self) -> BreakerState:
        if self._state == "open" and self._clock() >= self._open_until:
            self._move("half_open", "cool-down elapsed")
        return self._state

    @property
    def state(self) -> BreakerState:
        return self._tick()

    @property
    def is_open(self) -> bool:
        """True while no request may pass (open, cool-down not over)."""
        return self._tick() == "open"

    def retry_in(self) -> float:
        """Seconds until an open breaker turns half-open (0 otherwise)."""
        return max(0.0, self._open_until - self._clock()) if self._tick() == "open" else 0.0

    def _free_stale_trials(self) -> None:
        cutoff = self._clock() - self.config.trial_timeout_s
        self._trials = [t for t in self._trials if t > cutoff]

    def can_admit(self) -> bool:
        """Whether ``allow()`` would say yes now, without taking a trial slot (for policies)."""
        s = self._tick()
        if s == "closed":
            return True
        if s == "open":
            return False
        self._free_stale_trials()
        return len(self._trials) + self._trial_successes < self.config.trial_requests

    def allow(self) -> bool:
        """May a request go to this provider now? In half-open this takes one trial slot."""
        if not self.can_admit():
            return False
        if self._state == "half_open":
            self._trials.append(self._clock())
        return True

    # -- outcomes --------------------------------------------------------------------------

    @property
    def consecutive_failures(self) -> int:
        """Faults in a row since the last success (closed state; 0 after any success)."""
        return self._consecutive

    def record(self, success: bool, error_class: ErrorClass | None = None) -> None:
        """The outcome of a request (or probe) to this provider."""
        s = self._tick()
        neutral = not success and error_class in NEUTRAL_ERRORS
        if s == "open":
            return
        if s == "half_open":
            if self._trials:
                self._trials.pop(0)
            if neutral:
                return
            if not success:
                self._open("trial failed" + (f" ({error_class})" if error_class else ""))
                return
            self._trial_successes += 1
            if self._trial_successes >= self.config.trial_requests:
                self._reopens = 0
                self._window.reset()
                self._move("closed", f"{self._trial_successes} trial requests succeeded")
            return
        if neutral:
            return
        if success:
            self._consecutive = 0
            self._window.incr("ok")
            return
        if error_class == "insufficient_quota":
            self._open("insufficient_quota")
            return
        self._consecutive += 1
        self._window.incr("fail")
        c = self.config
        if self._consecutive >= c.consecutive_failures:
            self._open(f"{self._consecutive} consecutive failures")
            return
        counts = self._window.counters()
        fails = counts.get("fail", 0)
        n = fails + counts.get("ok", 0)
        if n >= c.min_samples and fails / n >= c.error_rate_threshold:
            self._open(f"error rate {fails}/{n} over {c.window_s:g}s")

    def record_result(self, result: CallResult) -> None:
        """``record`` from a ``CallResult``."""
        self.record(result.ok, result.error_class)

    # -- export ----------------------------------------------------------------------------

    @property
    def transitions(self) -> list[Transition]:
        """The most recent transitions, oldest first (at most ``config.log_size``)."""
        return list(self._log)

    def snapshot(self) -> dict[str, Any]:
        s = self._tick()
        counts = self._window.counters()
        return {
            "state": s,
            "retry_in_s": self.retry_in(),
            "last_cooldown_s": self.last_cooldown_s,
            "consecutive_failures": self._consecutive,
            "window_ok": counts.get("ok", 0),
            "window_fail": counts.get("fail", 0),
            "trials_in_flight": len(self._trials),
            "trial_successes": self._trial_successes,
            "transitions": [t.as_dict() for t in list(self._log)[-10:]],
        }


class BreakerRegistry:
    """A ``CircuitBreaker`` per provider, created on first use with shared config, clock and rng."""

    def __init__(
        self,
        config: BreakerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        on_transition: Callable[[str, Transition], None] | None = None,
    ) -> None:
        self.config = config or BreakerConfig()
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_transition = on_transition
        self._by_name: dict[str, CircuitBreaker] = {}
        self.changes = 0
        """Transitions of every breaker so far: a policy's cached plan is stale once this moves."""

    def _moved(self, provider: str, transition: Transition) -> None:
        self.changes += 1
        if self._on_transition is not None:
            self._on_transition(provider, transition)

    def get(self, provider: str) -> CircuitBreaker:
        b = self._by_name.get(provider)
        if b is None:
            b = self._by_name[provider] = CircuitBreaker(
                provider, self.config, clock=self._clock, rng=self._rng, on_transition=self._moved
            )
        return b

    def all_closed(self, providers: Iterable[str]) -> bool:
        """Every one of these breakers is closed (a closed breaker only leaves that state by a transition)."""
        return all(self.get(p).state == "closed" for p in providers)

    def __iter__(self) -> Iterator[CircuitBreaker]:
        return iter(list(self._by_name.values()))
