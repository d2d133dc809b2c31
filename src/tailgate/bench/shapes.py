"""Named workloads our users run (``--workload``) and exact prompt lengths (``--tokenizer``).

* ``shared-prefix``: every request carries the same long system prompt (``--prefix-tokens``, default 2,048)
  and its own user message (``--input-tokens``). Prefix caching shortens TTFT, and providers price cache
  hits 80 % lower; the document reports the prefix share and the input-cost ratio with and without hits.
* ``long-context``: inputs of 8k–32k tokens (uniform), unless ``--input-tokens`` says otherwise.
* ``multi-turn``: conversations of ``turns`` user turns that grow: turn *t* sends the whole conversation so
  far (earlier user turns and, for each, an assistant answer of ``--max-tokens`` words standing in for the
  real one, so the lengths are known and the run is reproducible).
* ``writing``: a small bundled set of writing-assistant prompts (polish, outline, summarize; Chinese and
  English), written for this project (``bench/data/writing.jsonl``).

With ``--tokenizer deepseek|qwen`` synthetic text is exactly the intended number of tokens in that family
(:mod:`tailgate.bench.tokens`); without it (or when the extra is not installed, said on stderr) the
lengths are the usual estimate. Each request carries its intended length, and each run compares it with
the provider's ``usage.prompt_tokens``.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from importlib import resources

from tailgate.bench.schema import UNSET, WorkloadInfo
from tailgate.bench.tokens import FAMILIES, FamilyTokenizer, TokenizerUnavailable, load
from tailgate.bench.workload import LengthDist, RequestBody, RequestSpec, Workload, WorkloadError

WORKLOADS = ("synthetic", "shared-prefix", "long-context", "multi-turn", "writing")
SYSTEM_LEAD = "You are the writing assistant of a busy editorial team. House rules and style guide follow:"
CACHE_HIT_PRICE = 0.2
"""Cache-hit input tokens cost 20 % of a miss (the providers' price lists: "cache hits −80%"): the ratio used when
neither ``--price`` nor the ``--provider``'s price (``price.cached_input`` ÷ ``price.input``) gives one."""


def writing_prompts() -> list[RequestBody]:
    """The bundled writing-assistant prompts: ``{"task", "lang", "prompt"}`` per line."""
    text = resources.files("tailgate.bench").joinpath("data/writing.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@dataclass
class ShapedWorkload(Workload):
    """A :class:`Workload` whose ``next()`` builds one of the named shapes."""

    shape: str = "synthetic"
    family: str = "none"
    prefix_tokens: int = 2048
    turns: int = 5
    _tok: FamilyTokenizer | None = field(init=False, default=None, repr=False)
    _prefix: str = field(init=False, default="", repr=False)
    _writing: list[RequestBody] = field(init=False, default_factory=list, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.family != "none":
            self._tok = load(self.family)
        if self.shape == "shared-prefix":
            self._prefix = self.text(self.prefix_tokens, random.Random(f"prefix:{self.seed}"), SYSTEM_LEAD)
        if self.shape == "writing":
            self._writing = writing_prompts()

    def text(self, n: int, rng: random.Random, lead: str | None = None) -> str:
        """Text of ``n`` tokens: exact with a tokenizer, else the usual estimate (one word ≈ one token)."""
        if self._tok is not None:
            return self._tok.prompt(n, rng) if lead is None else self._tok.exact(lead, n, rng)
        words = " ".join(rng.choices(_estimate_words(), k=max(1, n - 8)))
        return f"{lead or 'Summarise the following notes in a few sentences:'} {words}"

    def _body(self, messages: list[dict[str, str]], intended: int | None) -> RequestSpec:
        body: RequestBody = {"max_tokens": self.max_tokens, "stream": self.stream, "messages": messages}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        return RequestSpec(body=body, stream=self.stream, intended_tokens=intended)

    def next(self) -> RequestSpec:
        i = self._i
        self._i += 1
        if self.shape == "shared-prefix":
            n = self.input_tokens.draw(self._rng)
            user = self.text(n, self._rng)
            return self._body(
                [{"role": "system", "content": self._prefix}, {"role": "user", "content": user}],
                self.prefix_tokens + n,
            )
        if self.shape == "multi-turn":
            conv, turn = divmod(i, max(1, self.turns))
            messages: list[dict[str, str]] = []
            for t in range(turn + 1):
                rng = random.Random(f"{self.seed}:{conv}:{t}")
                messages.append({"role": "user", "content": self.text(self.input_tokens.mean, rng)})
                if t < turn:
                    messages.append({"role": "assistant", "content": self.text(self.max_tokens, rng, "Sure.")})
            intended = (turn + 1) * self.input_tokens.mean + turn * self.max_tokens
            return self._body(messages, intended)
        if self.shape == "writing":
            entry = self._writing[i % len(self._writing)]
            prompt = str(entry["prompt"])
            return self._body(
                [{"role": "user", "content": prompt}], self._tok.count(prompt) if self._tok is not None else None
            )
        n = self.input_tokens.draw(self._rng)  # synthetic and long-context
        return self._body([{"role": "user", "content": self.text(n, self._rng)}], n)

    def describe(self, cache_price: tuple[float, str] = (CACHE_HIT_PRICE, "default")) -> WorkloadInfo:
        """The ``workload`` section of the results document; ``cache_price``: (a cached prompt token's price ÷ an
        uncached one's, where that came from: ``--price``, ``provider`` or ``default``)."""
        out = WorkloadInfo(
            name=self.shape,
            tokenizer=self.family,
            exact_lengths=self._tok is not None,
            library=None if self._tok is None else self._tok.library,
        )
        if self.shape == "shared-prefix":
            unique = self.input_tokens.mean
            share = self.prefix_tokens / (self.prefix_tokens + unique)
            out.prefix_tokens = self.prefix_tokens
            out.unique_tokens_mean = unique
            out.prefix_share = round(share, 4)
            out.input_cost_ratio_all_hits = round(share * cache_price[0] + (1 - share), 4)
            out.cache_price_ratio = round(cache_price[0], 4)
            out.cache_price_from = cache_price[1]
        out.turns = self.turns if self.shape == "multi-turn" else UNSET
        return out


def _estimate_words() -> tuple[str, ...]:
    from tailgate.bench.workload import _WORDS

    return tuple(_WORDS)


def build_workload(
    shape: str | None,
    family: str,
    input_tokens: str,
    max_tokens: int,
    stream: bool,
    seed: int,
    *,
    prefix_tokens: int = 2048,
    turns: int = 5,
    temperature: float | None = None,
) -> ShapedWorkload:
    """The workload of ``--workload`` / ``--tokenizer``; a missing tokenizer degrades to estimates (stderr)."""
    shape = shape or "synthetic"
    if shape not in WORKLOADS:
        raise WorkloadError(f"--workload: unknown {shape!r}; choose one of {', '.join(WORKLOADS)}")
    if family not in (*FAMILIES, "none"):
        raise WorkloadError(f"--tokenizer: unknown {family!r}; choose one of {', '.join(FAMILIES)}, none")
    if family != "none":
        try:
            load(family)
        except TokenizerUnavailable as exc:
            print(f"warning: {exc}; prompt lengths are estimates", file=sys.stderr)
            family = "none"
    if shape == "long-context" and input_tokens.strip() == "128":
        dist = LengthDist(20480, 7000.0, 8192, 32768)
    else:
        dist = LengthDist.parse(input_tokens)
    if prefix_tokens < 1 or turns < 1:
        raise WorkloadError("--prefix-tokens and --turns must be at least 1")
    return ShapedWorkload(
        input_tokens=dist,
        max_tokens=max_tokens,
        stream=stream,
        temperature=temperature,
        seed=seed,
        shape=shape,
        family=family,
        prefix_tokens=prefix_tokens,
        turns=turns,
    )
