"""Config layer: YAML loading with located errors, human units, presets."""

from tailgate.config.loader import ConfigError, load_model, validate_data
from tailgate.config.units import Fraction, Seconds, parse_duration, parse_fraction

__all__ = [
    "ConfigError",
    "Fraction",
    "Seconds",
    "load_model",
    "parse_duration",
    "parse_fraction",
    "validate_data",
]
