"""The gateway's Anthropic Messages API route (``POST /v1/messages``): what differs from chat, in one place.

It is routed like chat, through the same request path (proxy.py) (same keys, aliases, policies, breakers, pacing,
retries before the first token, key admission, books). Per attempt, the route's provider decides the mode:

* **passthrough** — the provider has a native Anthropic endpoint (``anthropic_base_url``, its own pool:
  ``ProviderState.anthropic_client``): the client's body goes to ``<anthropic_base_url>/v1/messages`` with
  only ``model`` replaced by the route's, ``anthropic-version`` / ``anthropic-beta`` passed on, and the answer
  (body or event stream) comes back as the provider sent it. Thinking blocks, signatures, ``cache_control``
  and tool-use blocks are untouched. The measurement core reads Anthropic's events (upstream/_relay.py).
* **translation** — any other provider: the request is decoded (a field the gateway does not know is dropped;
  each field's fate: ``wire.anthropic_fates``) and translated to OpenAI chat (``wire.anthropic_translate``), sent to
  ``/chat/completions``, and the answer translated back: a whole message, or the event sequence built one
  chunk at a time (``wire.anthropic_stream.StreamTranslator``), pulled, not pushed, since every frame is
  rewritten.

Errors are in Anthropic's shape (``{"type": "error", "error": {"type", "message"}}``), the gateway's own
refusals included, with the status kept (a 503 — the upstream attempt cap, every provider drained — is
``overloaded_error`` with its Retry-After, which the SDK retries like a 529; shedding is a 429
``rate_limit_error``). A failure after the first byte ends the stream with an ``error`` event (an upstream's
own error event in a passthrough is the last frame: nothing follows it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any, Literal, cast

import msgspec

from tailgate.gateway.api_handler import Attempt, Translator, register, uncarried_by
from tailgate.gateway.request_path import client_headers
from tailgate.gateway.request_path.estimate import token_estimate
from tailgate.upstream import ANTHROPIC, OPENAI
from tailgate.wire import anthropic as wire
from tailgate.wire import errors as wire_errors
from tailgate.wire import parse_json
from tailgate.wire.anthropic_stream import StreamTranslator
from tailgate.wire.anthropic_translate import THINKING_SWITCHES, ThinkingSwitch, to_chat_request, to_message
from tailgate.wire.errors import WireError
from tailgate.wire.types import encode

if TYPE_CHECKING:
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.routing import Route
    from tailgate.upstream import CallResult, UpstreamClient
    from tailgate.wire.anthropic import MessagesRequest

__all__ = [
    "API",
    "COUNT_PATH",
    "PATH",
    "Messages",
    "MessagesApi",
    "Translated",
    "error_body",
    "error_event",
    "forward_headers",
    "mode",
]

PATH = "/messages"
"""Under ``/v1``, as the SDK and Claude Code call it."""
COUNT_PATH = "/messages/count_tokens"
"""Under ``/v1``: served by forwarding to a native endpoint of the alias (gateway/apis/count_tokens.py)."""
UPSTREAM_PATH = "/v1/messages"
"""Under a provider's ``anthropic_base_url`` (DeepSeek's ``…/anthropic``, Bailian's ``…/apps/anthropic``)."""

Mode = Literal["passthrough", "translation"]


def mode(anthropic_client: UpstreamClient | None) -> Mode:
    """A provider with a native endpoint is passed through to; any other is translated to."""
    return "passthrough" if anthropic_client is not None else "translation"


