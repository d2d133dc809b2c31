"""Tables that fit: choose the columns a width can hold, never cut a value.

Every wide table tailgate prints (leaderboard, bench, scenario, usage) goes through :func:`fit`: the
table is built from :class:`Col` definitions and rows of finished strings; when the natural width is
more than the width available, whole columns are dropped, lowest ``keep`` first, until it fits (the
columns with ``keep=0`` are never dropped). A value is never truncated with ``…``: if even the kept
columns do not fit, the table is printed at its natural width (the terminal wraps the line, the numbers
stay whole). Which columns were left out is said in the caption, so nobody wonders where a number went.

:func:`console` is the one place that decides the width: a terminal's own width; piped output is not
cut at all (a width no table reaches) unless ``COLUMNS`` asks for one.

Bottom layer: depends on rich only.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table

__all__ = ["UNLIMITED", "Col", "Grid", "choose", "console", "fit", "print_fitted", "requested_width"]

UNLIMITED = 100_000
"""The width of piped output: no table is that wide, so nothing is cut."""


@dataclass(frozen=True, slots=True)
class Col:
    """One column: its ``--columns`` name, header, and how long it stays when the width is short."""

    key: str
    header: str
    keep: int = 1
    """0: never dropped; otherwise dropped in order of decreasing ``keep`` (9 goes first)."""
    left: bool = False


def requested_width() -> int | None:
    """``COLUMNS`` from the environment when it is a positive integer (the user asked for a width)."""
    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def console(*, stderr: bool = False) -> Console:
    """A rich console for tables: the terminal's width; piped, ``COLUMNS`` or no limit at all."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=requested_width() or UNLIMITED)


def _table(cols: Sequence[Col], rows: Sequence[Sequence[str]], title: str | None, caption: str | None) -> Table:
    # No outer edge and two spaces between columns: the numbers get the room, not the borders.
    table = Table(
        title=title,
        caption=caption,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    for col in cols:
        table.add_column(col.header, justify="left" if col.left else "right", no_wrap=True, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def natural_width(cols: Sequence[Col], rows: Sequence[Sequence[str]]) -> int:
    """Width of the table with these columns when nothing is wrapped or cut."""
    probe = Console(width=UNLIMITED)
    return probe.measure(_table(cols, rows, None, None)).maximum


def choose(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Indexes of the columns to show in ``width`` cells: drop the most expendable until the table fits."""
    kept = list(range(len(cols)))
    while natural_width([cols[i] for i in kept], [[r[i] for i in kept] for r in rows]) > width:
        droppable = [i for i in kept if cols[i].keep > 0]
        if not droppable:
            break
        # The highest ``keep`` goes first; among equals, the rightmost.
        kept.remove(max(droppable, key=lambda i: (cols[i].keep, i)))
    return kept


def fit(
    cols: Sequence[Col],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    title: str | None = None,
    caption: str | None = None,
) -> tuple[Table, int]:
    """(the table with the columns that fit in ``width``, the width to print it at: never less than its own)."""
    kept = choose(cols, rows, width)
    shown = [cols[i] for i in kept]
    dropped = [c.header.replace("\n", " ") for c in cols if c not in shown]
    if dropped:
        note = (
            f"Left out for width: {', '.join(dropped)} (widen the terminal, set COLUMNS, or pick them with --columns)."
        )
        caption = f"{caption} {note}" if caption else note
    body = [[r[i] for i in kept] for r in rows]
    table = _table(shown, body, title, caption)
    return table, max(width, natural_width(shown, body))


def print_fitted(
    out: Console,
    cols: Sequence[Col],
    rows: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    caption: str | None = None,
) -> None:
    """Fit the table to ``out``'s width and print it there (values whole, even on a too-narrow terminal)."""
    table, width = fit(cols, rows, out.width, title=title, caption=caption)
    narrow = out.width
    out.width = max(narrow, width)  # rich cuts to the console's width; a too-wide table wraps instead
    try:
        out.print(table)
    finally:
        out.width = narrow


@dataclass(frozen=True, slots=True)
class Grid:
    """A table not yet fitted to a width: what a command hands to whoever prints it."""

    cols: tuple[Col, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str | None = None
    caption: str | None = None

    def print_to(self, out: Console) -> None:
        """Fit to ``out``'s width and print."""
        print_fitted(out, self.cols, self.rows, title=self.title, caption=self.caption)

    def render(self, width: int) -> str:
        """The plain text a ``width``-column terminal shows (for tests and logs)."""
        out = Console(width=width, record=True, file=io.StringIO(), color_system=None)
        self.print_to(out)
        return out.export_text()
