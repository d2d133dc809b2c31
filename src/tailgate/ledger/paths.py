"""Where the tailgate database lives when no ``--db`` is given."""

from __future__ import annotations

import os
from pathlib import Path


def default_db_path() -> Path:
    """``$TAILGATE_DB`` if set, else ``$XDG_DATA_HOME/tailgate/tailgate.db``.

    ``XDG_DATA_HOME`` defaults to ``~/.local/share``; like the XDG Base Directory spec says, a relative
    value is ignored. Nothing is created here: ``open_db`` makes the parent folders when it opens the file.
    """
    explicit = os.environ.get("TAILGATE_DB")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    # https://specifications.freedesktop.org/basedir-spec/latest/ : "If an implementation encounters a
    # relative path in any of these variables it should consider the path invalid and ignore it."
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "tailgate" / "tailgate.db"