def forward_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's ``anthropic-version`` (else the API's only one) and ``anthropic-beta``, for a native endpoint,
    each checked (client_headers.py: a 400 naming a header that fails)."""
    return client_headers.anthropic_forward(headers, wire.API_VERSION)


def error_body(err: WireError, request_id: str | None = None) -> bytes:
    return wire.error_body(err, request_id)


def error_event(err: WireError) -> bytes:
    return wire.error_event(err)


class Messages:
    """One ``/v1/messages`` request as the proxy holds it: its head (model, max_tokens, stream), checked on
    arrival; its full decoding and translation, made once on the first attempt that needs them."""

    __slots__ = ("_chat", "_request", "body", "forward", "head", "model", "obj", "stream", "wants_usage")

    def __init__(self, body: bytes, obj: dict[str, Any], headers: Mapping[str, str]) -> None:
        self.body = body
        self.obj = obj
        self.head = head = wire.head_of(obj, body)  # 400 naming model / max_tokens when missing
        self.model = head.model
        self.stream = bool(head.stream)
        self.wants_usage = True  # usage is always part of Anthropic's stream, never dropped
        self.forward = forward_headers(headers)
        self._request: MessagesRequest | None = None
        self._chat: dict[str, dict[str, Any]] = {}  # by thinking switch

    def request(self) -> MessagesRequest:
        """The request decoded for a translation: a field the gateway does not know is dropped there (it cannot be
        said in chat; wire/anthropic_fates.py), never a 400 — a passthrough route carries it as sent."""
        if self._request is None:
            self._request = wire.decode_messages(self.body, strict=False)
        return self._request

    def uncarried(self, native: UpstreamClient | None, thinking_switch: str = "thinking") -> WireError | None:
        """Why a route to a provider (``native``: its Anthropic endpoint, if any) cannot carry this request, or None
        when it can: a passthrough carries anything; a translation cannot carry a ``refused`` field or block (the
        400 it would answer). The translation is made here once and kept for the attempt (no second decode)."""
        if native is not None:
            return None
        try:
            self._translation(thinking_switch)
        except WireError as err:
            return err
        return None

    def _translation(self, thinking_switch: str) -> tuple[MessagesRequest, dict[str, Any]]:
        req = self.request()
        switch = cast("ThinkingSwitch", thinking_switch if thinking_switch in THINKING_SWITCHES else "thinking")
        made = self._chat.get(switch)
        if made is None:
            made = self._chat[switch] = msgspec.to_builtins(to_chat_request(req, thinking_switch=switch))
        return req, made

    def attempt(
        self,
        client: UpstreamClient,
        native: UpstreamClient | None,
        model: str,
        thinking_switch: str = "thinking",
        top_k: bool = False,
        drop_fields: frozenset[str] = frozenset(),
    ) -> Attempt:
        """The attempt at a route whose upstream model is ``model``: to ``native`` (passthrough) when the
        provider has one, else to ``client`` translated (its reasoning switched by ``thinking_switch``: the
        provider's ``thinking_switch``). A 400 ``WireError`` naming the field when the request cannot be
        translated. ``top_k``: whether the provider's chat API takes ``top_k`` (its preset says so); if not, a
        translated request goes without it — OpenAI's chat API has no such field and a strict upstream refuses it
        with a 400, while it is only a sampling hint (Claude Code does not send it). ``drop_fields``: the chat fields
        the provider refuses (``providers.NAME.drop_fields``), left out too."""
        if native is not None:
            payload = self.obj if self.obj.get("model") == model else {**self.obj, "model": model}
            return Attempt(native, UPSTREAM_PATH, payload, ANTHROPIC, self.forward, upstream_api="anthropic")
        req, made = self._translation(thinking_switch)
        chat = {**made, "model": model}
        if not top_k:
            chat.pop("top_k", None)
        for name in drop_fields & chat.keys():  # the provider refuses them (providers.NAME.drop_fields)
            del chat[name]
        translated = Translated(model, req.stop_sequences)
        return Attempt(client, "/chat/completions", chat, OPENAI, None, translated, upstream_api="openai")


class Translated:
    """A translated attempt's answer back into Anthropic's shape: a whole message (``message``), or the stream
    one chat frame at a time (``chunk``), its end (``done``) and a failure after it began (``fail``)."""

    __slots__ = ("_stream", "model", "stop_sequences")

    def __init__(self, model: str, stop_sequences: list[str] | None) -> None:
        self.model = model
        self.stop_sequences = stop_sequences
        self._stream = StreamTranslator(model=model, stop_sequences=stop_sequences)

    def message(self, raw: bytes) -> bytes:
        """A chat completion's body → the message's (a 502 ``WireError`` when it cannot be translated)."""
        try:
            body = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            raise WireError(502, "The upstream answer is not JSON.", type="api_error") from None
        if not isinstance(body, dict):
            raise WireError(502, "The upstream answer is not a chat completion.", type="api_error")
        return encode(to_message(body, model=self.model, stop_sequences=self.stop_sequences))

    def chunk(self, raw: bytes) -> bytes:
        """One SSE frame of the chat stream → the Anthropic events it makes (often none, or several)."""
        payload = _data(raw)
        if payload is None:
            return b""
        try:
            obj = msgspec.json.decode(payload)
        except msgspec.DecodeError:
            return b""  # the measurement core already failed the call on a malformed frame
        if not isinstance(obj, dict):
            return b""
        return b"".join(self._stream.feed(obj))

    def done(self) -> bytes:
        return b"".join(self._stream.finish())

    def fail(self, err: WireError) -> bytes:
        return b"".join(self._stream.fail(err))


def _data(raw: bytes) -> bytes | None:
    """The ``data`` of one SSE frame (several ``data:`` lines joined by a newline); None for a comment."""
    if raw.startswith(b"data: ") and raw.count(b"\n") == 2 and b"\r" not in raw:
        return raw[6:-2]
    lines = [
        line[5:].removeprefix(b" ")
        for line in raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        if line.startswith(b"data:")
    ]
    return b"\n".join(lines) if lines else None


class MessagesApi:
    """The ``/v1/messages`` handler (gateway/api_handler.py; see the module docstring)."""

    name = "messages"
    path = PATH
    protocol = "anthropic"
    affinity = True
    judged = False

    def decode(self, body: bytes, headers: Mapping[str, str]) -> Messages:
        obj = parse_json(body)
        if not isinstance(obj, dict):
            raise wire_errors.invalid_request("The request body must be a JSON object.")
        return Messages(body, obj, headers)

    def model_of(self, body: bytes) -> str:
        model = parse_json(body).get("model")
        return model if isinstance(model, str) else "-"

    def estimate(self, req: Messages, body: bytes, default_max_tokens: int) -> tuple[float, float]:
        return token_estimate(req.obj, body, default_max_tokens)

    def uncarried(self, req: Messages, routes: Sequence[Route], providers: Mapping[str, ProviderState]) -> Set[str]:
        return uncarried_by(routes, providers, lambda p: req.uncarried(p.anthropic_client, p.config.thinking_switch))

    def plan(self, req: Messages, provider: ProviderState, route: Route) -> Attempt:
        # passthrough or translation, by the provider (a 400 if untranslatable)
        config = provider.config
        return req.attempt(
            provider.client,
            provider.anthropic_client,
            route.model,
            config.thinking_switch,
            config.top_k,
            config.drop_fields,
        )

    def error_body(self, err: WireError, request_id: str) -> bytes:
        return wire.error_body(err, request_id)  # Anthropic's shape, whoever refused

    def error_frame(self, err: WireError, result: CallResult, translated: Translator | None) -> bytes:
        if translated is not None:
            return translated.fail(err)  # nothing when the upstream's own error already ended it
        # A passthrough: the upstream's own error event, already relayed, is the stream's last frame.
        return b"" if result.error_class == "stream_error" else wire.error_event(err)


API = register(MessagesApi())
