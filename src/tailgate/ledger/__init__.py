"""The usage ledger: one row per gateway request in the tailgate SQLite store (docs/ledger.md).

``SQLiteLedger`` batches rows off the event loop into a WAL-mode database written by one thread;
``open_db`` and ``read_rows`` are the synchronous side for readers, the CLI and tests. The schema and
its migrations live in ``tailgate.ledger.schema``.
"""

from tailgate.ledger.paths import default_db_path
from tailgate.ledger.reader import read_rows
from tailgate.ledger.row import LedgerRow
from tailgate.ledger.schema import open_db
from tailgate.ledger.sqlite import SQLiteLedger

__all__ = ["LedgerRow", "SQLiteLedger", "default_db_path", "open_db", "read_rows"]
