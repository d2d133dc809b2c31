"""What every config model shares: strict (an unknown field is an error naming it) and frozen, and the name type."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tailgate.config.units import Seconds

__all__ = ["Name", "PositiveSeconds", "StrictModel"]

Name = Annotated[str, Field(min_length=1, max_length=128)]
PositiveSeconds = Annotated[Seconds, Field(gt=0)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
