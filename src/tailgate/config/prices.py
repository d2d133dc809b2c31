"""A provider's prices (``providers.NAME.price``): the standard price, the batch price and time-of-day windows,
and the cost of one call with the tier it was priced at (docs/config.md, "price")."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Annotated, Literal, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, ValidationInfo, field_validator, model_validator

from tailgate.config.base import Name
from tailgate.config.base import StrictModel as _Strict

__all__ = ["BatchPriceConfig", "Lane", "PriceConfig", "PriceWindow", "Quote"]

Lane = Literal["interactive", "batch-live", "batch-lane", "provider-batch"]
"""How a request was served (``LedgerRow.lane``): a live request, a live request in the batch lane
(``x-tailgate-class: batch`` or ``service_tier: "flex"``), a batch line run through the gateway's own request path
(the batch lane), or a line of a provider's own batch job."""

_HHMM = re.compile(r"^([01]?[0-9]|2[0-3]):([0-5][0-9])$")


def _minutes(value: str, what: str) -> int:
    m = _HHMM.match(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise ValueError(f"{what} must be a time of day as HH:MM (e.g. '00:30')")
    return int(m.group(1)) * 60 + int(m.group(2))


class PriceWindow(_Strict):
    """A time of day at which the provider bills another price: DeepSeek's off-peak discount (00:30–08:30
    Beijing time, 50 % off), a peak-hour surcharge (``ratio: 2``). ``start``/``end`` are ``HH:MM`` in
    ``timezone`` (IANA, e.g. ``Asia/Shanghai``; daylight saving is followed); a window may cross midnight
    (``start`` after ``end``). The price in it: ``ratio`` × the standard ``input`` / ``output`` /
    ``cached_input``, and any of those three given here replaces its product. ``name`` is the price tier ledger
    rows carry (default ``"HH:MM-HH:MM TZ"``)."""

    name: Name | None = None
    start: str
    end: str
    timezone: str = "UTC"
    ratio: Annotated[float, Field(gt=0)] | None = None
    input: Annotated[float, Field(ge=0)] | None = None
    output: Annotated[float, Field(ge=0)] | None = None
    cached_input: Annotated[float, Field(ge=0)] | None = None

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, value: str, info: ValidationInfo) -> str:
        _minutes(value, str(info.field_name))
        return value.strip()

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown timezone {value!r}: give an IANA name such as 'Asia/Shanghai' or 'UTC'"
            ) from None
        return value

    @model_validator(mode="after")
    def _a_window_with_a_price(self) -> PriceWindow:
        if _minutes(self.start, "start") == _minutes(self.end, "end"):
            raise ValueError(f"start and end are both {self.start}: a window needs a length (use 00:00-23:59)")
        if self.ratio is None and self.input is None and self.output is None and self.cached_input is None:
            raise ValueError("a price window needs ratio (e.g. 0.5 for half price) or input / output / cached_input")
        return self

    @property
    def tier(self) -> str:
        """The price tier ledger rows carry for a request priced in this window."""
        return self.name or f"{self.start}-{self.end} {self.timezone}"

    def contains(self, ts: float) -> bool:
        """Whether Unix time ``ts`` falls in this window (its start included, its end not), in its timezone."""
        local = datetime.fromtimestamp(ts, ZoneInfo(self.timezone))
        minute = local.hour * 60 + local.minute
        start, end = _minutes(self.start, "start"), _minutes(self.end, "end")
        return start <= minute < end if start < end else (minute >= start or minute < end)


class BatchPriceConfig(_Strict):
    """The provider's own batch price per million tokens (``price.batch``): what a line of a provider batch job
    costs. ``input`` / ``output`` unset: ``ratio`` × the interactive price (the preset's ratio when it publishes
    one: Bailian bills batch at 50 %). ``cached_input`` unset: the preset's rule for cache hits in batch, else
    ``input`` — a cache hit in batch billed as any prompt token (Bailian: "batch calls get no context-cache
    discount")."""

    input: Annotated[float, Field(ge=0)] | None = None
    output: Annotated[float, Field(ge=0)] | None = None
    cached_input: Annotated[float, Field(ge=0)] | None = None
    ratio: Annotated[float, Field(gt=0, le=1)] | None = None

    @model_validator(mode="after")
    def _cached_at_most_input(self) -> BatchPriceConfig:
        if self.cached_input is not None and self.input is not None and self.cached_input > self.input:
            raise ValueError(
                f"cached_input ({self.cached_input:g}) is above input ({self.input:g}): a cache hit in batch is "
                "billed at most at the batch input price"
            )
        return self


