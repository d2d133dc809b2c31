"""Every Anthropic Messages field and ``anthropic-beta`` value has one documented fate on a translated route (issue 38):
the code's table (wire/anthropic_fates.py) covers every request field, docs/gateway.md holds exactly that table, and
the translator does what the table says — on the recorded body of Claude Code 2.1.x among others."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tailgate.wire.anthropic import MessagesRequest, decode_messages
from tailgate.wire.anthropic_fates import BETA_FATES, FIELD_FATES, REFUSED_FIELDS, fates_markdown
from tailgate.wire.anthropic_translate import to_chat_request
from tailgate.wire.errors import WireError
from tailgate.wire.types import encode

ROOT = Path(__file__).resolve().parents[2]
CLAUDE_CODE = json.loads((Path(__file__).parent / "claude_code_2_1_request.json").read_text())
BEGIN, END = "<!-- anthropic-fates:begin -->\n", "<!-- anthropic-fates:end -->"
BASE: dict[str, Any] = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
SAMPLE: dict[str, Any] = {
    "system": "s",
    "stream": True,
    "stop_sequences": ["x"],
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 5,
    "metadata": {"user_id": "u"},
    "tools": [{"name": "t", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"},
    "thinking": {"type": "adaptive"},
    "output_config": {"effort": "low"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "cache_control": {"type": "ephemeral"},
    "mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "x"}],
    "container": "container_1",
    "output_format": {"type": "json_schema", "schema": {"type": "object"}},
    "service_tier": "auto",
    "inference_geo": "us",
    "speed": "fast",
    "diagnostics": {"trace": True},
    "user_profile_id": "p",
    "workspace_id": "w",
}
"""A value for each optional field, to translate one at a time."""


def _chat(body: dict[str, Any], switch: Any = "thinking") -> dict[str, Any]:
    req = decode_messages(msgspec.json.encode(body), strict=False)
    out: dict[str, Any] = msgspec.json.decode(encode(to_chat_request(req, thinking_switch=switch)))
    return out


def test_every_request_field_has_a_fate() -> None:
    """The table names each field of the request type, no more and no fewer: a new field needs a decided fate."""
    assert set(FIELD_FATES) == set(MessagesRequest.__struct_fields__)
    assert set(SAMPLE) | set(BASE) == set(FIELD_FATES)


def test_the_docs_hold_the_codes_table() -> None:
    """docs/gateway.md's fate tables are exactly what the code renders (so the page cannot drift from the code)."""
    text = (ROOT / "docs" / "gateway.md").read_text()
    assert BEGIN in text, "docs/gateway.md lost its anthropic-fates markers"
    written = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert written == fates_markdown()


@pytest.mark.parametrize("name", sorted(SAMPLE))
def test_the_translator_does_what_the_table_says(name: str) -> None:
    """A refused field is a 400 naming it; a dropped one is absent from the chat request; the rest translate."""
    fate = FIELD_FATES[name][0]
    body = {**BASE, name: SAMPLE[name]}
    if fate == "refused":
        with pytest.raises(WireError) as err:
            _chat(body)
        assert err.value.param == name
        return
    for switch in ("thinking", "reasoning_effort"):
        chat = _chat(body, switch)
        if fate == "dropped":
            assert chat == _chat(BASE, switch)
    if fate != "dropped":  # effort is said only where the switch is reasoning_effort
        assert chat != _chat(BASE, "reasoning_effort")


def test_refused_fields_are_the_tables() -> None:
    """The translator refuses the fields the table marks refused, and context-management edits are not among them."""
    assert set(REFUSED_FIELDS) == {"mcp_servers", "container", "output_format"}
    assert FIELD_FATES["context_management"][0] == "dropped"


def test_claude_codes_betas_each_have_a_fate() -> None:
    """Every anthropic-beta value Claude Code 2.1.x sends (the recorded headers) is in the table."""
    sent = CLAUDE_CODE["headers"]["anthropic-beta"].split(",")
    assert set(sent) <= set(BETA_FATES)


@pytest.mark.parametrize(
    ("switch", "want"),
    [
        ("reasoning_effort", {"reasoning_effort": "high"}),
        ("thinking", {"thinking": {"type": "enabled"}}),
        ("enable_thinking", {"enable_thinking": True}),
        ("chat_template_kwargs", {"chat_template_kwargs": {"enable_thinking": True}}),
        ("none", {}),
    ],
)
def test_claude_codes_request_translates(switch: str, want: dict[str, Any]) -> None:
    """Claude Code's recorded body translates for every thinking switch: adaptive thinking turns the provider's
    switch on, effort high becomes reasoning_effort high, context_management and cache_control are gone, all 20
    tools are function tools, metadata.user_id is the chat user."""
    body = CLAUDE_CODE["body"]
    chat = _chat(body, switch)
    switches = {"reasoning_effort", "thinking", "enable_thinking", "chat_template_kwargs"}
    assert {k: v for k, v in chat.items() if k in switches} == want
    assert len(chat["tools"]) == 20
    assert all(t["type"] == "function" for t in chat["tools"])
    assert chat["user"] == body["metadata"]["user_id"]
    assert chat["max_tokens"] == 32000
    assert chat["stream_options"] == {"include_usage": True}
    assert "cache_control" not in json.dumps(chat)
    assert "context_management" not in chat
    assert chat["messages"][0]["role"] == "system"
    assert chat["messages"][0]["content"].startswith("You are Claude Code")
