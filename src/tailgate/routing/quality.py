"""Promise 8's evidence: per route, per quality signal, successes / trials over a sliding window.

The interface the gateway (and the monitor's canary rounds) call, pure and on an injected clock:

- :meth:`QualityBoard.record` ``(route, signal, ok, now)`` — one graded outcome of ``route`` (a
  :class:`~tailgate.routing.route.Route`, or its ``(provider, model)``) on ``signal``: ``ok=True`` for a good
  one (a canary answered right, a tool call whose arguments parse and match the schema, a non-empty answer),
  ``False`` for a bad one. Counts are per provider × upstream model, whatever alias the request came by.
  ``now`` is the policy's clock (``HealthRegistry.clock``, monotonic seconds), the same for every caller.
- :meth:`QualityBoard.view` — per route, per signal, the counts and their 95 % Wilson interval
  (:class:`SignalCounts`), for ``/admin/providers``, the dashboard and the store.
- :meth:`QualityBoard.judge` — per route of one alias, a :class:`QualityVerdict`: held off (promise 8,
  ``promises.quality_worse``), re-admitted on a slow start, or clear. ``AdaptivePolicy(quality=board)`` reads it
  in its split; the policy, not the board, keeps the rule that quality never takes every route away.
  Verdicts are kept for ``recompute_s`` (give it ``routing.adaptive.recompute``).

Wiring (the gateway, a few lines): one board per gateway, ``QualityBoard(settings_from(routing.quality),
per_alias={alias: settings_from(routing.quality.merged(models[alias].quality), adaptive.slow_start)})``, passed as
``AdaptivePolicy(quality=board)``; ``board.record(...)`` where an answer is graded; ``board.view(...)`` for the
admin view, the dashboard and the store.

Signals are free strings; the gateway and the monitor record these names (:data:`SIGNALS`): ``canary`` (a
canary task graded against its known answer — providers legitimately differ by a few points, so the wider
``margin``), and the failures seen on live traffic at no extra cost, where a healthy provider is at ~100 %
(``traffic_margin``): ``tool_call`` (arguments valid JSON, a declared tool, matching its schema),
``empty`` (an answer with content), ``content_filter`` (no ``content_filter`` / ``sensitive`` finish with no
output), ``json`` (a ``json_object`` answer that parses), ``reasoning`` (a thinking request answered with
reasoning). A signal whose name starts with ``canary`` (``canary``, ``canary:tool``) is judged as a canary.

Memory: per provider × model × signal one count pair per ``bucket_s`` (10 s) over the longest window.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tailgate.routing.promises import quality_back, quality_worse, slow_start
from tailgate.routing.route import Route
from tailgate.stats.shown import wilson

__all__ = [
    "SIGNALS",
    "QualityBoard",
    "QualityFields",
    "QualitySettings",
    "QualityVerdict",
    "QualityWindow",
    "SignalCounts",
    "settings_from",
]

SIGNALS: tuple[str, ...] = ("canary", "tool_call", "empty", "content_filter", "json", "reasoning")
"""The signal names the gateway and the monitor record (others are accepted and judged the same way)."""

READMIT_START = 0.1
"""A released route's quality factor restarts here and climbs linearly to 1 in ``slow_start_s``."""
MAX_READMIT_FACTOR = 16
"""A route held again within ``window_s`` of its release needs 4× the evidence next time, up to 16×."""


@dataclass(frozen=True, slots=True)
class QualitySettings:
    """One alias's promise-8 numbers (``routing.quality`` + ``models.<alias>.quality``; docs/routing.md)."""

    enabled: bool = True
    window_s: float = 600.0
    """The sliding window the counts are over (10 minutes: ~50 canaries at the monitor's default round)."""
    recent_s: float = 120.0
    """Live-traffic signals are also judged over the last ``recent_s`` alone (when it has ``min_samples``): a step
    degradation on busy traffic is seen before it fills the window. Not canaries: a few a minute, and each
    extra look at a ~90 % rate is another chance of a false move (95 % vs 93 % a canary a second: 1 in 4 runs
    of an hour moved on a 2-minute look, none on the 10-minute window)."""
    margin: float = 0.03
    """Canary signals: held when the route's upper bound is more than this below the best route's lower bound."""
    traffic_margin: float = 0.01
    """Live-traffic failure signals (healthy ≈ 100 %): the same rule with this margin."""
    min_samples: int = 20
    """Trials each route (the judged and the best) needs in the horizon judged."""
    slow_start_s: float = 15.0
    signals: frozenset[str] | None = None
    """The signals judged; None: all."""

    def margin_for(self, signal: str) -> float:
        return self.margin if signal.startswith("canary") else self.traffic_margin


