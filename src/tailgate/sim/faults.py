"""Faults a simulated provider can be told to show: the field names are a contract (docs/simulator.md; configs
and scenarios name them), added to freely, renamed never.

Faults come from the YAML config (``faults:`` and a ``timeline:``) or at run time from
``GET/POST/DELETE /sim/faults``. POST merges the fields it names into the active set; DELETE clears all.
Fault durations are wall seconds and are *not* multiplied by the engine's ``time_scale``.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tailgate.config.units import Fraction, Seconds

Status = Annotated[int, Field(ge=400, le=599)]
BreakKind = Literal["invalid_json", "schema_mismatch", "unknown_tool"]
BREAK_KINDS: tuple[BreakKind, ...] = ("invalid_json", "schema_mismatch", "unknown_tool")


class Faults(BaseModel):
    """The active fault set of one simulated provider. All fields default to "healthy"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    error_rate: Fraction = 0.0
    """Share of requests answered at once with an error status drawn from ``error_statuses``."""
    error_statuses: list[Status] = Field(default_factory=lambda: [500, 502, 503], min_length=1)
    outage: bool = False
    """Full outage; how it shows is ``outage_mode``."""
    outage_mode: Literal["503", "reset", "refuse"] = "503"
    """``503``: answer 503 at once; ``reset``: accept and drop the connection; ``refuse``: close the
    listening socket so connects are refused (the control API of that port goes with it)."""
    latency_multiplier: float = Field(1.0, gt=0, le=1000)
    """Multiplies decode step time and the pre-queue latency."""
    spike_rate: Fraction = 0.0
    """Share of requests that wait an extra ``spike_s`` before reaching the engine."""
    spike_s: Seconds = 0.0
    hold: bool = False
    """Hold every request before its response headers until ``hold`` is set false again (or the faults are
    cleared): a request kept in flight for exactly as long as a test wants, by an event, not a duration."""
    stall_headers_s: Seconds = 0.0
    """Wait this long before sending any response headers."""
    stall_first_token_s: Seconds = 0.0
    """After headers, wait this long before the first token is decoded."""
    disconnect_after_tokens: int | None = Field(None, ge=0)
    """Drop the connection after this many tokens were sent (no ``[DONE]``, no error event)."""
    malformed_rate: Fraction = 0.0
    """Share of responses with one broken JSON chunk (stream) or a truncated JSON body."""
    rate_limit_rps: float | None = Field(None, gt=0)
    """Per-API-key request limit per second; excess gets 429 with Retry-After and x-ratelimit-* headers."""
    rate_limit_rpm: float | None = Field(None, gt=0)
    """Per-API-key request limit per minute."""
    rate_limit_headers: bool = True
    """Send ``x-ratelimit-*`` headers with the limits above (false: only ``Retry-After`` on a 429, like
    providers that do not state their limits)."""
    quota_exhausted: bool = False
    """Every request gets 429 ``insufficient_quota`` (not retryable)."""
    slow_drip_s: Seconds = 0.0
    """Minimum time between two tokens of one stream (a provider trickling output)."""
    batch_turnaround_s: Seconds | None = None
    """How long a batch created from now on runs, create to completed, in wall seconds (unset: the preset's
    ``batch_turnaround_s`` × ``time_scale``). Its lines are answered evenly over that time."""
    batch_fail_rate: Fraction = 0.0
    """Share of batch lines answered with a 500 (in the error file, not billed)."""
    batch_expire_after_s: Seconds | None = None
    """A batch created from now on expires this many wall seconds after its creation (unset: its
    ``completion_window`` × ``time_scale``): lines not yet answered go to the error file as ``batch_expired``."""

    accuracy: Fraction | None = None
    """Replaces the preset's ``accuracy`` on the canary / accuracy questions while set: the share answered
    right (a wrong one is a plausible answer of the same form). Truth rows of wrong answers say
    ``degraded: canary_wrong``."""
    tool_call_break_rate: Fraction = 0.0
    """Share of tool calls served broken, in one of the ``tool_call_break_kinds`` (drawn evenly)."""
    tool_call_break_kinds: list[BreakKind] = Field(default_factory=lambda: list(BREAK_KINDS), min_length=1)
    """``invalid_json``: the arguments cut in half; ``schema_mismatch``: valid JSON that breaks the declared
    ``parameters`` (a required property dropped, else a property of the wrong type); ``unknown_tool``: a
    function name the request did not declare."""
    content_filter_rate: Fraction = 0.0
    """Share of answers that end at once with ``finish_reason: content_filter_reason`` and no output."""
    content_filter_reason: Literal["content_filter", "sensitive"] = "content_filter"
    """``content_filter`` (OpenAI, Azure) or ``sensitive`` (DeepSeek); Anthropic's ``/v1/messages`` says
    ``stop_reason: refusal`` for either."""
    empty_answer_rate: Fraction = 0.0
    """Share of answers that end at once with ``finish_reason: stop`` and no output (no thinking either)."""

    def merged(self, update: Faults) -> Faults:
        """This set with the fields *explicitly set* in ``update`` replaced."""
        return Faults.model_validate({**self.model_dump(), **update.model_dump(exclude_unset=True)})

    @property
    def active(self) -> bool:
        """Anything non-default? Lets the request path skip all fault checks when healthy."""
        return self != _HEALTHY


