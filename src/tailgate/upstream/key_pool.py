"""Round-robin over a provider's API keys."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["KeyPool"]


_MASK = (1 << 64) - 1


def _salt(index: int) -> int:
    x = ((index + 1) * 0x9E3779B97F4A7C15) & _MASK  # splitmix64 of the key's index: fixed, the same everywhere
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


_SALTS = tuple(_salt(i) for i in range(64))


class KeyPool:
    """Hands out a provider's keys in turn, so load (and per-key rate limits) spread evenly.

    ``next()`` returns ``(index, key)``, or ``None`` when the provider has no keys. The index, never the
    key, is what callers record. ``repr`` shows only how many keys there are.
    """

    __slots__ = ("_keys", "_next", "_revoked", "_salts")

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = tuple(keys)
        n = len(self._keys)
        self._salts = _SALTS[:n] if n <= len(_SALTS) else tuple(_salt(i) for i in range(n))
        self._next = 0
        self._revoked: set[int] = set()

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"KeyPool({len(self._keys)} keys)"

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every key, for redacting them from upstream error text; never log this."""
        return self._keys

    @property
    def active(self) -> int:
        """Keys still in rotation."""
        return len(self._keys) - len(self._revoked)

    def revoke(self, index: int) -> bool:
        """Take key ``index`` out of rotation (the provider refused it: 401/403). True when it was in
        rotation and another key remains; the last key is never taken out (nothing better to send)."""
        if index in self._revoked or not 0 <= index < len(self._keys) or self.active <= 1:
            return False
        self._revoked.add(index)
        return True

    def pick(self, key: int) -> tuple[int, str] | None:
        """The key a conversation with affinity key ``key`` (64 bits) uses: rendezvous hashing over the keys in
        rotation, so the same conversation reaches the same account (its prompt cache) from every replica, and
        a revoked key moves only its own conversations. None for a keyless provider."""
        keys = self._keys
        if len(keys) < 2:
            return (0, keys[0]) if keys else None
        best, best_score, revoked = 0, -1, self._revoked
        for index, salt in enumerate(self._salts):
            if revoked and index in revoked:
                continue
            x = (key ^ salt) * 0xBF58476D1CE4E5B9 & _MASK  # spread by the key (already well mixed)
            if x > best_score:
                best, best_score = index, x
        return best, self._keys[best]

    def next(self) -> tuple[int, str] | None:
        """The next key in turn with its index (revoked keys skipped), or None for a keyless provider."""
        if not self._keys:
            return None
        n = len(self._keys)
        index = self._next
        for _ in range(n):
            if index not in self._revoked:
                break
            index = (index + 1) % n
        self._next = (index + 1) % n
        return index, self._keys[index]
