"""Human units in config files: durations (``"500ms"``, ``"1m30s"``) and fractions (``"5%"``).

These are pydantic ``Annotated`` types so every schema in tailgate spells them the same way and
every error names the config path the way pydantic reports it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|s|m|h|d)")
_UNIT_S = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


DURATION_FORMS = "a number of seconds, or units ms, s, m, h, d combined: 500ms, 30s, 1m30s, 2h, 7d"
"""What every duration accepts, for error messages."""


def parse_duration(value: Any) -> Any:
    """Turn ``"1m30s"``, ``"250ms"``, ``"2h"`` or a bare number of seconds into float seconds.

    Anything that is not a string is passed on unchanged so pydantic reports the type error itself.
    """
    if not isinstance(value, str):
        return value
    text = value.strip().replace(" ", "")
    if not text:
        raise ValueError(f"expected a duration ({DURATION_FORMS}), got an empty string")
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"expected a duration ({DURATION_FORMS}), got {value!r}")
    return total


def parse_fraction(value: Any) -> Any:
    """Turn ``"5%"`` into 0.05; numbers pass through (0.05 stays 0.05)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            if text.endswith("%"):
                return float(text[:-1]) / 100.0
            return float(text)
        except ValueError:
            raise ValueError(f"expected a fraction such as 0.05 or '5%', got {value!r}") from None
    return value


Seconds = Annotated[float, BeforeValidator(parse_duration), Field(ge=0)]
"""A non-negative duration in seconds; accepts ``"500ms"``, ``"30s"``, ``"1m30s"`` or a number."""

Fraction = Annotated[float, BeforeValidator(parse_fraction), Field(ge=0, le=1)]
"""A fraction in [0, 1]; accepts ``0.05`` or ``"5%"``."""