@dataclass(frozen=True, slots=True)
class SignalCounts:
    """Successes of trials on one signal, and their 95 % Wilson interval."""

    successes: int
    trials: int

    @property
    def rate(self) -> float | None:
        return self.successes / self.trials if self.trials else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.successes, self.trials)

    def shown(self) -> str:
        """``95.0% [93.1–96.4] n=400`` (``n=0`` with no trials)."""
        if not self.trials:
            return "n=0"
        lo, hi = self.interval
        return f"{self.successes / self.trials:.1%} [{lo:.1%}–{hi:.1%}] n={self.trials}"


Key = tuple[str, str]
"""(provider, upstream model): what quality is a property of."""


def _key(route: Route | Key) -> Key:
    return (route.provider, route.model) if isinstance(route, Route) else route


class QualityWindow:
    """Sliding counts per (provider, model) × signal in ``bucket_s`` buckets, kept for ``horizon_s``."""

    def __init__(self, horizon_s: float = 600.0, bucket_s: float = 10.0) -> None:
        if bucket_s <= 0 or horizon_s < bucket_s:
            raise ValueError("need 0 < bucket_s <= horizon_s")
        self.horizon_s = horizon_s
        self.bucket_s = bucket_s
        self._buckets: dict[tuple[Key, str], deque[list[int]]] = {}
        """[bucket index, successes, trials], oldest first."""
        self._signals: dict[Key, set[str]] = {}

    def record(self, route: Route | Key, signal: str, ok: bool, now: float) -> None:
        self.add(route, signal, int(ok), 1, now)

    def add(self, route: Route | Key, signal: str, successes: int, trials: int, now: float) -> None:
        """``trials`` outcomes at ``now``, ``successes`` of them good (counts read back from the store)."""
        key = _key(route)
        q = self._buckets.get((key, signal))
        if q is None:
            q = self._buckets[(key, signal)] = deque()
            self._signals.setdefault(key, set()).add(signal)
        index = math.floor(now / self.bucket_s)
        if q and q[-1][0] >= index:
            q[-1][1] += successes
            q[-1][2] += trials
        else:
            q.append([index, successes, trials])
        oldest = math.floor((now - self.horizon_s) / self.bucket_s)
        while q and q[0][0] <= oldest:
            q.popleft()

    def counts(
        self, route: Route | Key, signal: str, now: float, window_s: float, since: float | None = None
    ) -> SignalCounts:
        """Counts of the buckets within ``window_s`` of ``now`` (and starting at or after ``since``)."""
        q = self._buckets.get((_key(route), signal))
        if not q:
            return SignalCounts(0, 0)
        first = math.floor((now - min(window_s, self.horizon_s)) / self.bucket_s) + 1
        if since is not None:
            first = max(first, math.ceil(since / self.bucket_s))
        ok = n = 0
        for index, s, t in reversed(q):
            if index < first:
                break
            ok += s
            n += t
        return SignalCounts(ok, n)

    def signals(self, route: Route | Key) -> list[str]:
        return sorted(self._signals.get(_key(route), ()))


@dataclass(frozen=True, slots=True)
class QualityVerdict:
    """What promise 8 says of one route now: ``held`` (no client requests while another route takes them),
    ``factor`` (0 while held, the slow start after a release, else 1), ``evidence`` in words."""

    held: bool = False
    factor: float = 1.0
    evidence: str = ""
    signal: str | None = None


@dataclass(slots=True)
class _Hold:
    since: float | None = None
    signal: str = ""
    released_at: float = -math.inf
    strikes: int = 0
    evidence: str = ""


