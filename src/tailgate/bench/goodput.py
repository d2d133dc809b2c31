"""Goodput: requests per second that met every per-request SLO (vLLM's definition).

``--goodput ttft:1s,e2e:5s`` counts a request as *good* when it succeeded and each named per-request
value is at or under its limit: ``ttft`` (time to first token), ``e2e`` (end to end), ``tpot`` (time
per output token) — the three vLLM's ``benchmark_serving --goodput`` accepts (``e2el`` is taken as an
alias of ``e2e``). Open loop, TTFT and E2E count from the intended send time, as everywhere in bench.
Goodput of a run = good requests ÷ the run's measured duration. A bare number is milliseconds, as in vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailgate.config.units import parse_duration
from tailgate.upstream.events import CallResult

_KEYS = {"ttft": "ttft_ms", "e2e": "e2e_ms", "e2el": "e2e_ms", "tpot": "tpot_ms"}


class GoodputError(ValueError):
    """A ``--goodput`` expression that cannot be read; the message names the token."""


@dataclass(frozen=True, slots=True)
class SLO:
    """Per-request limits in ms, by metric name (``ttft_ms``, ``e2e_ms``, ``tpot_ms``)."""

    limits: tuple[tuple[str, float], ...]
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> SLO:
        """``ttft:1s,e2e:5s,tpot:50ms`` (a bare number is ms)."""
        limits: dict[str, float] = {}
        for part in text.split(","):
            key, sep, value = part.strip().partition(":")
            metric = _KEYS.get(key.strip().lower())
            if not sep or metric is None:
                raise GoodputError(
                    f"--goodput: cannot read {part.strip()!r}; use METRIC:LIMIT with METRIC one of ttft, e2e, tpot "
                    "(e.g. ttft:1s,e2e:5s)"
                )
            value = value.strip()
            try:
                ms = float(value) if value.replace(".", "", 1).isdigit() else float(parse_duration(value)) * 1000.0
            except ValueError:
                raise GoodputError(
                    f"--goodput: {value!r} in {part.strip()!r} is not a time "
                    "(a bare number is ms; or units ms, s, m, h, d: 800ms, 1s, 1m)"
                ) from None
            if ms <= 0:
                raise GoodputError(f"--goodput: the limit in {part.strip()!r} must be positive")
            limits[metric] = ms
        return cls(tuple(limits.items()), text.strip())

    def met(self, result: CallResult, lag_ms: float = 0.0) -> bool:
        """Whether one finished call is good: a success within every limit (open loop: ``lag_ms`` added)."""
        if not result.ok:
            return False
        for metric, limit in self.limits:
            if metric == "ttft_ms":
                value = None if result.ttft_ms is None else result.ttft_ms + lag_ms
            elif metric == "e2e_ms":
                value = None if result.e2e_ms is None else result.e2e_ms + lag_ms
            else:
                value = result.tpot_ms
            if value is None or value > limit:
                return False
        return True
