"""Round-robin over a provider's API keys."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["KeyPool"]


class KeyPool:
    """Hands out a provider's keys in turn, so load (and per-key rate limits) spread evenly.

    ``next()`` returns ``(index, key)``, or ``None`` when the provider has no keys. The index, never the
    key, is what callers record. ``repr`` shows only how many keys there are.
    """

    __slots__ = ("_keys", "_next")

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = tuple(keys)
        self._next = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"KeyPool({len(self._keys)} keys)"

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every key, for redacting them from upstream error text; never log this."""
        return self._keys

    def next(self) -> tuple[int, str] | None:
        """The next key in turn with its index, or None for a keyless provider."""
        if not self._keys:
            return None
        index = self._next
        self._next = (index + 1) % len(self._keys)
        return index, self._keys[index]