class Quote(NamedTuple):
    """What one call costs (in the price's currency) and the price tier it was computed at."""

    cost: float
    tier: str


class PriceConfig(_Strict):
    """Price per million tokens. ``cached_input`` is what a prompt token the provider served from its prompt
    cache costs (DeepSeek's "cache hit" price, Bailian's 20 % of input); unset, such a token costs ``input``.
    ``batch``: the provider's batch price (lines of a provider batch job); ``windows``: times of day billed at
    another price (first matching window wins). ``quote`` prices a call and names its tier."""

    input: Annotated[float, Field(ge=0)] = 0.0
    output: Annotated[float, Field(ge=0)] = 0.0
    cached_input: Annotated[float, Field(ge=0)] | None = None
    currency: str = "CNY"
    batch: BatchPriceConfig | None = None
    windows: list[PriceWindow] = Field(default_factory=list)

    @model_validator(mode="after")
    def _cached_at_most_input(self) -> PriceConfig:
        if self.cached_input is not None and self.cached_input > self.input:
            raise ValueError(
                f"cached_input ({self.cached_input:g}) is above input ({self.input:g}): a cache hit is billed "
                "at a fraction of the input price; set input too"
            )
        return self

    @property
    def cached_rate(self) -> float:
        """The price of a million cached prompt tokens: ``cached_input``, else ``input``."""
        return self.input if self.cached_input is None else self.cached_input

    def input_cost(self, prompt_tokens: int | None, cached_tokens: int | None = None) -> float:
        """What the prompt costs: its cached tokens at ``cached_rate``, the rest at ``input``.

        ``cached_tokens`` None (the provider did not say) prices every prompt token at ``input``; it is
        clamped to ``0 … prompt_tokens`` so a provider's odd usage never yields a negative or inflated cost.
        """
        prompt = max(0, prompt_tokens or 0)
        cached = min(prompt, max(0, cached_tokens or 0))
        return ((prompt - cached) * self.input + cached * self.cached_rate) / 1_000_000

    def cost(self, prompt_tokens: int | None, output_tokens: int | None, cached_tokens: int | None = None) -> float:
        """What one call costs in ``currency``: :meth:`input_cost` plus the output tokens at ``output``."""
        return self.input_cost(prompt_tokens, cached_tokens) + max(0, output_tokens or 0) * self.output / 1_000_000

    def rates(self, *, lane: Lane = "interactive", at: float | None = None) -> tuple[float, float, float, str]:
        """(input, output, cached input) per million tokens and the tier name, for a call on ``lane`` at Unix
        time ``at`` (default now). ``provider-batch`` with ``batch`` set: the batch price, tier ``batch``.
        Otherwise the first window containing ``at`` (tier: its name), else the standard price (``standard``)."""
        if lane == "provider-batch" and self.batch is not None:
            b = self.batch
            ratio = 1.0 if b.ratio is None else b.ratio
            b_in = b.input if b.input is not None else self.input * ratio
            b_out = b.output if b.output is not None else self.output * ratio
            return b_in, b_out, (b.cached_input if b.cached_input is not None else b_in), "batch"
        if self.windows:
            when = time.time() if at is None else at
            for w in self.windows:
                if w.contains(when):
                    ratio = 1.0 if w.ratio is None else w.ratio
                    return (
                        w.input if w.input is not None else self.input * ratio,
                        w.output if w.output is not None else self.output * ratio,
                        w.cached_input if w.cached_input is not None else self.cached_rate * ratio,
                        w.tier,
                    )
        return self.input, self.output, self.cached_rate, "standard"

    def quote(
        self,
        prompt_tokens: int | None,
        output_tokens: int | None,
        cached_tokens: int | None = None,
        *,
        lane: Lane = "interactive",
        at: float | None = None,
    ) -> Quote:
        """What one call costs and the tier it was priced at (:meth:`rates`); cached tokens as in
        :meth:`input_cost` (clamped; None: every prompt token at the input price)."""
        rate_in, rate_out, rate_cached, tier = self.rates(lane=lane, at=at)
        prompt = max(0, prompt_tokens or 0)
        cached = min(prompt, max(0, cached_tokens or 0))
        cost = ((prompt - cached) * rate_in + cached * rate_cached + max(0, output_tokens or 0) * rate_out) / 1_000_000
        return Quote(cost, tier)
