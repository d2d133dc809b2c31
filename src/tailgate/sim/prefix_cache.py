"""A provider's prompt-prefix cache: content-addressed blocks of prompt tokens, per API key, LRU and TTL.

What the MaaS platforms our users call do (DeepSeek's context caching on disk, Bailian's implicit cache,
vLLM's automatic prefix caching, SGLang's radix cache): the prompt is cut into blocks of ``block_tokens``
tokens (DeepSeek stores 64-token units; only whole blocks are cached), each block is named by a hash of
itself *and everything before it* (so a block is found only behind the same prefix), and a request reuses
the longest run of leading blocks already stored. A provider caches per account, so the chain starts
from the API key: another key never hits. The store holds at most ``capacity`` blocks (across all keys,
as a provider's memory is shared) and forgets the least recently used first; a block not used for
``ttl_s`` is gone. The cached tokens skip their prefill (``sim.engine``) and are reported in ``usage``.

Tokens are the simulator's estimate (``sim.text.estimate_tokens``): ~4 ASCII bytes or one CJK character
per token. For ASCII text a block is exactly ``4 · block_tokens`` characters, so the split costs a slice
per block; other text is cut run by run (:func:`_mixed_blocks`).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable

_DIGEST = 16


def block_digests(api_key: str, text: str, block_tokens: int) -> list[bytes]:
    """The chained digests of the whole blocks of ``text``'s tokens, for ``api_key``.

    Digest ``i`` names block ``i`` behind blocks ``0 … i−1`` under this key; a trailing partial block is
    not cached (as on DeepSeek: "content less than 64 tokens is not cached").
    """
    digests: list[bytes] = []
    if block_tokens <= 0 or not text:
        return digests
    prev = hashlib.blake2b(api_key.encode(), digest_size=_DIGEST, person=b"tailgate-kv").digest()
    for block in _blocks(text, block_tokens):
        prev = hashlib.blake2b(prev + block, digest_size=_DIGEST).digest()
        digests.append(prev)
    return digests


def _blocks(text: str, block_tokens: int) -> list[bytes]:
    """The UTF-8 bytes of each whole block of ``block_tokens`` estimated tokens, in order."""
    if text.isascii():
        step = 4 * block_tokens
        raw = text.encode()
        return [raw[i : i + step] for i in range(0, len(raw) - step + 1, step)]
    return _mixed_blocks(text, block_tokens)


_RUNS = re.compile("[\u2e80-\U0010ffff]+|[\x00-\x7f]+|[\x80-\u2e7f]+")
"""Runs of CJK (one token a character), ASCII (four bytes a token) and other characters."""


def _mixed_blocks(text: str, block_tokens: int) -> list[bytes]:
    """Text that is not all ASCII, cut with the estimator's rule: the running count is ``cjk + ceil(other
    bytes / 4)``, and a block ends at the first character after which it reaches the next multiple of
    ``block_tokens``. CJK and ASCII runs are cut by arithmetic (an 8k-token Chinese prompt in ~0.1 ms, where a
    walk over every character took 2 ms of the simulator's event loop); the rare other runs are walked."""
    out: list[bytes] = []
    start = cjk = other = 0
    goal = block_tokens
    for match in _RUNS.finditer(text):
        run, pos = match.group(), match.start()
        n, i = len(run), 0
        first = ord(run[0])
        if first >= 0x2E80:  # k more characters: count = cjk + k + ceil(other / 4)
            while True:
                k = goal - cjk - (other + 3) // 4
                if k > n - i:
                    cjk += n - i
                    break
                i += k
                cjk += k
                out.append(text[start : pos + i].encode())
                start = pos + i
                goal += block_tokens
        elif first < 0x80:  # k more bytes: count = cjk + ceil((other + k) / 4), which reaches g at 4g - 3
            while True:
                k = 4 * (goal - cjk) - 3 - other
                if k > n - i:
                    other += n - i
                    break
                i += k
                other += k
                out.append(text[start : pos + i].encode())
                start = pos + i
                goal += block_tokens
        else:
            for j, ch in enumerate(run):
                other += len(ch.encode())
                if cjk + (other + 3) // 4 >= goal:
                    out.append(text[start : pos + j + 1].encode())
                    start = pos + j + 1
                    goal += block_tokens
    return out


class PrefixCache:
    """The blocks one provider holds: ``lookup`` a prompt's digests, then ``store`` them once admitted.

    An ``OrderedDict`` from digest to the time it expires, least recently used first. Every use moves a
    block to the end and pushes its expiry to ``now + ttl_s``, so with one TTL for all the front is also
    the first to expire: both evictions trim from the front. A prompt's blocks are touched last block
    first, so its leading blocks are the most recent: a prefix loses its tail before its head (as vLLM
    evicts), never a head that would strand the rest. ``clock`` is injectable (tests use a fake one).
    """

    def __init__(
        self,
        *,
        block_tokens: int,
        capacity: int,
        ttl_s: float,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if block_tokens < 1 or capacity < 1 or ttl_s <= 0:
            raise ValueError("prefix cache needs block_tokens ≥ 1, capacity ≥ 1 and ttl_s > 0")
        self.block_tokens = block_tokens
        self.capacity = capacity
        self.ttl_s = ttl_s
        self.clock = clock
        self._blocks: OrderedDict[bytes, float] = OrderedDict()
        self.hits = 0
        """Blocks found, since start (``/sim/state``)."""
        self.misses = 0
        """Blocks asked for and not found (a prompt's blocks after its first miss are not asked)."""
        self.evicted = 0
        """Blocks dropped for capacity (not for age)."""

    def __len__(self) -> int:
        return len(self._blocks)

    def digests(self, api_key: str, text: str) -> list[bytes]:
        """The block digests of a prompt under this cache's block size."""
        return block_digests(api_key, text, self.block_tokens)

    def lookup(self, digests: list[bytes]) -> int:
        """How many tokens of this prompt are cached: the leading run of stored blocks × block size.

        Blocks found are touched (most recently used, TTL renewed); the run ends at the first miss.
        """
        now = self.clock()
        self._expire(now)
        blocks = self._blocks
        expires = now + self.ttl_s
        found = 0
        for digest in digests:
            if digest not in blocks:
                self.misses += 1
                break
            found += 1
        for digest in reversed(digests[:found]):
            blocks[digest] = expires
            blocks.move_to_end(digest)
        self.hits += found
        return found * self.block_tokens

    def store(self, digests: list[bytes]) -> None:
        """Keep every block of a prompt the engine has taken (the most recently used), within capacity."""
        now = self.clock()
        blocks = self._blocks
        expires = now + self.ttl_s
        for digest in reversed(digests):
            blocks[digest] = expires
            blocks.move_to_end(digest)
        over = len(blocks) - self.capacity
        if over > 0:
            self.evicted += over
            for _ in range(over):
                blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()

    def snapshot(self) -> dict[str, int]:
        """For ``/sim/state``."""
        return {"blocks": len(self._blocks), "hits": self.hits, "misses": self.misses, "evicted": self.evicted}

    def _expire(self, now: float) -> None:
        blocks = self._blocks
        while blocks:
            digest, expires = next(iter(blocks.items()))
            if expires > now:
                return
            del blocks[digest]
