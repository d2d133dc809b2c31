"""Anthropic Messages ↔ OpenAI chat, for providers that serve only OpenAI chat. Pure: no I/O.

Three pieces, each a function of its input alone:

* :func:`to_chat_request` — a ``/v1/messages`` request as a ``/v1/chat/completions`` request;
* :func:`to_message` — a chat completion as a ``message``;
* :class:`~tailgate.wire.anthropic_stream.StreamTranslator` (its own module) — chat chunks in, Anthropic's
  event sequence out, incrementally.

What is chosen where Anthropic and OpenAI differ (docs/architecture.md, "Anthropic's Messages API"):

* ``system`` (a string or text blocks) becomes one leading ``system`` message, blocks joined by a blank line;
  a ``system`` turn among the messages (anthropic 2.17's ``SystemMessageParam``) stays a system message there;
  a turn's several text blocks become one string joined by a newline (every OpenAI-compatible server takes
  a string; not all take content parts), unless the turn has images (then content parts).
* A user turn's ``tool_result`` blocks become ``tool`` messages placed first (OpenAI wants them right after
  the assistant's ``tool_calls``), the rest of the turn a ``user`` message after them. A tool result's
  images cannot ride in a ``tool`` message: they move to that following ``user`` message. ``is_error``
  prefixes the result's text with ``Error:`` so the model still learns that the call failed.
* An assistant turn's ``thinking`` goes back as ``reasoning_content`` (DeepSeek and vLLM read it there),
  never as a content part; ``redacted_thinking`` is opaque to any other model and is dropped.
  ``cache_control`` is dropped: OpenAI-compatible providers cache prefixes by themselves.
* ``thinking`` switches the provider's reasoning on or off by the provider's own field
  (:data:`THINKING_SWITCHES`, ``thinking: {type, budget_tokens}`` by default — DeepSeek, Volcengine, Zhipu).
* ``output_config.effort`` becomes ``reasoning_effort`` where that is the provider's switch.
* Every top-level field's fate (carried, mapped, dropped, refused) is one table,
  :data:`~tailgate.wire.anthropic_fates.FIELD_FATES`; a field the gateway does not know is dropped.
  Refused with a 400 naming the field (this route cannot carry the request): ``document`` blocks, server tools
  (a versioned ``type``), ``mcp_servers``, ``container``, ``output_format`` / ``output_config.format``.
* Usage: OpenAI's ``prompt_tokens`` include cached ones; Anthropic's ``input_tokens`` do not, so
  ``input_tokens = prompt_tokens − cached`` and ``cache_read_input_tokens = cached``.
* A translated thinking block has no signature from the upstream: it starts with ``signature: ""``
  and closes with a ``signature_delta`` of ``""``, keeping the documented sequence (thinking deltas,
  then one signature delta, then the stop); a client that sends it back is told nothing false.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from tailgate.wire.anthropic import (
    CountTokensRequest,
    ImageBlock,
    Message,
    MessageResponse,
    MessagesRequest,
    OutputBlock,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from tailgate.wire.anthropic_fates import REFUSED_FIELDS
from tailgate.wire.errors import bad_gateway, invalid_request
from tailgate.wire.types import ChatCompletionRequest, ChatMessage, FunctionCall, StreamOptions, ToolCall

__all__ = [
    "THINKING_SWITCHES",
    "ThinkingSwitch",
    "message_id",
    "prompt_text",
    "reasoning_text",
    "stop_reason",
    "to_chat_request",
    "to_message",
    "tool_choice_to_openai",
    "tools_to_openai",
    "usage_from_chat",
]

ThinkingSwitch = Literal["thinking", "enable_thinking", "chat_template_kwargs", "reasoning_effort", "none"]
THINKING_SWITCHES: tuple[str, ...] = ("thinking", "enable_thinking", "chat_template_kwargs", "reasoning_effort", "none")
"""How an upstream switches reasoning: ``thinking: {type, budget_tokens}`` (DeepSeek, Volcengine, Zhipu),
``enable_thinking`` + ``thinking_budget`` (DashScope, SiliconFlow), ``chat_template_kwargs.enable_thinking``
(vLLM / SGLang serving Qwen3 or DeepSeek), ``reasoning_effort`` (OpenAI's o-series: ``none`` / ``medium``),
or ``none`` (the model thinks or not by itself; the request's choice is not sent)."""

_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
"""Anthropic's ``output_config.effort`` as OpenAI's ``reasoning_effort`` (OpenAI's highest is ``high``)."""


# ---- request -------------------------------------------------------------------------------------


def _system_text(system: str | list[TextBlock] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system or None
    return "\n\n".join(block.text for block in system) or None


def _image_part(block: ImageBlock, where: str) -> dict[str, Any]:
    source = block.source
    kind = source.get("type")
    if kind == "base64" and isinstance(source.get("data"), str) and isinstance(source.get("media_type"), str):
        url = f"data:{source['media_type']};base64,{source['data']}"
    elif kind == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise invalid_request(
            f"image source type {kind!r} cannot be translated to OpenAI chat (base64 and url can).",
            f"{where}.source.type",
        )
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: ToolResultBlock, where: str, moved: list[dict[str, Any]]) -> ChatMessage:
    content = block.content
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        texts: list[str] = []
        for j, part in enumerate(content):
            if isinstance(part, TextBlock):
                texts.append(part.text)
            elif isinstance(part, ImageBlock):
                moved.append(_image_part(part, f"{where}.content.{j}"))
            else:
                raise invalid_request(
                    "document blocks cannot be translated to OpenAI chat.", f"{where}.content.{j}.type"
                )
        text = "\n".join(texts)
    if block.is_error:
        text = f"Error: {text}" if text else "Error"
    return ChatMessage(role="tool", tool_call_id=block.tool_use_id, content=text)


def _user_turn(msg: Message, where: str) -> list[ChatMessage]:
    if isinstance(msg.content, str):
        return [ChatMessage(role="user", content=msg.content)]
    tools: list[ChatMessage] = []
    parts: list[dict[str, Any]] = []
    moved: list[dict[str, Any]] = []
    for i, block in enumerate(msg.content):
        at = f"{where}.content.{i}"
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block, at))
        elif isinstance(block, ToolResultBlock):
            tools.append(_tool_result(block, at, moved))
        else:
            kind = type(block).__struct_config__.tag
            why = "cannot be translated to OpenAI chat" if kind == "document" else "is not allowed in a user turn"
            raise invalid_request(f"{kind} blocks {why}.", f"{at}.type")
    parts.extend(moved)
    out = list(tools)
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        content: str | list[dict[str, Any]] = "\n".join(p["text"] for p in parts) if only_text else parts
        out.append(ChatMessage(role="user", content=content))
    return out


