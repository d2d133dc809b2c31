"""Provider presets: what is known about each OpenAI-compatible provider our users call.

A preset fills defaults for ``providers.NAME`` in the gateway config (``base_url``, known limits) and carries
notes that ``tailgate config check`` prints beside the provider: which rate-limit headers it sends and what
its 429s mean, because the same status means "wait a second" at one provider and "top up your account" at
another. Facts carry their sources; what could not be checked against a public page says "unverified".
docs/config.md renders the table from :data:`PRESETS` (a test keeps the two in step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OPENAI_REFUSED_FIELDS = (
    "top_k",
    "repetition_penalty",
    "min_p",
    "ignore_eos",
    "min_tokens",
    "enable_thinking",
    "thinking_budget",
    "thinking",
    "chat_template_kwargs",
)
"""Vendor fields of vLLM, SGLang and the MaaS platforms that api.openai.com refuses (``Unrecognized request argument
supplied``): the ``openai`` preset drops them, so an alias mixing providers serves a request that carries them on
every route (the simulator's ``openai`` dialect refuses the same list; a test keeps the two in step)."""


@dataclass(frozen=True, slots=True)
class ProviderPreset:
    """Defaults and field notes for one provider; user config always wins over these."""

    name: str
    title: str
    base_url: str | None
    """OpenAI-compatible API root (what the OpenAI SDK takes as ``base_url``); None: the user must give it."""
    example_model: str | None
    """The upstream id of DeepSeek-V3.2 here, where known."""
    auth: Literal["bearer"] = "bearer"
    requires_key: bool = True
    """False for self-hosted servers, which usually run without keys."""
    rate_limit_headers: str = "none documented"
    status_429: str = "unverified"
    rpm: float | None = None
    """Default requests per minute when the provider does not say (see ``limits_scope``)."""
    tpm: float | None = None
    limits_scope: Literal["key", "account"] = "account"
    """``key``: ``rpm``/``tpm`` hold per API key, so N keys give N times the rate; ``account``: keys share it."""
    max_output_tokens: int | None = None
    thinking_switch: str = "thinking"
    """How its chat API switches reasoning (``providers.NAME.thinking_switch``'s default; config/schema.py)."""
    top_k: bool = False
    """Its chat API takes ``top_k`` (vLLM's and SGLang's sampling parameters): a translated ``/v1/messages``
    request keeps the client's ``top_k`` only for such providers; the rest never see it (OpenAI's chat API has
    no ``top_k``, and a strict upstream such as api.openai.com refuses it with a 400)."""
    flex: bool = False
    """It takes OpenAI's ``service_tier: "flex"`` (``providers.NAME.flex``' default; the source is in ``sources``)."""
    drop_fields: tuple[str, ...] = ()
    """Top-level request fields the provider refuses with a 400, left out of what goes to it
    (``providers.NAME.drop_fields``' default): a field a client sends for another route of the same alias must
    not make this one fail."""
    anthropic_base_url: str | None = None
    """The provider's own Anthropic Messages API root (what the Anthropic SDK takes as ``base_url``; requests
    go to ``{it}/v1/messages``), where it serves one; None: OpenAI chat only."""
    currency: str = "CNY"
    cache_min_tokens: int | None = None
    """The shortest prompt the provider's prompt cache serves, where its docs say (the source is in
    ``sources``); None: 64 tokens (DeepSeek's unit, the simulator's block). Conversation affinity applies from there."""
    cached_input_ratio: float | None = None
    """What a cache-hit prompt token costs as a share of the input price, where the provider publishes it:
    ``price.cached_input`` defaults to ``price.input`` × this (the source is in ``sources``)."""
    batch_price_ratio: float | None = None
    """What the provider's own batch API bills as a share of its interactive price, where it publishes it:
    ``price.batch`` defaults to the interactive price × this (the source is in ``sources``)."""
    batch_cached_input_ratio: float | None = None
    """What a cache-hit prompt token costs in batch as a share of the batch input price, where the provider says:
    1.0 = no cache discount in batch (Bailian). Unset: also 1.0 (billed as any prompt token) unless
    ``price.batch.cached_input`` says otherwise."""
    notes: str = ""
    sources: tuple[str, ...] = ()

    @property
    def self_hosted(self) -> bool:
        """A server the user runs (vLLM, SGLang): no fixed URL, no key needed."""
        return self.base_url is None


_OPENAI_HEADERS = "x-ratelimit-{limit,remaining,reset}-{requests,tokens} (reset as a duration: '1s', '6m0s')"

PRESETS: dict[str, ProviderPreset] = {
    p.name: p
    for p in (
        ProviderPreset(
            name="deepseek",
            title="DeepSeek",
            base_url="https://api.deepseek.com",
            example_model="deepseek-chat",
            anthropic_base_url="https://api.deepseek.com/anthropic",
            rate_limit_headers="none documented",
            status_429=(
                "DeepSeek says it does not cap users' rate; under load it holds the connection open instead, "
                "sending blank lines (non-streaming) or ': keep-alive' SSE comments (streaming) until it starts, "
                "and closes it if inference has not started after 10 minutes (an older revision said 30). An "
                "older revision also lists 429 'Rate Limit Reached' and 503 'Server Overloaded' under pressure."
            ),
            notes=(
                "base_url is the OpenAI SDK's https://api.deepseek.com; https://api.deepseek.com/v1 also works "
                "(that v1 is not a model version). deepseek-chat is DeepSeek-V3.2 non-thinking and "
                "deepseek-reasoner its thinking mode (docs of late 2025); later docs remap both names to a newer "
                "model and announce their retirement, so pin and re-check the id. A held connection looks like "
                "a slow first token: set timeouts.first_token to what you will wait. Context caching is on for "
                "every account (64-token units); usage reports prompt_cache_hit_tokens / prompt_cache_miss_tokens. "
                "Cache-hit input cost 10% of cache-miss input for DeepSeek-V3.2 (0.2 vs 2 CNY per 1M tokens, "
                "late 2025); the ratio changes with the model, so set price.cached_input from the current page."
            ),
            cached_input_ratio=0.1,
            cache_min_tokens=64,
            sources=(
                "https://api-docs.deepseek.com/",
                "https://api-docs.deepseek.com/zh-cn/",
                "https://api-docs.deepseek.com/quick_start/rate_limit",
                "https://api-docs.deepseek.com/quick_start/pricing",
                "https://api-docs.deepseek.com/guides/kv_cache",
                "https://api-docs.deepseek.com/guides/anthropic_api",
            ),
        ),
        ProviderPreset(
            name="siliconflow",
            thinking_switch="enable_thinking",
            title="SiliconFlow",
            base_url="https://api.siliconflow.cn/v1",
            example_model="deepseek-ai/DeepSeek-V3.2",
            rate_limit_headers="unverified",
            status_429=(
                "429 once any of RPM, RPH, RPD, TPM or TPD is reached, whichever comes first; limits are per "
                "account (not per key) and per model, so extra keys on one account add nothing."
            ),
            notes="Chat models: RPM 1,000-10,000 and TPM 50k-5M depending on the account's usage tier.",
            sources=("https://docs.siliconflow.cn/cn/userguide/rate-limits/rate-limit-and-upgradation",),
        ),
        ProviderPreset(
            name="volcengine",
            title="Volcengine Ark",
            base_url="https://ark.cn-beijing.volces.com/api/v3",
            example_model="deepseek-v3-2-251201",
            rate_limit_headers="unverified",
            status_429="unverified",
            notes=(
                "Streams report usage with stream_options.include_usage (reported). Model id and limits "
                "unverified: check the Ark console; older setups call an endpoint id (ep-...) instead."
            ),
        ),
        ProviderPreset(
            name="bailian",
            thinking_switch="enable_thinking",
            title="Alibaba Cloud Bailian (DashScope compatible mode)",
            base_url="https://dashscope.aliyuncs.com/compatible-mode/v1",
            example_model="deepseek-v3.2",
            anthropic_base_url="https://dashscope.aliyuncs.com/apps/anthropic",
            rate_limit_headers="none documented",
            status_429=(
                "Three 429s told apart by message: 'Requests rate limit exceeded' / 'You exceeded your current "
                "requests list' (RPM), 'Allocated quota exceeded' / 'You exceeded your current quota' (TPM), "
                "'Request rate increased too quickly' (burst protection, below RPM/TPM). Limits also apply per "
                "second (RPM/60, TPM/60) and per Alibaba Cloud account across all keys, per model. 403 when "
                "the free quota runs out with 'stop when free quota is used up' on: not retryable."
            ),
            notes=(
                "Qwen3 open models are stream-only (unverified). Limits usually recover within a minute. "
                "Implicit context cache (on by default, prefixes of 256+ tokens): a hit is billed at 20% of the "
                "input price and reported as usage.prompt_tokens_details.cached_tokens. The Anthropic endpoint "
                "serves Qwen models (its page lists qwen-plus, qwen3-coder-plus ...); outside mainland China it is "
                "https://dashscope-intl.aliyuncs.com/apps/anthropic."
            ),
            cached_input_ratio=0.2,
            cache_min_tokens=256,
            # Batch calls cost 50 % of real-time calls and get no context-cache discount (billing page).
            batch_price_ratio=0.5,
            batch_cached_input_ratio=1.0,
            sources=(
                "https://help.aliyun.com/zh/model-studio/rate-limit",
                "https://www.alibabacloud.com/help/en/model-studio/billing-for-model-studio",
                "https://www.alibabacloud.com/help/en/document_detail/2840182.html",
                "https://help.aliyun.com/zh/model-studio/user-guide/context-cache",
                "https://help.aliyun.com/zh/model-studio/anthropic-api-messages",
            ),
        ),
        ProviderPreset(
            name="lanyun",
            title="Lanyun MaaS",
            base_url="https://maas-api.lanyun.net/v1",
            example_model="/maas/deepseek-ai/DeepSeek-V3.2",
            rate_limit_headers="unverified",
            status_429="unverified",
            rpm=1200.0,
            limits_scope="key",
            notes=(
                "About 20 requests/s per API key by default until support raises it (reported by our users, "
                "unverified publicly): rpm 1200 per key. A load test past that measures the limiter."
            ),
        ),
        ProviderPreset(
            name="qiniu",
            title="Qiniu AI inference",
            base_url="https://api.qnaigc.com/v1",
            example_model="deepseek/deepseek-v3.2-251201",
            rate_limit_headers="unverified",
            status_429=(
                "A wrong model name answers 503 quota_exceeded_error, which looks like an overload "
                "(reported, unverified): check the model id before treating it as one."
            ),
            notes=(
                "base_url is the domain plus /v1 (Qiniu's FAQ warns against the bare domain or the full "
                "/v1/chat/completions path). Model id unverified."
            ),
            sources=("https://developer.qiniu.com/aitokenapi/12897/how-to-use-ai-token-api",),
        ),
        ProviderPreset(
            name="moonshot",
            title="Moonshot AI (Kimi)",
            base_url="https://api.moonshot.cn/v1",
            example_model=None,
            rate_limit_headers="X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset",
            status_429=(
                "429 when the request rate passes the account's tier (concurrency, RPM, TPM); tiers follow "
                "the cumulative top-up. Back off exponentially."
            ),
            notes="Serves Kimi models, not DeepSeek. Outside mainland China: https://api.moonshot.ai/v1.",
            sources=("https://www.kimi.com/help/kimi-api/api-rate-limits",),
        ),
        ProviderPreset(
            name="zhipu",
            title="Zhipu BigModel (GLM)",
            base_url="https://open.bigmodel.cn/api/paas/v4",
            example_model=None,
            rate_limit_headers="unverified",
            status_429=(
                "Business code in the body decides: 1113 'account in arrears, please recharge' arrives as HTTP "
                "429 too (HTTP status reported, unverified), so a 429 may be a billing stop, not a rate limit; "
                "1302 is too much concurrency."
            ),
            notes="Serves GLM models, not DeepSeek. Codes checked on Z.ai's (international) error-code page.",
            sources=("https://docs.z.ai/api-reference/api-code",),
        ),
        ProviderPreset(
            name="qianfan",
            title="Baidu Qianfan (v2)",
            base_url="https://qianfan.baidubce.com/v2",
            example_model=None,
            rate_limit_headers=(
                "X-Ratelimit-{Limit,Remaining}-{Requests,Input-Tokens,Output-Tokens} (reported, unverified)"
            ),
            status_429="unverified",
            notes="Limits are RPM and TPM per service (formerly QPS). DeepSeek-V3.2 id unverified.",
            sources=("https://cloud.baidu.com/doc/WENXINWORKSHOP/s/Llroa77io",),
        ),
        ProviderPreset(
            name="openai",
            thinking_switch="reasoning_effort",
            drop_fields=OPENAI_REFUSED_FIELDS,
            flex=True,
            title="OpenAI",
            base_url="https://api.openai.com/v1",
            example_model=None,
            rate_limit_headers=_OPENAI_HEADERS,
            status_429=(
                "error.code rate_limit_exceeded (or slow_down for a too-fast ramp): wait, honour Retry-After, "
                "retry. insufficient_quota (error.code credit_balance_exhausted, *_spend_limit_exceeded, "
                "organization_usage_limit_exceeded): out of credit or over budget; retrying never helps. "
                "503 means overloaded."
            ),
            currency="USD",
            cache_min_tokens=1024,
            notes=(
                "Serves OpenAI models, not DeepSeek. Limits are per organization/project, not per key. Prompt "
                "caching applies to prompts of 1024 tokens or more (prompt_cache_key steers it)."
            ),
            sources=(
                "https://platform.openai.com/docs/guides/prompt-caching",
                "https://platform.openai.com/docs/guides/flex-processing",
                "https://developers.openai.com/docs/guides/error-codes",
                "https://learn.microsoft.com/zh-cn/microsoft-cloud/dev/dev-proxy/concepts/openai-insufficient-quota",
                "https://community.openai.com/t/how-to-get-rate-limit-reset-time-for-response-api/1268905",
            ),
        ),
        ProviderPreset(
            name="vllm",
            thinking_switch="chat_template_kwargs",
            top_k=True,
            title="vLLM (self-hosted)",
            base_url=None,
            example_model="deepseek-ai/DeepSeek-V3.2",
            requires_key=False,
            rate_limit_headers="none",
            status_429="none by default: overload shows as queueing (a longer time to first token), not as 429",
            notes=(
                "Give base_url, e.g. http://127.0.0.1:8000/v1. The model id is what the server was started "
                "with (vllm serve NAME). Keys only if it runs with --api-key."
            ),
            sources=(
                "https://docs.vllm.ai/en/v0.8.4/_sources/serving/openai_compatible_server.md",
                "https://huggingface.co/deepseek-ai/DeepSeek-V3.2",
            ),
        ),
        ProviderPreset(
            name="sglang",
            thinking_switch="chat_template_kwargs",
            top_k=True,
            title="SGLang (self-hosted)",
            base_url=None,
            example_model="deepseek-ai/DeepSeek-V3.2",
            requires_key=False,
            rate_limit_headers="none",
            status_429="none by default: overload shows as queueing (a longer time to first token), not as 429",
            notes=(
                "Give base_url, e.g. http://127.0.0.1:30000/v1 (SGLang's default port, unverified here). Keys "
                "only if it runs with --api-key (unverified here)."
            ),
            sources=("https://huggingface.co/deepseek-ai/DeepSeek-V3.2",),
        ),
    )
}

ALIASES: dict[str, str] = {"dashscope": "bailian", "ark": "volcengine"}
"""Other names users know a provider by."""


def get_preset(name: str) -> ProviderPreset | None:
    """The preset called ``name`` (or one of its aliases), case-insensitively; None if there is none."""
    key = name.strip().lower()
    return PRESETS.get(ALIASES.get(key, key))


def _aliases_of(name: str) -> list[str]:
    return sorted(alias for alias, target in ALIASES.items() if target == name)


def known_presets() -> str:
    """The names to suggest in an error message: ``bailian (alias dashscope), deepseek, ...``."""
    parts = []
    for name in sorted(PRESETS):
        aliases = _aliases_of(name)
        parts.append(f"{name} (alias {', '.join(aliases)})" if aliases else name)
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _cached(p: ProviderPreset) -> str:
    return f"{p.cached_input_ratio:.0%} of input" if p.cached_input_ratio is not None else "–"


def presets_markdown() -> str:
    """The preset table of docs/config.md, generated so the page cannot drift from :data:`PRESETS`."""
    rows = [
        "| preset | base_url | Anthropic endpoint | DeepSeek-V3.2 id | rate-limit headers | 429 and friends "
        "| default limits | cached input | cache minimum | notes | sources |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in PRESETS.values():
        name = f"`{p.name}`" + "".join(f" (`{a}`)" for a in _aliases_of(p.name))
        url = f"`{p.base_url}`" if p.base_url else "yours, e.g. `http://127.0.0.1:8000/v1`"
        model = f"`{p.example_model}`" if p.example_model else "–"
        limits = ", ".join(f"{k} {v:g}" for k, v in (("rpm", p.rpm), ("tpm", p.tpm)) if v is not None)
        limits = f"{limits} per {p.limits_scope}" if limits else ""
        if not p.requires_key:
            limits = f"{limits}; no key needed" if limits else "no key needed"
        sources = " ".join(f"[{i}]({u})" for i, u in enumerate(p.sources, 1)) or "–"
        native = f"`{p.anthropic_base_url}`" if p.anthropic_base_url else "–"
        rows.append(
            f"| {name}: {_cell(p.title)} | {url} | {native} | {model} | {_cell(p.rate_limit_headers)} | "
            f"{_cell(p.status_429)} | {limits or '–'} | {_cached(p)} | "
            f"{f'{p.cache_min_tokens} tokens' if p.cache_min_tokens is not None else '64 (default)'} | "
            f"{_cell(p.notes) or '–'} | {sources} |"
        )
    return "\n".join(rows) + "\n"
