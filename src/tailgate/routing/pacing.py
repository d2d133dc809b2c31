"""Pacing below a provider's (or one key's) known rate limits, and pausing on a 429.

A ``Pacer`` holds an RPM bucket and a TPM bucket (``TokenBucket``, injected clock), each filled at
``headroom`` (0.9) × the limit and holding ``burst_s`` (1 s) worth of it, so over any minute at most about
``headroom × limit + burst`` goes out — below the limit, instead of collecting 429s. ``try_acquire``
takes one request and ``tokens_estimate`` tokens (prompt + expected output) atomically, or nothing; an
estimate larger than the TPM bucket is clamped to it (a single huge request is never blocked forever).
``pause_for(seconds)`` — from a 429's ``Retry-After`` or ``x-ratelimit-reset-*`` (see ``retry_after_s``)
— refuses everything until then; ``available_in()`` says how long until a request of a given size could
go. Keep one ``Pacer`` per key (``(provider, key_index)``) or per provider when the limit is per account.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from tailgate.routing.ratelimit import TokenBucket

__all__ = ["Pacer", "parse_duration", "retry_after_s"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str) -> float | None:
    """Seconds in ``"1.5"``, ``"20ms"``, ``"6m0s"``, ``"1h2m3.5s"`` (OpenAI's reset headers); None if not one."""
    text = text.strip()
    try:
        v = float(text)
    except ValueError:
        pass
    else:
        return v if math.isfinite(v) and v >= 0 else None
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            return None
        n = float(m.group(1))
        total += {"ms": n / 1000.0, "s": n, "m": n * 60.0, "h": n * 3600.0}[m.group(2)]
        pos = m.end()
    return total if pos == len(text) and pos > 0 else None


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """How long a 429 asks us to wait: ``Retry-After`` (seconds) if present, else the longest of
    ``x-ratelimit-reset-requests`` / ``x-ratelimit-reset-tokens``; None when none parses. Header names
    are matched case-insensitively."""
    lower = {k.lower(): v for k, v in headers.items()}
    ra = lower.get("retry-after")
    if ra is not None:
        v = parse_duration(ra)
        if v is not None:
            return v
    names = ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
    found = [v for v in (parse_duration(lower[k]) for k in names if k in lower) if v is not None]
    return max(found) if found else None


class Pacer:
    """RPM/TPM buckets plus a pause; see the module docstring. ``rpm``/``tpm`` None = no such limit."""

    def __init__(
        self,
        rpm: float | None = None,
        tpm: float | None = None,
        *,
        headroom: float = 0.9,
        burst_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0.0 < headroom <= 1.0:
            raise ValueError("headroom must be in (0, 1]")
        self._clock = clock
        self.paused_until = -math.inf
        self.headroom = headroom
        self.rpm_limit = rpm
        self.tpm_limit = tpm
        self.burst_s = burst_s
        self.share = 1.0
        """This replica's share of the limits in a fleet (``set_share``); 1.0 alone."""

        def bucket(limit: float | None) -> TokenBucket | None:
            if limit is None:
                return None
            rate = limit * headroom
            return TokenBucket(rate, 60.0, burst=max(1.0, rate / 60.0 * burst_s), clock=clock)

        self.rpm = bucket(rpm)
        self.tpm = bucket(tpm)

    def try_acquire(self, tokens_estimate: float = 0.0, keep: tuple[float, float] = (0.0, 0.0)) -> bool:
        """Take one request and ``tokens_estimate`` tokens now, or nothing (False).

        ``keep``: (requests, tokens) the buckets must still hold after the take — the batch lane's rule
        (``state/priority.py``): it leaves an interactive request and the interactive reserve untouched."""
        if self._clock() < self.paused_until:
            return False
        n = min(tokens_estimate, self.tpm.burst) if self.tpm is not None else 0.0
        if self.rpm is not None and self.rpm.remaining < 1.0 + keep[0]:
            return False
        if self.tpm is not None and (n > 0 or keep[1] > 0) and self.tpm.remaining < n + keep[1]:
            return False
        if self.rpm is not None:
            self.rpm.try_take(1.0)
        if self.tpm is not None and n > 0:
            self.tpm.try_take(n)
        return True

    def take_tokens(self, tokens_estimate: float) -> None:
        """Take ``tokens_estimate`` from the TPM bucket whatever it holds (its request was paced elsewhere: the
        fleet's shared bucket); the bucket may run into debt, which delays the next requests."""
        if self.tpm is not None and tokens_estimate > 0:
            self.tpm.take_debt(min(tokens_estimate, self.tpm.burst))

    def tokens_in(self, tokens_estimate: float) -> float:
        """Seconds until the TPM bucket holds ``tokens_estimate`` (0.0 now, or without a TPM limit)."""
        if self.tpm is None or tokens_estimate <= 0:
            return 0.0
        return self.tpm.wait_time(min(tokens_estimate, self.tpm.burst))

    def set_share(self, fraction: float) -> None:
        """Pace at ``fraction`` of the limits from now on: this replica's share of a fleet's (docs/fleet.md)."""
        fraction = min(1.0, max(fraction, 1e-6))
        self.share = fraction
        for bucket, limit in ((self.rpm, self.rpm_limit), (self.tpm, self.tpm_limit)):
            if bucket is not None and limit is not None:
                rate = limit * self.headroom * fraction
                bucket.set_rate(rate, 60.0, burst=max(1.0, rate / 60.0 * self.burst_s))

    def pause_for(self, seconds: float) -> None:
        """Refuse everything for ``seconds`` from now (a longer pause already in force stays)."""
        if math.isfinite(seconds) and seconds > 0:
            self.paused_until = max(self.paused_until, self._clock() + seconds)

    @property
    def paused(self) -> bool:
        return self._clock() < self.paused_until

    @property
    def limited(self) -> bool:
        """Whether any bucket is configured (an unlimited pacer only ever pauses)."""
        return self.rpm is not None or self.tpm is not None

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able view for ``/admin/providers``: limits as paced, what is left now, the pause."""
        now = self._clock()
        out: dict[str, Any] = {"paused_for_s": round(max(0.0, self.paused_until - now), 3)}
        if self.share != 1.0:
            out["fleet_share"] = round(self.share, 4)
        for name, bucket, limit in (("rpm", self.rpm, self.rpm_limit), ("tpm", self.tpm, self.tpm_limit)):
            if bucket is None or limit is None:
                out[name] = None
            else:
                out[name] = {"limit": limit, "paced_at": limit * self.headroom, "available": round(bucket.remaining, 3)}
        return out

    def available_in(self, tokens_estimate: float = 0.0, keep: tuple[float, float] = (0.0, 0.0)) -> float:
        """Seconds until ``try_acquire(tokens_estimate, keep)`` could succeed (0.0 when it can now; ``inf`` when
        a bucket is too small to ever hold the take and what it must keep)."""
        wait = max(0.0, self.paused_until - self._clock())
        if self.rpm is not None:
            need = 1.0 + keep[0]
            wait = max(wait, self.rpm.wait_time(need) if need <= self.rpm.burst else math.inf)
        if self.tpm is not None and (tokens_estimate > 0 or keep[1] > 0):
            need = min(tokens_estimate, self.tpm.burst) + keep[1]
            wait = max(wait, self.tpm.wait_time(need) if need <= self.tpm.burst else math.inf)
        return wait