@dataclass(slots=True)
class QualityBoard:
    """The quality window and promise 8's hold state per alias × route (see the module docstring)."""

    settings: QualitySettings = field(default_factory=QualitySettings)
    per_alias: Mapping[str, QualitySettings] = field(default_factory=dict)
    bucket_s: float = 10.0
    recompute_s: float = 0.25
    """``judge`` answers from its last verdicts for this long (``routing.adaptive.recompute``)."""
    window: QualityWindow = field(init=False)
    _holds: dict[tuple[str, str, str], _Hold] = field(init=False, default_factory=dict)
    _cache: dict[tuple[str, tuple[int, ...]], tuple[float, dict[Route, QualityVerdict]]] = field(
        init=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        horizon = max([self.settings.window_s, *(s.window_s for s in self.per_alias.values())])
        self.window = QualityWindow(horizon, self.bucket_s)

    def settings_for(self, alias: str) -> QualitySettings:
        return self.per_alias.get(alias, self.settings)

    def record(self, route: Route | Key, signal: str, ok: bool, now: float) -> None:
        """One graded outcome on ``signal`` (``ok``: good). Cheap: a bucket increment."""
        self.window.add(route, signal, int(ok), 1, now)

    def add(self, route: Route | Key, signal: str, successes: int, trials: int, now: float) -> None:
        """``trials`` graded outcomes at once, ``successes`` of them good (another replica's counts, read back
        from the store)."""
        if trials > 0:
            self.window.add(route, signal, successes, trials, now)

    def configure(self, settings: QualitySettings, per_alias: Mapping[str, QualitySettings]) -> None:
        """A reload's settings: the counts and holds stay (a longer window keeps what the old one kept)."""
        self.settings, self.per_alias = settings, per_alias
        windows = [settings.window_s, *(s.window_s for s in per_alias.values())]
        self.window.horizon_s = max(self.window.horizon_s, *windows)
        self._cache.clear()

    def view(
        self, routes: Iterable[Route | Key], now: float, window_s: float | None = None
    ) -> dict[Key, dict[str, SignalCounts]]:
        """(provider, model) → signal → counts over the window (``settings.window_s`` unless given)."""
        w = window_s if window_s is not None else self.settings.window_s
        return {_key(r): {s: self.window.counts(r, s, now, w) for s in self.window.signals(r)} for r in routes}

    def judge(self, routes: Sequence[Route], now: float) -> dict[Route, QualityVerdict]:
        """Promise 8 for one alias's routes (weight > 0 ones are compared; others are never held). Judged at
        most every ``recompute_s`` per alias and set of routes (the policy asks on every plan it builds)."""
        key = (routes[0].alias if routes else "", tuple(id(r) for r in routes))
        cached = self._cache.get(key)
        if cached is not None and 0.0 <= now - cached[0] < self.recompute_s:
            return cached[1]
        out = self._judge(routes, now)
        if len(self._cache) >= 1024:
            self._cache.clear()
        self._cache[key] = (now, out)
        return out

    def _judge(self, routes: Sequence[Route], now: float) -> dict[Route, QualityVerdict]:
        out = {r: QualityVerdict() for r in routes}
        if not routes:
            return out
        cfg = self.settings_for(routes[0].alias)
        if not cfg.enabled:
            return out
        live = [r for r in routes if r.weight > 0]
        signals = sorted({s for r in live for s in self.window.signals(r)})
        if cfg.signals is not None:
            signals = [s for s in signals if s in cfg.signals]
        # Every route's counts per signal and horizon, once: (signal, horizon, counts per route, best route).
        looks: list[tuple[str, float, dict[Route, SignalCounts], Route | None]] = []
        for signal in signals:
            for horizon in (cfg.window_s,) if signal.startswith("canary") else (cfg.window_s, cfg.recent_s):
                counts = {r: self.window.counts(r, signal, now, horizon) for r in live}
                looks.append((signal, horizon, counts, _best(counts, cfg.min_samples)))
        for r in live:
            h = self._holds.setdefault((r.alias, r.provider, r.model), _Hold())
            if h.since is not None:
                self._maybe_release(r, h, looks, cfg, now)
            if h.since is None:
                worse = _worse(r, looks, cfg)
                if worse is not None:
                    h.strikes = h.strikes + 1 if now - h.released_at < cfg.window_s else 0
                    h.since, h.signal, h.evidence = now, worse[0], worse[1]
            if h.since is not None:
                out[r] = QualityVerdict(True, 0.0, h.evidence, h.signal)
            elif now - h.released_at < cfg.slow_start_s:
                factor = slow_start(READMIT_START, 1.0, now - h.released_at, cfg.slow_start_s)
                out[r] = QualityVerdict(False, factor, h.evidence, h.signal)
        return out

    def _maybe_release(
        self,
        r: Route,
        h: _Hold,
        looks: Sequence[tuple[str, float, dict[Route, SignalCounts], Route | None]],
        cfg: QualitySettings,
        now: float,
    ) -> None:
        """Released when the samples since the hold show it back within the margin of the best, read
        pessimistically (hysteresis: held when confidently worse by more than the margin, released when
        confidently not; in between it stays as it is), or after a whole window with too few samples to tell
        (then a slow start again: a held route gets no client traffic to be judged on)."""
        assert h.since is not None
        needed = cfg.min_samples * min(MAX_READMIT_FACTOR, 4**h.strikes)
        since = self.window.counts(r, h.signal, now, cfg.window_s, since=h.since)
        window = next((c for s, w, c, _ in looks if s == h.signal and w == cfg.window_s), {})
        best = _best({p: c for p, c in window.items() if p is not r}, cfg.min_samples)
        if since.trials >= needed and best is not None and quality_back(since, window[best], cfg.margin_for(h.signal)):
            h.evidence = f"{h.signal} back: {since.shown()} since held"
            h.since, h.released_at = None, now
        elif since.trials < needed and now - h.since >= cfg.window_s:
            h.evidence = f"{h.signal}: {since.trials} samples in {cfg.window_s:g}s since held, trying again"
            h.since, h.released_at = None, now


def _worse(
    r: Route, looks: Sequence[tuple[str, float, dict[Route, SignalCounts], Route | None]], cfg: QualitySettings
) -> tuple[str, str] | None:
    """(signal, evidence) of the first look on which ``r`` is significantly worse than that look's best."""
    for signal, horizon, counts, best in looks:
        if best is None or best is r:
            continue
        margin = cfg.margin_for(signal)
        if quality_worse(counts[r], counts[best], margin, cfg.min_samples):
            return signal, _evidence(signal, counts[r], best, counts[best], margin, horizon)
    return None


def _best(counts: Mapping[Route, SignalCounts], min_samples: int) -> Route | None:
    """The route with the highest Wilson lower bound among those with ``min_samples`` trials."""
    ready = [(c.interval[0], r.provider, r) for r, c in counts.items() if c.trials >= min_samples]
    return max(ready, key=lambda t: (t[0], t[1]))[2] if ready else None


def _evidence(signal: str, mine: SignalCounts, best: Route, theirs: SignalCounts, margin: float, horizon: float) -> str:
    return (
        f"{signal} {mine.shown()} below {best.provider}'s {theirs.shown()} "
        f"by more than {margin * 100:g} points (last {horizon:g}s)"
    )


class QualityFields(Protocol):
    """What :func:`settings_from` reads: ``config.schema.QualityConfig`` (``routing.quality`` merged with an
    alias's ``models.<alias>.quality``)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def window(self) -> float: ...
    @property
    def recent(self) -> float: ...
    @property
    def margin(self) -> float: ...
    @property
    def traffic_margin(self) -> float: ...
    @property
    def min_samples(self) -> int: ...
    @property
    def signals(self) -> Sequence[str] | None: ...


def settings_from(config: QualityFields, slow_start_s: float = 15.0) -> QualitySettings:
    """An alias's :class:`QualitySettings` from its config (``routing.adaptive.slow_start`` for the ramp)."""
    return QualitySettings(
        enabled=config.enabled,
        window_s=config.window,
        recent_s=min(config.recent, config.window),
        margin=config.margin,
        traffic_margin=config.traffic_margin,
        min_samples=config.min_samples,
        slow_start_s=slow_start_s,
        signals=frozenset(config.signals) if config.signals is not None else None,
    )
