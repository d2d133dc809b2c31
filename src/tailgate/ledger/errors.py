"""What a store's failure looks like to its callers: :class:`StoreError` and :func:`redact_url`.

A leaf module: ``store`` (the protocol) and ``pg`` (the PostgreSQL backend, which ``store`` opens) both raise
and redact, so these live below both instead of in ``store`` (``pg`` importing ``store`` made a circle).
"""

from __future__ import annotations

import re

__all__ = ["StoreError", "redact_url"]


class StoreError(RuntimeError):
    """The store cannot be reached or used (the message never carries a password)."""


_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages and logs)."""
    return _PASSWORD.sub(r"\1***@", url)
