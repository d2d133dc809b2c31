"""A run's prompt cache, from usage: how much of the prompt the provider served from its cache, and what the
input cost per 1,000 requests at a price (``--price``)."""

from __future__ import annotations

from dataclasses import dataclass

from tailgate.bench.schema import CacheSummary, InputCost, PriceShown, Run, UnsetType
from tailgate.config.schema import PriceConfig
from tailgate.upstream.events import CallResult

__all__ = ["CacheTally", "input_cost"]


@dataclass(slots=True)
class CacheTally:
    """The successes with ``usage.prompt_tokens``, those that also reported cached tokens, the prompt tokens
    of the latter and their cached tokens. Mergeable (bench workers) and read back from a results file."""

    requests: int = 0
    reported: int = 0
    reported_prompt_tokens: int = 0
    cached_tokens: int = 0

    def add(self, result: CallResult) -> None:
        """Count a success whose usage gave ``prompt_tokens``."""
        self.requests += 1
        if result.cached_tokens is not None and result.prompt_tokens is not None:
            self.reported += 1
            self.reported_prompt_tokens += result.prompt_tokens
            self.cached_tokens += result.cached_tokens

    def merge(self, other: CacheTally) -> None:
        self.requests += other.requests
        self.reported += other.reported
        self.reported_prompt_tokens += other.reported_prompt_tokens
        self.cached_tokens += other.cached_tokens

    def summary(self) -> CacheSummary:
        """The run object's ``cache``. ``hit_rate`` = cached ÷ prompt tokens over the successes whose usage
        reported cached tokens (OpenAI's ``prompt_tokens_details.cached_tokens`` or DeepSeek's
        ``prompt_cache_hit_tokens``); null when none did: a provider that says nothing about caching is "not
        reported", never a 0 % that would read as misses."""
        prompt = self.reported_prompt_tokens
        return CacheSummary(
            requests=self.requests,
            reported=self.reported,
            reported_prompt_tokens=prompt,
            cached_tokens=self.cached_tokens,
            hit_rate=round(self.cached_tokens / prompt, 6) if prompt else None,
        )

    @classmethod
    def from_summary(cls, d: CacheSummary) -> CacheTally:
        """Back from :meth:`summary`'s output."""
        return cls(d.requests, d.reported, d.reported_prompt_tokens, d.cached_tokens)


def input_cost(run: Run, price: PriceConfig) -> InputCost | None:
    """The input cost of a run object per 1,000 requests at ``price`` (``--price``), and without the cache.

    Over the successes whose usage gave ``prompt_tokens``: cached tokens (where reported) at
    ``price.cached_rate``, every other prompt token at ``price.input`` (a request whose provider did not say
    pays full input); ``uncached_per_1k_requests`` is the same prompts all at ``input``. None without such
    successes.
    """
    cache = run.cache
    prompt = run.tokens.input
    if isinstance(cache, UnsetType) or not cache.requests or prompt is None:
        return None
    per_1k = 1000.0 / cache.requests
    return InputCost(
        per_1k_requests=round(price.input_cost(prompt, cache.cached_tokens) * per_1k, 6),
        uncached_per_1k_requests=round(price.input_cost(prompt) * per_1k, 6),
        currency=price.currency,
        price=PriceShown(input=price.input, cached_input=price.cached_rate),
    )
