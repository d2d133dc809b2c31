"""The ``usage`` a simulated provider reports, in its dialect's shape.

Every provider with a prefix cache says how many prompt tokens it found cached as OpenAI does,
``prompt_tokens_details.cached_tokens`` (0 on a miss); the DeepSeek-shaped ones (the ``maas`` dialect)
also split ``prompt_tokens`` into DeepSeek's ``prompt_cache_hit_tokens`` + ``prompt_cache_miss_tokens``
(api-docs.deepseek.com, "Context Caching"). A provider without one (``prefix_cache: false``) says nothing
about caching, as before.
"""

from __future__ import annotations

from msgspec import UNSET

from tailgate.sim.engine import Sequence
from tailgate.sim.presets import EngineParams, deepseek_usage
from tailgate.wire.types import CompletionTokensDetails, PromptTokensDetails, Usage


def usage(params: EngineParams, seq: Sequence, completion_tokens: int, *, reasoning: int | None = None) -> Usage:
    """The usage of ``seq`` after ``completion_tokens`` tokens; ``reasoning`` (not None) adds the completion
    details."""
    prompt = seq.prompt_tokens
    details = CompletionTokensDetails(reasoning_tokens=reasoning) if reasoning is not None else UNSET
    out = Usage(
        prompt_tokens=prompt,
        completion_tokens=completion_tokens,
        total_tokens=prompt + completion_tokens,
        completion_tokens_details=details,
    )
    if params.prefix_cache:
        cached = seq.cached_tokens
        out.prompt_tokens_details = PromptTokensDetails(cached_tokens=cached)
        if deepseek_usage(params):
            out.prompt_cache_hit_tokens = cached
            out.prompt_cache_miss_tokens = prompt - cached
    return out
