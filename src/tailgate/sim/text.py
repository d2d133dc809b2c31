"""Deterministic pseudo-text and token counting for the simulator.

A simulated token is one word from a fixed vocabulary (with its leading space). The word sequence of a
request depends only on (simulator seed, request seed) so the same request replays the same output.
Prompt tokens are estimated, not tokenized: ~4 bytes of ASCII per token and one token per CJK
character, which is close to what DeepSeek/Qwen tokenizers report for ordinary text.
"""

from __future__ import annotations

import hashlib

_WORDS = (  # noqa: SIM905 - a word list reads better as running text
    "the of and to in is that for it as with was on be by at this from or have an are not which but "
    "all can more one has been their will also we its there other new time when system model data "
    "these first may two where would about into than only over most some any our could each after "
    "many such queue token latency provider request stream batch engine throughput tail gateway "
    "route weight probe health window median cluster region price budget signal measure answer "
    "result value simple steady fast slow under load peak hour week snapshot average minimum "
    "maximum error retry limit rate pool slot decode prefill cache memory graph server client "
    "network packet moment second minute river mountain garden window letter number market winter "
    "summer morning evening story music colour paper"
).split()
VOCAB: tuple[str, ...] = tuple(" " + w for w in _WORDS)
_V = len(VOCAB)


def text_seed(sim_seed: int, request_seed: int | str) -> int:
    """A stable 64-bit offset for one request's word sequence (stable across processes, unlike hash())."""
    digest = hashlib.blake2b(f"{sim_seed}:{request_seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def token_at(seed: int, index: int) -> str:
    """The ``index``-th token of the sequence for ``seed``."""
    # An LCG-style walk over the vocabulary: cheap, deterministic, and it does not repeat quickly.
    return VOCAB[(seed + index * 2654435761 + (index * index >> 3)) % _V]


def tokens(seed: int, count: int) -> list[str]:
    return [token_at(seed, i) for i in range(count)]


def estimate_tokens(text: str) -> int:
    """Approximate token count of ``text`` (at least 1 for non-empty text)."""
    if not text:
        return 0
    if text.isascii():
        return max(1, (len(text) + 3) // 4)
    cjk = sum(1 for ch in text if ord(ch) >= 0x2E80)
    other = len(text.encode("utf-8")) - 3 * cjk
    return max(1, cjk + (other + 3) // 4)
