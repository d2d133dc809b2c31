"""Reading the ledger back (CLI, dashboard, tests): plain synchronous sqlite3, safe beside a live writer."""

from __future__ import annotations

import errno
import sqlite3
from contextlib import closing
from pathlib import Path

from tailgate.ledger.row import COLUMNS, LedgerRow
from tailgate.ledger.schema import open_db

_STREAM = COLUMNS.index("stream")
_ESTIMATED = COLUMNS.index("tokens_estimated")
_SELECT = ", ".join(COLUMNS)
# The column names come from LedgerRow's fields, never from input, so building the SQL is safe.
_ALL = f"SELECT {_SELECT} FROM requests ORDER BY ts, id"  # noqa: S608
_NEWEST = f"SELECT {_SELECT} FROM (SELECT * FROM requests ORDER BY ts DESC, id DESC LIMIT ?) ORDER BY ts, id"  # noqa: S608


def _to_row(cursor: sqlite3.Cursor, values: tuple[object, ...]) -> LedgerRow:
    fixed = list(values)
    fixed[_STREAM] = bool(fixed[_STREAM])
    fixed[_ESTIMATED] = bool(fixed[_ESTIMATED])
    return LedgerRow(*fixed)  # type: ignore[arg-type]  # the column types are the field types


def read_rows(path: str | Path, *, limit: int | None = None) -> list[LedgerRow]:
    """The ledger's rows, oldest first by arrival time (``ts``, then insertion order); newest last.

    ``limit`` keeps only the newest ``limit`` rows. A missing file raises FileNotFoundError rather than
    creating an empty database at a mistyped path. In WAL mode this reads a consistent snapshot while
    a writer commits beside it.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if str(path) != ":memory:" and not Path(path).exists():
        raise FileNotFoundError(errno.ENOENT, "no tailgate database", str(path))
    with closing(open_db(path)) as conn:
        conn.row_factory = _to_row
        rows: list[LedgerRow] = (
            conn.execute(_ALL).fetchall() if limit is None else conn.execute(_NEWEST, (limit,)).fetchall()
        )
    return rows
