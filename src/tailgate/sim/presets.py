"""Engine presets: simulated providers shaped like the ones our users measured.

Numbers come from a monitoring platform's public DeepSeek-V3.2 table that our users read: P90 "latency"
(read as time to first token) and per-request tok/s at modest load. Each preset is documented in
docs/simulator.md; the table there is generated from :data:`PRESETS` by a test, so it cannot drift.

Model of one provider (see :mod:`tailgate.sim.engine`):

* ``pre_median_s`` / ``pre_sigma``: lognormal time a request spends before it reaches the engine queue
  (network, the provider's own gateway, tenant scheduling). P90 = median · exp(1.2816 · sigma).
* ``slots``: sequences decoded together (continuous batching). Requests beyond wait in a FIFO queue of
  ``queue_limit``; overflow answers ``overflow_status``.
* ``prefill_tps``: prompt tokens per second while a sequence is being prefilled in its slot.
* ``step_ms`` + ``step_per_seq_ms`` · (active − 1): one decode step; every decoding sequence gets one token
  per step, so per-request tok/s = 1000 / step time and falls as the batch grows.
* ``jitter``: lognormal sigma applied to each step's duration.
* ``swing``: a slow multiplier on step time and pre-queue time, 1 … ``swing`` over ``swing_period_s``
  (provider C: fast in snapshots, 3.7× peak/trough over the week).
* ``dialect``: which request fields the provider accepts (:data:`DIALECTS`): ``openai`` is strict like
  api.openai.com; ``vllm``, ``sglang`` and ``maas`` accept the vendor fields load testers send.
* ``thinking``: thinking mode on by default (a reasoning model); its reasoning length is lognormal
  (``reasoning_median``, ``reasoning_sigma``) unless the request's budget is smaller.
* ``tool_call_rate``: share of ``tool_choice: auto`` requests (with ``tools``) answered with a tool call,
  when the turn is the user's; ``tool_result_call_rate`` (0 by default) is that share for a turn answering
  a tool result, so an agent's tool loop ends with a text answer, as a real model's does.
* ``tool_arguments``: ``(function name, arguments JSON)`` pairs; a call goes to the first of these functions
  the request declares, with these arguments (a coding agent's read-only tool, reading a file that exists),
  instead of a random function with generated arguments.
* ``max_tokens_cap``: chat's ``max_tokens`` is a cap on the natural length (as on Anthropic's API and a real
  model), not the length to produce; agents send 32,000 on every turn.
* ``prefix_cache``: the provider caches prompt prefixes (:mod:`tailgate.sim.prefix_cache`) per API key in
  blocks of ``cache_block_tokens`` tokens (DeepSeek stores 64-token units), at most ``cache_blocks`` blocks,
  each forgotten ``cache_ttl_s`` after its last use; a cached prefix skips its prefill and is reported in
  ``usage``. Defaults per preset follow the provider each imitates (docs/simulator.md, "Prefix cache").
* ``anthropic``: also serves Anthropic's Messages API (``POST /v1/messages``), as DeepSeek's and Bailian's
  Anthropic-compatible endpoints do (:mod:`tailgate.sim.anthropic`); elsewhere that path is a 404.
* ``price_input`` / ``price_output``: the live list price per million tokens, in ``price_currency``;
  ``batch_price_ratio`` the share of it a batch line is billed (0.5: Bailian, SiliconFlow and OpenAI sell
  batch at half price — alibabacloud.com/help/en/model-studio/batch-inference, "50% of the cost of real-time
  inference"; docs.siliconflow.cn/cn/userguide/guides/batch, "价格降低 50%"; Volcengine Ark's batch inference
  likewise). The DeepSeek-shaped presets use DeepSeek-V3.2's list price (2 CNY input, 3 CNY output per
  million, api-docs.deepseek.com "Models & Pricing"); ``openai`` gpt-4o-mini's (0.15 / 0.60 USD); the
  self-hosted ones cost nothing per token.
* ``batch_api``: serves OpenAI's ``/v1/files`` + ``/v1/batches`` (:mod:`tailgate.sim.batches`); false makes them
  404, a provider without a batch API. ``batch_turnaround_s``: how long a batch runs, create to completed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

Dialect = Literal["openai", "vllm", "sglang", "maas"]
DIALECTS: tuple[str, ...] = ("openai", "vllm", "sglang", "maas")


@dataclass(frozen=True, slots=True)
class EngineParams:
    """Shape of one simulated provider; all times are before ``time_scale`` is applied."""

    slots: int = 64
    queue_limit: int = 1024
    overflow_status: int = 503
    prefill_tps: float = 8000.0
    step_ms: float = 10.0
    step_per_seq_ms: float = 0.02
    jitter: float = 0.05
    pre_median_s: float = 0.0
    pre_sigma: float = 0.0
    swing: float = 1.0
    swing_period_s: float = 3600.0
    default_output_tokens: int = 200
    max_output_tokens: int = 32768
    accuracy: float = 0.85
    embed_ms: float = 5.0
    dialect: Dialect = "maas"
    thinking: bool = False
    reasoning_median: float = 400.0
    reasoning_sigma: float = 0.5
    tool_call_rate: float = 1.0
    tool_result_call_rate: float = 0.0
    tool_arguments: tuple[tuple[str, str], ...] = ()
    max_tokens_cap: bool = False
    prefix_cache: bool = True
    cache_block_tokens: int = 64
    cache_blocks: int = 100_000
    cache_ttl_s: float = 3600.0
    anthropic: bool = False
    price_input: float = 2.0
    price_output: float = 3.0
    price_currency: str = "CNY"
    batch_api: bool = True
    batch_price_ratio: float = 0.5
    batch_turnaround_s: float = 300.0

    def with_overrides(self, overrides: dict[str, Any]) -> EngineParams:
        """A copy with the given fields replaced (unknown names are a programming error upstream)."""
        return replace(self, **overrides)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


PRESETS: dict[str, tuple[EngineParams, str]] = {
    "instant": (
        EngineParams(
            slots=100_000,
            queue_limit=100_000,
            prefill_tps=1e9,
            step_ms=0.1,
            step_per_seq_ms=0.0,
            jitter=0.0,
            default_output_tokens=20,
            max_output_tokens=1_000_000,
            accuracy=1.0,
            embed_ms=0.0,
            dialect="openai",
            cache_block_tokens=128,
            cache_ttl_s=600.0,
            anthropic=True,
            batch_turnaround_s=1.0,
        ),
        "near-zero latency (0.1 ms steps, no queue): for gateway and load-tester overhead benchmarks",
    ),
    "provider-a": (
        EngineParams(
            slots=256,
            queue_limit=4096,
            prefill_tps=12_000,
            step_ms=8.4,
            step_per_seq_ms=0.01,
            jitter=0.04,
            pre_median_s=0.72,
            pre_sigma=0.2,
            max_output_tokens=131_072,
            accuracy=0.8333,
            anthropic=True,
        ),
        "own GPU cluster: P90 TTFT ≈ 1.0 s, ≈ 117 tok/s, steady under load, 128k output",
    ),
    "provider-b": (
        EngineParams(
            slots=96,
            queue_limit=2048,
            prefill_tps=6000,
            step_ms=32.0,
            step_per_seq_ms=0.05,
            jitter=0.08,
            pre_median_s=2.9,
            pre_sigma=0.2,
            max_output_tokens=32_768,
            accuracy=0.8384,
        ),
        "P90 TTFT ≈ 3.8 s, ≈ 30 tok/s, 32k output",
    ),
    "provider-c": (
        EngineParams(
            slots=128,
            queue_limit=2048,
            prefill_tps=10_000,
            step_ms=8.6,
            step_per_seq_ms=0.03,
            jitter=0.1,
            pre_median_s=2.2,
            pre_sigma=0.45,
            swing=3.7,
            swing_period_s=3600.0,
            max_output_tokens=32_768,
            accuracy=0.8182,
        ),
        "fast in a snapshot (≈ 116 tok/s) but swings 3.7× peak/trough over an hour; P90 TTFT up to ≈ 7 s",
    ),
    "provider-d": (
        EngineParams(
            slots=48,
            queue_limit=2048,
            prefill_tps=3000,
            step_ms=40.0,
            step_per_seq_ms=0.6,
            jitter=0.3,
            pre_median_s=7.5,
            pre_sigma=0.28,
            swing=2.0,
            swing_period_s=3600.0,
            max_output_tokens=163_840,
            accuracy=0.8535,
        ),
        "largest catalogue, slow: P90 TTFT ≈ 10.8 s, 11–54 tok/s depending on load and hour, 160k output",
    ),
    "provider-e": (
        EngineParams(
            slots=128,
            queue_limit=2048,
            prefill_tps=6000,
            step_ms=24.0,
            step_per_seq_ms=0.02,
            jitter=0.05,
            pre_median_s=7.6,
            pre_sigma=0.2,
            max_output_tokens=32_768,
            accuracy=0.8131,
        ),
        "steady but slow to start: P90 TTFT ≈ 10 s, ≈ 42 tok/s",
    ),
    "aggregator": (
        EngineParams(
            slots=16,
            queue_limit=256,
            overflow_status=429,
            prefill_tps=4000,
            step_ms=12.0,
            step_per_seq_ms=1.5,
            jitter=0.15,
            pre_median_s=0.35,
            pre_sigma=0.25,
            accuracy=0.82,
        ),
        "cheap reseller: fine at low concurrency, but 16 tenant-wide slots; past them requests queue, "
        "steps slow with every sequence, and the queue overflows into 429s",
    ),
    "naive": (
        EngineParams(
            slots=1,
            queue_limit=10_000,
            prefill_tps=2000,
            step_ms=25.0,
            step_per_seq_ms=0.0,
            jitter=0.05,
            accuracy=0.8,
            dialect="vllm",
            prefix_cache=False,
            price_input=0.0,
            price_output=0.0,
        ),
        "one sequence at a time (plain per-request generate, no batching): P99 explodes with concurrency",
    ),
    "openai": (
        EngineParams(
            slots=512,
            queue_limit=8192,
            overflow_status=429,
            prefill_tps=20_000,
            step_ms=14.0,
            step_per_seq_ms=0.005,
            jitter=0.1,
            pre_median_s=0.35,
            pre_sigma=0.3,
            max_output_tokens=16_384,
            accuracy=0.9,
            dialect="openai",
            cache_block_tokens=128,
            cache_ttl_s=600.0,
            price_input=0.15,
            price_output=0.60,
            price_currency="USD",
        ),
        "api.openai.com-shaped: strict request validation (vendor fields are a 400), 429 on overflow",
    ),
    "vllm": (
        EngineParams(
            slots=256,
            queue_limit=100_000,
            prefill_tps=15_000,
            step_ms=12.0,
            step_per_seq_ms=0.05,
            jitter=0.03,
            accuracy=0.85,
            dialect="vllm",
            cache_block_tokens=16,
            cache_blocks=32_768,
            cache_ttl_s=86_400.0,
            price_input=0.0,
            price_output=0.0,
        ),
        "a self-hosted vLLM server (no network hop): accepts ignore_eos, min_tokens, continuous_usage_stats …",
    ),
    "sglang": (
        EngineParams(
            slots=256,
            queue_limit=100_000,
            prefill_tps=18_000,
            step_ms=11.0,
            step_per_seq_ms=0.04,
            jitter=0.03,
            accuracy=0.85,
            dialect="sglang",
            cache_block_tokens=16,
            cache_blocks=32_768,
            cache_ttl_s=86_400.0,
            price_input=0.0,
            price_output=0.0,
        ),
        "a self-hosted SGLang server: vLLM's vendor fields plus chat_template_kwargs thinking switches",
    ),
    "reasoner": (
        EngineParams(
            slots=128,
            queue_limit=2048,
            prefill_tps=10_000,
            step_ms=15.0,
            step_per_seq_ms=0.02,
            jitter=0.05,
            pre_median_s=0.8,
            pre_sigma=0.2,
            max_output_tokens=65_536,
            accuracy=0.9,
            thinking=True,
            reasoning_median=400.0,
            reasoning_sigma=0.5,
            anthropic=True,
        ),
        "a reasoning model on a MaaS platform (DeepSeek-R1 / Qwen3 thinking): reasoning_content streams "
        "before the answer, thinking on unless the request turns it off",
    ),
}


def preset(name: str) -> EngineParams:
    """The engine parameters of a named preset; unknown names list the known ones."""
    try:
        return PRESETS[name][0]
    except KeyError:
        known = ", ".join(PRESETS)
        raise ValueError(f"unknown simulator preset {name!r}; known presets: {known}") from None


def presets_markdown() -> str:
    """The preset table of docs/simulator.md (a test checks the doc holds exactly this)."""
    head = (
        "| preset | slots | queue (overflow) | prefill tok/s | step ms (+ per extra seq) | pre-queue median s (σ) "
        "| swing | max output | accuracy | dialect | thinking | prefix cache (block × blocks, TTL) "
        "| price in / out per M (batch) | shape |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for name, (p, description) in PRESETS.items():
        rows.append(
            f"| `{name}` | {p.slots} | {p.queue_limit} ({p.overflow_status}) | {p.prefill_tps:g} "
            f"| {p.step_ms:g} (+{p.step_per_seq_ms:g}) | {p.pre_median_s:g} ({p.pre_sigma:g}) "
            f"| {p.swing:g}× / {p.swing_period_s:g} s | {p.max_output_tokens} | {p.accuracy:.2%} | {_dialect(p)} "
            f"| {_thinking(p)} | {_cache(p)} | {_price(p)} | {description} |"
        )
    return head + "\n".join(rows) + "\n"


def _price(p: EngineParams) -> str:
    live = f"{p.price_input:g} / {p.price_output:g} {p.price_currency}"
    if not p.batch_api:
        return f"{live} (no batch API)"
    return f"{live} (batch ×{p.batch_price_ratio:g}, {p.batch_turnaround_s:g} s)"


def _cache(p: EngineParams) -> str:
    if not p.prefix_cache:
        return "off"
    return f"{p.cache_block_tokens} tok × {p.cache_blocks}, {p.cache_ttl_s:g} s"


def deepseek_usage(p: EngineParams) -> bool:
    """Does this provider also report DeepSeek's ``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens``?

    The ``maas`` dialect imitates the platforms serving DeepSeek (DeepSeek's own API reports both beside
    ``prompt_tokens_details.cached_tokens``); the others report OpenAI's field only.
    """
    return p.prefix_cache and p.dialect == "maas"


def _dialect(p: EngineParams) -> str:
    return f"{p.dialect} + anthropic" if p.anthropic else p.dialect


def _thinking(p: EngineParams) -> str:
    return f"on (median {p.reasoning_median:g})" if p.thinking else "off"


if __name__ == "__main__":  # python -m tailgate.sim.presets  → prints the docs table
    print(presets_markdown(), end="")