def _assistant_turn(msg: Message, where: str) -> ChatMessage:
    if isinstance(msg.content, str):
        return ChatMessage(role="assistant", content=msg.content)
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(msg.content):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            thinking.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            arguments = msgspec.json.encode(block.input).decode()
            calls.append(
                ToolCall(id=block.id, type="function", function=FunctionCall(name=block.name, arguments=arguments))
            )
        elif type(block).__struct_config__.tag != "redacted_thinking":
            kind = type(block).__struct_config__.tag
            raise invalid_request(f"{kind} blocks are not allowed in an assistant turn.", f"{where}.content.{i}.type")
    return ChatMessage(
        role="assistant",
        content="\n".join(texts) if texts or not calls else None,
        tool_calls=calls or None,
        reasoning_content="".join(thinking) if thinking else None,
    )


def prompt_text(req: MessagesRequest | CountTokensRequest) -> str:
    """Every text the model reads, in the order a provider's template renders it (tool definitions,
    system, then the turns' text blocks, tool inputs and results): what a token estimate counts, and the
    prefix a provider's cache keys on — a coding agent resends the same tools and system every turn, so
    they lead and a later turn's prompt extends the earlier one's."""
    parts: list[str] = [
        tool.name + " " + (tool.description or "") + " " + msgspec.json.encode(tool.input_schema).decode()
        for tool in req.tools or ()
    ]
    if t := _system_text(req.system):
        parts.append(t)
    for msg in req.messages:
        if isinstance(msg.content, str):
            parts.append(msg.content)
            continue
        for block in msg.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ThinkingBlock):
                parts.append(block.thinking)
            elif isinstance(block, ToolUseBlock):
                parts.append(msgspec.json.encode(block.input).decode())
            elif isinstance(block, ToolResultBlock):
                if isinstance(block.content, str):
                    parts.append(block.content)
                elif block.content:
                    parts.extend(part.text for part in block.content if isinstance(part, TextBlock))
    return "\n".join(parts)


