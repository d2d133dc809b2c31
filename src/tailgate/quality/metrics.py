"""The quality signals as Prometheus counters, in a module of their own so any face (the gateway's
``/metrics``, the monitor) can register them on its registry.

* ``tailgate_quality_checked_total{provider,model,signal}``: answers a signal was checked on.
* ``tailgate_quality_signals_total{provider,model,signal}``: of those, answers that showed it.

The share over a window is ``rate(…signals_total[w]) / rate(…checked_total[w])``; ``signal`` is one of
``tailgate.quality.signals.SIGNALS`` or ``canary_wrong`` (a canary graded wrong). ``model`` is the upstream
model id, ``provider`` the configured provider name: both come from configuration, never from clients.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter

from tailgate.quality.signals import Observation

__all__ = ["CANARY_WRONG", "QualityMetrics"]

CANARY_WRONG = "canary_wrong"
MAX_CACHED = 4096


class _Incrementable(Protocol):
    def inc(self, amount: float = 1.0) -> None: ...


class _CounterFamily(Protocol):
    def labels(self, *values: str) -> _Incrementable: ...


CounterMaker = Callable[[str, str, tuple[str, ...]], _CounterFamily]
"""``(name without _total, help, label names) → counter family``: how a face makes its counters (the gateway
has its own lock-free series in one process)."""


class QualityMetrics:
    """The two counters, on ``registry`` (prometheus_client's ``Counter``) or made by ``counter``."""

    def __init__(self, registry: CollectorRegistry | None = None, counter: CounterMaker | None = None) -> None:
        if counter is None:
            reg = registry if registry is not None else CollectorRegistry(auto_describe=True)
            self.registry = reg

            def counter(name: str, doc: str, labels: tuple[str, ...]) -> _CounterFamily:
                return Counter(name, doc, labels, registry=reg)

        labels = ("provider", "model", "signal")
        self.checked = counter("tailgate_quality_checked", "Answers an answer-quality signal was checked on.", labels)
        self.signals = counter(
            "tailgate_quality_signals", "Answers that showed an answer-quality signal (of those checked).", labels
        )
        self._children: dict[tuple[str, str, str], tuple[_Incrementable, _Incrementable]] = {}

    def _pair(self, provider: str, model: str, signal: str) -> tuple[_Incrementable, _Incrementable]:
        key = (provider, model, signal)
        pair = self._children.get(key)
        if pair is None:
            pair = (self.checked.labels(*key), self.signals.labels(*key))
            if len(self._children) < MAX_CACHED:
                self._children[key] = pair
        return pair

    def count(self, provider: str, model: str, signal: str, hit: bool, n: int = 1) -> None:
        """``n`` answers checked on ``signal``, all of them hits or none (``hit``)."""
        checked, hits = self._pair(provider, model, signal)
        checked.inc(n)
        if hit:
            hits.inc(n)

    def observe(self, provider: str, model: str, observations: Iterable[Observation]) -> None:
        """Count every signal checked on one answer (``signals.check_chat``'s result)."""
        for o in observations:
            self.count(provider, model, o.signal, o.hit)

    def canary(self, provider: str, model: str, right: bool) -> None:
        """Count one graded canary."""
        self.count(provider, model, CANARY_WRONG, not right)
