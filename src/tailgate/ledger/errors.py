"""What a store's failure looks like to its callers: :class:`StoreError` (:class:`StoreSetUpError` when
PostgreSQL refused the login) and :func:`redact_url`.

A leaf module: ``store`` (the protocol) and ``pg`` (the PostgreSQL backend, which ``store`` opens) both raise
and redact, so these live below both instead of in ``store`` (``pg`` importing ``store`` made a circle).
"""

from __future__ import annotations

from tailgate.config.resolve import scrub_urls

__all__ = ["StoreError", "StoreSetUpError", "redact_url"]


class StoreError(RuntimeError):
    """The store cannot be reached or used (the message never carries a password)."""


class StoreSetUpError(StoreError):
    """PostgreSQL answered but refused the login: the role or database is missing, or the password is wrong."""


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages and logs; a password may hold ``@``)."""
    return scrub_urls(url)