_HEALTHY = Faults()


class TimelineEntry(BaseModel):
    """At ``at`` seconds after the provider starts, merge ``set`` (and/or ``clear`` first)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: Seconds
    set: Faults | None = None
    clear: bool = False

    @model_validator(mode="after")
    def _does_something(self) -> TimelineEntry:
        if self.set is None and not self.clear:
            raise ValueError("a timeline entry needs 'set' (faults to apply) or 'clear: true'")
        return self


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


@dataclass(frozen=True, slots=True)
class RateDecision:
    """Outcome of one rate-limit check; headers mimic OpenAI's ``x-ratelimit-*`` convention."""

    allowed: bool
    headers: dict[str, str]
    retry_after_s: float = 0.0


def format_reset(seconds: float) -> str:
    """OpenAI's reset format: ``1s``, ``250ms``, ``6m0s``."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    minutes, secs = divmod(whole, 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


class RateLimiter:
    """Token buckets per API key: capacity = the limit, refilled evenly over its period.

    One limiter serves both RPS and RPM limits (a request must fit both). Keys are kept in LRU order
    and capped so a flood of random keys cannot grow memory without bound.
    """

    MAX_KEYS = 10_000

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: OrderedDict[tuple[str, float], _Bucket] = OrderedDict()

    def check(self, key: str, rps: float | None, rpm: float | None) -> RateDecision:
        now = self._clock()
        limits = [(limit, period) for limit, period in ((rps, 1.0), (rpm, 60.0)) if limit is not None]
        state = []
        for limit, period in limits:
            bucket = self._bucket(key, limit, period, now)
            state.append((limit, period, bucket))
        allowed = all(b.tokens >= 1.0 for _, _, b in state)
        if allowed:
            for _, _, b in state:
                b.tokens -= 1.0
        # Report the tightest limit, as providers do for the "requests" family of headers.
        limit, period, bucket = min(state, key=lambda s: s[2].tokens / s[0])
        rate = limit / period
        retry = 0.0
        if not allowed:
            retry = max((1.0 - b.tokens) * per / lim for lim, per, b in state if b.tokens < 1.0)
        headers = {
            "x-ratelimit-limit-requests": f"{limit:g}",
            "x-ratelimit-remaining-requests": str(max(0, math.floor(bucket.tokens))),
            "x-ratelimit-reset-requests": format_reset((limit - bucket.tokens) / rate),
        }
        if not allowed:
            headers["retry-after"] = str(max(1, math.ceil(retry)))
            headers["retry-after-ms"] = str(max(1, math.ceil(retry * 1000)))
        return RateDecision(allowed, headers, retry)

    def _bucket(self, key: str, limit: float, period: float, now: float) -> _Bucket:
        ident = (key, period)
        bucket = self._buckets.get(ident)
        if bucket is None:
            bucket = _Bucket(tokens=max(1.0, limit), updated=now)
            self._buckets[ident] = bucket
            if len(self._buckets) > self.MAX_KEYS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(ident)
            bucket.tokens = min(max(1.0, limit), bucket.tokens + (now - bucket.updated) * limit / period)
            bucket.updated = now
        return bucket

    def reset(self) -> None:
        self._buckets.clear()


def parse_faults(data: Any) -> Faults:
    """Validate a JSON object as a fault update (raises pydantic.ValidationError)."""
    return Faults.model_validate(data)
