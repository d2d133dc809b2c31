"""What a request may cost in tokens, before it is sent: every API's reservation and pacing read it.

The prompt's upper bound is counted on the body's bytes (:func:`prompt_bound`); the output is the request's own
budget, whatever its API calls it, times the answers it asks for. Each API's handler (gateway/apis/) calls
:func:`token_estimate` with what it knows (whether it generates at all)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def output_budget(obj: Mapping[str, Any]) -> Any:
    """The request's output token budget, whatever the endpoint calls it."""
    return obj.get("max_completion_tokens") or obj.get("max_tokens") or obj.get("max_output_tokens")


_DENSE = b"0123456789" + bytes(c for c in range(0x21, 0x7F) if not chr(c).isalnum()) + bytes(range(0x80, 0x100))
_NOT_DENSE = bytes(c for c in range(0x100) if c not in _DENSE)


def prompt_bound(body: bytes) -> float:
    """An upper bound of the prompt's tokens in ``body`` for any script, cheap enough for every request (one
    C-speed ``translate`` pass): one token per *dense* byte — an ASCII digit or punctuation mark, or any byte of a
    non-ASCII character — plus a quarter token per other byte (ASCII letters and whitespace: words). A byte-level
    BPE tokenizer spends at most one token per byte, and DeepSeek's and Qwen's reach it for every non-ASCII block
    (a rare CJK character alone is 3 tokens, an emoji up to 4, a Cyrillic letter 2) and for digits (Qwen: one per
    digit); English, code and JSON come to 1.3–1.5 × what they tokenize to. Bytes / 4, the earlier estimate,
    reserved ~1,517 tokens for 1,991 Chinese characters (which take ~2,000 or more). Not bounded: long random letter
    runs (base64, hex digests: up to 0.75 token per letter) — docs/keys.md, "The prompt bound"."""
    dense = len(body.translate(None, _NOT_DENSE))
    return float(dense + -(-(len(body) - dense) // 4))  # whole tokens, rounded up: a cut stream is charged this


def output_multiplier(obj: Mapping[str, Any]) -> int:
    """How many answers one request asks for: ``n`` (chat, completions), or ``best_of`` where larger (completions:
    the provider generates, and bills, ``best_of`` candidates). Each may use the whole output budget, so a
    reservation multiplies by this (without it, ``n: 40`` reserved ``max_tokens`` once)."""
    n = obj.get("n")
    best = obj.get("best_of")
    m = n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1
    if isinstance(best, int) and not isinstance(best, bool) and best > m:
        m = best
    return m


def token_estimate(
    obj: Mapping[str, Any], body: bytes, default_max_tokens: int, *, generates: bool = True
) -> tuple[float, float]:
    """(prompt, output) tokens a request may use, for TPM pacing and key reservations alike: the prompt's upper
    bound (:func:`prompt_bound`); the output is the request's budget (:func:`output_budget`), else
    ``default_max_tokens`` (``routing.pacing.default_max_tokens``), times the answers it asks for
    (:func:`output_multiplier`); none for an API that generates nothing (``generates=False``: embeddings)."""
    prompt = prompt_bound(body)
    if not generates:
        return prompt, 0.0
    out = output_budget(obj)
    per_answer = out if isinstance(out, int) and out > 0 else default_max_tokens
    if "n" not in obj and "best_of" not in obj:  # one answer (most requests: no call)
        return prompt, float(per_answer)
    return prompt, float(per_answer * output_multiplier(obj))
