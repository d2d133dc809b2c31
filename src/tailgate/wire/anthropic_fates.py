"""What becomes of each Anthropic Messages field and ``anthropic-beta`` value on a route translated to OpenAI chat.

One table, read by the translator (:mod:`tailgate.wire.anthropic_translate` refuses exactly the ``refused`` fields)
and rendered into docs/gateway.md (:func:`fates_markdown`; a test keeps the page and the table in step). Every field
of :class:`~tailgate.wire.anthropic.MessagesRequest` has a row (a test checks that too), so a field added there needs
a decided fate here. The fates:

* ``carried`` — sent to the provider as it came (the same name and meaning in OpenAI chat);
* ``mapped`` — said in the provider's own words (its thinking switch, ``reasoning_effort``, ``stop``, ``user``);
* ``dropped`` — left out: only Anthropic's servers act on it (context editing, caching scopes, beta switches), or
  it has no meaning for another provider; the answer is the same question's answer without it;
* ``refused`` — the answer would be a different one without it (a tool only Anthropic runs, a structured-output
  contract): this route cannot carry the request. Another route of the alias that can (a passthrough) serves it;
  with none, a 400 names the field.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["BETA_FATES", "FIELD_FATES", "OTHER_BETA", "OTHER_FIELD", "REFUSED_FIELDS", "Fate", "fates_markdown"]

Fate = Literal["carried", "mapped", "dropped", "refused"]

FIELD_FATES: dict[str, tuple[Fate, str]] = {
    "model": ("mapped", "the route's upstream model id"),
    "messages": (
        "mapped",
        "chat messages: text joined, images as `image_url` parts, `tool_use` → `tool_calls`, `tool_result` → `tool` "
        "messages, `thinking` → `reasoning_content`; `redacted_thinking` and blocks' `cache_control` dropped; "
        "`document` blocks refused",
    ),
    "system": ("mapped", "one leading `system` message (blocks joined by a blank line; their `cache_control` dropped)"),
    "max_tokens": ("carried", "`max_tokens`"),
    "stream": ("mapped", "`stream`, with `stream_options.include_usage` (the usage of `message_delta`)"),
    "stop_sequences": ("mapped", "`stop`"),
    "temperature": ("carried", "`temperature`"),
    "top_p": ("carried", "`top_p`"),
    "top_k": ("carried", "`top_k` where the preset takes it (`vllm`, `sglang`); dropped elsewhere"),
    "metadata": ("mapped", "`metadata.user_id` → `user`"),
    "tools": ("mapped", "client tools → `function` tools; a server tool (a versioned `type`) refused"),
    "tool_choice": (
        "mapped",
        "auto → `auto`, any → `required`, tool → the named function, none → `none`; "
        "`disable_parallel_tool_use` → `parallel_tool_calls: false`",
    ),
    "thinking": (
        "mapped",
        "the provider's thinking switch (`providers.NAME.thinking_switch`): `enabled`, `adaptive`, `between_tools` "
        "turn it on, `disabled` off; `budget_tokens` → its budget where it has one",
    ),
    "output_config": (
        "mapped",
        "`effort` → `reasoning_effort` where the switch is `reasoning_effort` (`max` → `high`), dropped elsewhere; "
        "`format` refused",
    ),
    "context_management": (
        "dropped",
        "its edits (`clear_thinking_20251015`, `clear_tool_uses_20250919`) run on Anthropic's servers only",
    ),
    "cache_control": (
        "dropped",
        "Anthropic's automatic caching scope; OpenAI-compatible providers cache by themselves",
    ),
    "mcp_servers": ("refused", "Anthropic's servers call the MCP servers; a chat provider cannot"),
    "container": ("refused", "a code-execution container on Anthropic's servers"),
    "output_format": ("refused", "a structured-output contract the answer must keep"),
    "service_tier": ("dropped", "Anthropic's capacity tiers"),
    "inference_geo": ("dropped", "where Anthropic runs the request"),
    "speed": ("dropped", "Anthropic's fast mode"),
    "diagnostics": ("dropped", "Anthropic's own diagnostics"),
    "user_profile_id": ("dropped", "an Anthropic account setting"),
    "workspace_id": ("dropped", "an Anthropic account setting"),
}
"""Each top-level field of a ``/v1/messages`` request: its fate on a translated route, and how or why."""

OTHER_FIELD: tuple[Fate, str] = (
    "dropped",
    "a field the gateway does not know: a translation cannot say it; a passthrough route carries it as sent",
)

BETA_FATES: dict[str, tuple[Fate, str]] = {
    "claude-code-20250219": ("dropped", "tells Anthropic's API the caller is Claude Code"),
    "interleaved-thinking-2025-05-14": (
        "dropped",
        "thinking between tool calls is the model's own; its `reasoning_content` comes back as thinking blocks",
    ),
    "context-management-2025-06-27": ("dropped", "switches on `context_management`, itself dropped"),
    "prompt-caching-scope-2026-01-05": (
        "dropped",
        "Anthropic's caching scopes; providers cache prefixes by themselves",
    ),
    "mid-conversation-system-2026-04-07": ("mapped", "a `system` turn among the messages stays a system message there"),
    "effort-2025-11-24": ("mapped", "switches on `output_config.effort`, mapped to `reasoning_effort`"),
    "fine-grained-tool-streaming-2025-05-14": ("dropped", "tool input streams as the provider sends it"),
    "token-efficient-tools-2025-02-19": ("dropped", "an Anthropic tool-use format"),
}
"""``anthropic-beta`` values Claude Code 2.1.x sends, and their fate on a translated route (the header itself goes
only to a native endpoint: a passthrough carries every value as sent)."""

OTHER_BETA: tuple[Fate, str] = ("dropped", "only Anthropic's servers act on a beta switch")

REFUSED_FIELDS: tuple[str, ...] = tuple(name for name, (fate, _) in FIELD_FATES.items() if fate == "refused")


def fates_markdown() -> str:
    """The two tables of docs/gateway.md ("What a translation does with each field"), from :data:`FIELD_FATES`
    and :data:`BETA_FATES`."""
    lines = ["| field | fate | how, or why |", "|---|---|---|"]
    lines += [f"| `{name}` | {fate} | {how} |" for name, (fate, how) in FIELD_FATES.items()]
    lines.append(f"| any other | {OTHER_FIELD[0]} | {OTHER_FIELD[1]} |")
    lines += ["", "| `anthropic-beta` value | fate | how, or why |", "|---|---|---|"]
    lines += [f"| `{name}` | {fate} | {how} |" for name, (fate, how) in BETA_FATES.items()]
    lines.append(f"| any other | {OTHER_BETA[0]} | {OTHER_BETA[1]} |")
    return "\n".join(lines) + "\n"