def _system_turn(msg: Message, where: str) -> ChatMessage:
    """A ``system`` turn inside the conversation stays a system message where it is (text only)."""
    if isinstance(msg.content, str):
        return ChatMessage(role="system", content=msg.content)
    texts: list[str] = []
    for i, block in enumerate(msg.content):
        if not isinstance(block, TextBlock):
            kind = type(block).__struct_config__.tag
            raise invalid_request(f"{kind} blocks are not allowed in a system turn.", f"{where}.content.{i}.type")
        texts.append(block.text)
    return ChatMessage(role="system", content="\n".join(texts))


def tools_to_openai(req: MessagesRequest | CountTokensRequest) -> list[dict[str, Any]] | None:
    """Client tools as OpenAI ``function`` tools; a server tool (a versioned ``type``) is a 400."""
    if not req.tools:
        return None
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(req.tools):
        if tool.type not in (None, "custom"):
            raise invalid_request(
                f"server tool {tool.type!r} cannot be translated to OpenAI chat (only client tools can).",
                f"tools.{i}.type",
            )
        function: dict[str, Any] = {"name": tool.name}
        if tool.description is not None:
            function["description"] = tool.description
        function["parameters"] = tool.input_schema if tool.input_schema is not None else {"type": "object"}
        out.append({"type": "function", "function": function})
    return out


def tool_choice_to_openai(choice: ToolChoice | None) -> tuple[str | dict[str, Any] | None, bool | None]:
    """``(tool_choice, parallel_tool_calls)``: auto → auto, any → required, tool → the named function,
    none → none; ``disable_parallel_tool_use`` → ``parallel_tool_calls: false``."""
    if choice is None:
        return None, None
    parallel = False if choice.disable_parallel_tool_use else None
    if choice.type == "tool":
        if not choice.name:
            raise invalid_request("tool_choice of type 'tool' needs a name.", "tool_choice.name")
        return {"type": "function", "function": {"name": choice.name}}, parallel
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type], parallel


def _thinking_fields(req: MessagesRequest, switch: ThinkingSwitch) -> dict[str, Any]:
    """The provider's thinking switch for ``thinking`` (adaptive and between_tools turn it on, as enabled does);
    with the ``reasoning_effort`` switch, ``output_config.effort`` sets its level (alone, too: Claude Code sends
    effort with adaptive thinking, and effort without thinking still says how hard to try)."""
    config = req.thinking
    effort = (req.output_config or {}).get("effort")
    on = config is None or config.type != "disabled"
    if switch == "reasoning_effort" and on and isinstance(effort, str) and effort in _EFFORT:
        return {"reasoning_effort": _EFFORT[effort]}
    if config is None or switch == "none":
        return {}
    on = config.type != "disabled"
    budget = config.budget_tokens if on else None
    if switch == "thinking":
        value: dict[str, Any] = {"type": "enabled" if on else "disabled"}
        if budget is not None:
            value["budget_tokens"] = budget
        return {"thinking": value}
    if switch == "enable_thinking":
        return {"enable_thinking": on, **({"thinking_budget": budget} if budget is not None else {})}
    if switch == "chat_template_kwargs":
        return {"chat_template_kwargs": {"enable_thinking": on}}
    return {"reasoning_effort": "medium" if on else "none"}


def to_chat_request(
    req: MessagesRequest,
    *,
    model: str | None = None,
    thinking_switch: ThinkingSwitch = "thinking",
) -> ChatCompletionRequest:
    """The chat request that asks an OpenAI-compatible provider what ``req`` asks; a 400 ``WireError``
    naming the field for anything that cannot be said in OpenAI chat. ``model`` replaces the request's
    (the route's upstream id). A stream asks for ``stream_options.include_usage``: ``message_delta``
    carries the usage."""
    for name in REFUSED_FIELDS:
        if getattr(req, name) is not None:
            raise invalid_request(f"{name} cannot be translated to OpenAI chat.", name)
    if req.output_config is not None and "format" in req.output_config:
        raise invalid_request("output_config.format cannot be translated to OpenAI chat.", "output_config.format")
    messages: list[ChatMessage] = []
    if (system := _system_text(req.system)) is not None:
        messages.append(ChatMessage(role="system", content=system))
    for i, msg in enumerate(req.messages):
        if msg.role == "user":
            messages.extend(_user_turn(msg, f"messages.{i}"))
        elif msg.role == "assistant":
            messages.append(_assistant_turn(msg, f"messages.{i}"))
        else:
            messages.append(_system_turn(msg, f"messages.{i}"))
    if not messages:
        raise invalid_request("messages: at least one message is required.", "messages")
    tool_choice, parallel = tool_choice_to_openai(req.tool_choice)
    fields: dict[str, Any] = _thinking_fields(req, thinking_switch)
    if req.stream:
        fields["stream"] = True
        fields["stream_options"] = StreamOptions(include_usage=True)
    return ChatCompletionRequest(
        model=model or req.model,
        messages=messages,
        max_tokens=req.max_tokens,
        stop=list(req.stop_sequences) if req.stop_sequences else None,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        user=req.metadata.user_id if req.metadata is not None else None,
        tools=tools_to_openai(req),
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        **fields,
    )


