"""Small helpers shared by the command-line modules (``tailgate.cli`` and ``tailgate._cli_keys``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console

__all__ = ["_announce_store", "_duration", "_echo_line", "_fail", "_stdout"]


def _fail(message: str) -> NoReturn:
    """Print a usage/config error (plain text: paths must not be wrapped; URL passwords hidden) and exit 2."""
    from tailgate.config.resolve import scrub_urls

    click.echo(f"error: {scrub_urls(message)}", err=True)
    sys.exit(2)


def _announce_store(target: str | Path) -> None:
    """Say on stderr which store a command opens: its absolute path, or its URL without the password."""
    from tailgate.config.resolve import scrub_urls

    where = scrub_urls(target) if isinstance(target, str) else os.path.abspath(Path(target).expanduser())
    click.echo(f"store: {where}", err=True)


def _echo_line(line: str) -> None:
    """Progress and results to stdout; lines starting with "error" to stderr."""
    click.echo(line, err=line.startswith("error"))


def _duration(option: str, text: str, *, minimum: float = 0.0) -> float:
    """``30s`` / ``1m30s`` / ``7d`` → seconds, or exit 2 naming the option."""
    from tailgate.config import parse_duration
    from tailgate.config.units import DURATION_FORMS

    try:
        value = float(parse_duration(text))
    except ValueError:
        _fail(f"{option} {text!r}: not a duration; use {DURATION_FORMS}")
    if value <= minimum:
        _fail(f"{option} {text!r}: must be more than {minimum:g} s ({DURATION_FORMS})")
    return value


def _stdout() -> Console:
    """Rich console for tables: the terminal's width; piped, not cut at all unless ``COLUMNS`` asks."""
    from tailgate.tables import console

    return console()
