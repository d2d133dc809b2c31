"""``tailgate bench``'s command-line values read: the usage error they raise, ``--price``, durations."""

from __future__ import annotations

from pydantic import ValidationError

from tailgate.config.schema import PriceConfig
from tailgate.config.units import DURATION_FORMS, parse_duration

__all__ = ["UsageError", "parse_price", "seconds"]


class UsageError(ValueError):
    """Bad command-line input; the CLI prints it and exits 2."""


_PRICE_FIELDS = ("input", "cached_input", "output", "currency")


def parse_price(text: str) -> PriceConfig:
    """``--price input=2,cached_input=0.2[,output=3][,currency=CNY]`` (per million tokens, as in the config)."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in _PRICE_FIELDS:
            raise UsageError(
                f"--price: cannot read {part!r}; use input=2,cached_input=0.2 (fields: input, "
                "cached_input, output, currency)"
            )
        fields[key] = value.strip()
    if "input" not in fields:
        raise UsageError("--price: give input=… (the price of a million uncached prompt tokens)")
    try:
        return PriceConfig.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(x) for x in first["loc"]) or "price"
        raise UsageError(f"--price: {where}: {first['msg']}") from None


def seconds(flag: str, text: str | None) -> float:
    """A duration flag's value in seconds (``30s``, ``1m``, ``500ms``…); a usage error naming the flag otherwise."""
    try:
        return float(parse_duration(text))
    except (ValueError, TypeError):
        raise UsageError(f"{flag} {text!r}: not a duration; use {DURATION_FORMS}") from None