# ---- response ------------------------------------------------------------------------------------

_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use"}


def stop_reason(
    finish_reason: str | None, matched: object = None, stop_sequences: list[str] | None = None
) -> tuple[str, str | None]:
    """``(stop_reason, stop_sequence)`` for an OpenAI ``finish_reason``: stop → end_turn (stop_sequence
    when the upstream says which stop string matched — vLLM's and SGLang's ``stop_reason`` — and it is
    one of the request's), length → max_tokens, tool_calls → tool_use, content_filter → refusal."""
    if finish_reason == "stop" and isinstance(matched, str) and stop_sequences and matched in stop_sequences:
        return "stop_sequence", matched
    if finish_reason == "content_filter":
        return "refusal", None
    return _STOP.get(finish_reason or "stop", "end_turn"), None


def usage_from_chat(raw: object) -> Usage | None:
    """An OpenAI ``usage`` object as Anthropic's (cached input split out); None if it is not one."""
    if not isinstance(raw, dict):
        return None
    prompt = raw.get("prompt_tokens")
    output = raw.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(output, int):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not isinstance(cached, int):
        cached = raw.get("prompt_cache_hit_tokens")  # DeepSeek's own field
    cached = cached if isinstance(cached, int) and 0 <= cached <= prompt else 0
    return Usage(input_tokens=prompt - cached, output_tokens=output, cache_read_input_tokens=cached)


def message_id(upstream_id: object) -> str:
    """``msg_…`` from an upstream's ``chatcmpl-…`` id (clients show it; the gateway logs both)."""
    text = upstream_id if isinstance(upstream_id, str) and upstream_id else "unknown"
    return "msg_" + text.removeprefix("chatcmpl-")


def reasoning_text(obj: dict[str, Any]) -> str | None:
    """``reasoning_content`` (DeepSeek, DashScope, SGLang) or ``reasoning`` (vLLM ≥ 0.10, OpenRouter)."""
    for key in ("reasoning_content", "reasoning"):
        value = obj.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _tool_input(arguments: object, where: str) -> dict[str, Any]:
    if arguments in (None, ""):
        return {}
    try:
        value = msgspec.json.decode(arguments if isinstance(arguments, str) else "")
    except msgspec.DecodeError:
        value = None
    if not isinstance(value, dict):
        raise bad_gateway(f"The upstream's {where} is not a JSON object, so it cannot be a tool_use input.")
    return value


def to_message(body: dict[str, Any], *, model: str, stop_sequences: list[str] | None = None) -> MessageResponse:
    """A whole chat completion (parsed JSON) as a ``message``; ``model`` is what the client asked for.
    A body that is not a chat completion is a 502 (the upstream answered badly)."""
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    message = choice.get("message") if choice is not None else None
    if choice is None or not isinstance(message, dict):
        raise bad_gateway("The upstream's answer has no choices[0].message to translate.")
    content: list[OutputBlock] = []
    if (thought := reasoning_text(message)) is not None:
        content.append(ThinkingBlock(thinking=thought, signature=""))
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append(TextBlock(text=text))
    for i, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_gateway(f"The upstream's tool_calls.{i} has no function name.")
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"toolu_{i}"
        arguments = _tool_input(function.get("arguments"), f"tool_calls.{i}.function.arguments")
        content.append(ToolUseBlock(id=call_id, name=function["name"], input=arguments))
    reason, sequence = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"), stop_sequences)
    if reason == "end_turn" and any(isinstance(b, ToolUseBlock) for b in content):
        reason = "tool_use"  # some servers say "stop" after a tool call
    usage = usage_from_chat(body.get("usage")) or Usage(input_tokens=0, output_tokens=0)
    return MessageResponse(
        id=message_id(body.get("id")),
        model=model,
        content=content,
        stop_reason=reason,
        stop_sequence=sequence,
        usage=usage,
    )
