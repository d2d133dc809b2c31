"""The protocol an upstream speaks (its *dialect*): what a call sends and how it reads a stream's named events.

A caller says which dialect an endpoint speaks (the gateway's API handler for a route's provider, bench's
``--api``, the monitor's target); the call never guesses it from the URL. A dialect decides three things:

* whether the usage chunk is asked for on the client's behalf (``stream_options.include_usage``: chat and
  completions; the Responses API and Anthropic's always send usage, and a strict upstream refuses the field);
* whether the API key also goes as ``x-api-key`` (Anthropic's endpoints read that header, some only that one);
* how a stream's *events* are measured (:class:`Events`): chat chunks are read by the relay itself
  (upstream/_relay.py), a frame without ``choices`` is handed to the dialect's reader, which knows its event
  names (the tables live here and in ``wire``, never in the relay).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tailgate.wire.anthropic import ANSWER_DELTAS as ANTHROPIC_ANSWER_DELTAS
from tailgate.wire.anthropic import TOKEN_DELTAS as ANTHROPIC_TOKEN_DELTAS
from tailgate.wire.responses import ANSWER_EVENTS, ERROR_EVENTS, FIRST_TOKEN_EVENTS, TERMINAL_EVENTS

__all__ = ["ANTHROPIC", "END", "OPENAI", "RESPONSES", "Dialect", "Events", "Meter"]

END = -2
"""What an event reader answers for an event that completes the stream (``message_stop``, ``response.completed``)."""


class Meter(Protocol):
    """What an event reader fills in (the call's measurement state, ``Call``)."""

    def _token(self, now: float, answer: bool) -> None: ...

    def _take_usage(self, usage: Any) -> None: ...

    def _merge_usage(self, usage: Any, *, output: bool) -> None: ...


class Events(Protocol):
    """How a dialect's stream events are measured. ``names``: event names read at once from an ``event:`` line
    (the relay's fast path); ``failed``: the event types that fail the stream (``stream_error``). ``event``
    measures one event (a decoded ``EventFrame`` whose type is ``kind``) and answers its token count (0 or 1)
    or ``END``."""

    names: frozenset[bytes]
    failed: frozenset[str]

    def event(self, meter: Meter, event: Any, kind: str | None, now: float) -> int: ...


class _ChatEvents:
    """OpenAI chat and completions: every frame is a chunk; an event-shaped frame carries nothing."""

    __slots__ = ()
    names: frozenset[bytes] = frozenset()
    failed = frozenset({"error"})

    def event(self, meter: Meter, event: Any, kind: str | None, now: float) -> int:
        return 0


class _ResponsesEvents:
    """The Responses API: output deltas are tokens; ``response.completed`` / ``incomplete`` end the stream with
    its usage (there is no ``[DONE]``)."""

    __slots__ = ()
    names: frozenset[bytes] = frozenset()
    failed = ERROR_EVENTS

    def event(self, meter: Meter, event: Any, kind: str | None, now: float) -> int:
        if kind in TERMINAL_EVENTS:
            if event.response is not None and event.response.usage is not None:
                meter._take_usage(event.response.usage)
            return END
        if kind in FIRST_TOKEN_EVENTS:
            meter._token(now, kind in ANSWER_EVENTS)
            return 1
        return 0


_ANTHROPIC_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
    }
)
"""Anthropic's Messages API stream events (``error`` is every protocol's error event)."""


class _AnthropicEvents:
    """Anthropic's Messages API: a ``content_block_delta`` of text, thinking or tool input is a token (thinking is
    not an answer token; a ``signature_delta`` is neither), usage comes from ``message_start`` (input) and
    ``message_delta`` (output), merged, and ``message_stop`` ends the stream."""

    __slots__ = ()
    names = frozenset(name.encode() for name in _ANTHROPIC_EVENTS)
    failed = frozenset({"error"})

    def event(self, meter: Meter, event: Any, kind: str | None, now: float) -> int:
        if kind == "content_block_delta":
            delta = event.delta
            dtype = delta.get("type") if isinstance(delta, dict) else None
            if dtype in ANTHROPIC_TOKEN_DELTAS:
                meter._token(now, dtype in ANTHROPIC_ANSWER_DELTAS)
                return 1
            return 0
        if kind == "message_stop":
            return END
        if kind not in _ANTHROPIC_EVENTS:
            return 0
        start = kind == "message_start"
        usage = event.message.usage if start and event.message is not None else event.usage
        if usage is not None:
            meter._merge_usage(usage, output=not start)
        return 0


@dataclass(frozen=True, slots=True)
class Dialect:
    """One upstream protocol (see the module docstring)."""

    name: str
    injects_usage: bool
    """A stream asks for ``stream_options.include_usage`` on the client's behalf (its usage chunk is dropped)."""
    api_key_header: bool
    """The API key goes as ``x-api-key`` too."""
    events: Events


OPENAI = Dialect("openai", injects_usage=True, api_key_header=False, events=_ChatEvents())
"""OpenAI's chat, completions and embeddings endpoints (and every OpenAI-compatible server)."""
RESPONSES = Dialect("responses", injects_usage=False, api_key_header=False, events=_ResponsesEvents())
"""OpenAI's Responses API (``/responses``)."""
ANTHROPIC = Dialect("anthropic", injects_usage=False, api_key_header=True, events=_AnthropicEvents())
"""Anthropic's Messages API (``/v1/messages``, ``/v1/messages/count_tokens``)."""
