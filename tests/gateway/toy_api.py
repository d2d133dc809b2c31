"""A sixth API, as a newcomer would add one: this module alone (gateway/api_handler.py's protocol, one ``register``).

``POST /v1/toy/say``: ``{"model", "say", "stream"?}`` in, ``{"toy": "<the answer>"}`` out (or ``data: <text>``
lines, then ``data: end``); spoken upstream as OpenAI chat (the OpenAI dialect: the measurement core counts its
tokens and usage), the answer turned back by a translator; its errors are ``{"toy_error": ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any

import msgspec

from tailgate.gateway.api_handler import Attempt, Translator
from tailgate.gateway.request_path.estimate import token_estimate
from tailgate.upstream import OPENAI
from tailgate.wire import errors as wire_errors
from tailgate.wire import parse_json
from tailgate.wire.errors import WireError

if TYPE_CHECKING:
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.routing import Route
    from tailgate.upstream import CallResult


class ToyRequest:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.model: str = obj["model"]
        self.stream = obj.get("stream") is True
        self.wants_usage = False


class ToyTranslator:
    """A chat completion (or its stream) → the toy's answer."""

    def message(self, raw: bytes) -> bytes:
        body = msgspec.json.decode(raw)
        return msgspec.json.encode({"toy": body["choices"][0]["message"]["content"]})

    def chunk(self, raw: bytes) -> bytes:
        data = raw.removeprefix(b"data: ").strip()
        choices = msgspec.json.decode(data).get("choices") or [{}]
        text = (choices[0].get("delta") or {}).get("content")
        return b"data: " + msgspec.json.encode(text) + b"\n\n" if text else b""

    def done(self) -> bytes:
        return b"data: end\n\n"

    def fail(self, err: WireError) -> bytes:
        return b"data: " + msgspec.json.encode({"toy_error": err.message}) + b"\n\n"


class ToyApi:
    name = "toy"
    path = "/toy/say"
    protocol = "openai"
    affinity = False
    judged = False

    def decode(self, body: bytes, headers: Mapping[str, str]) -> ToyRequest:
        obj = parse_json(body)
        if not isinstance(obj, dict) or not isinstance(obj.get("model"), str) or not isinstance(obj.get("say"), str):
            raise wire_errors.invalid_request("A toy request is {'model': str, 'say': str}.")
        return ToyRequest(obj)

    def model_of(self, body: bytes) -> str:
        return str(parse_json(body).get("model", "-"))

    def estimate(self, req: ToyRequest, body: bytes, default_max_tokens: int) -> tuple[float, float]:
        return token_estimate({"max_tokens": 16}, body, default_max_tokens)

    def uncarried(self, req: ToyRequest, routes: Sequence[Route], providers: Mapping[str, ProviderState]) -> Set[str]:
        return set()  # every provider speaks chat

    def plan(self, req: ToyRequest, provider: ProviderState, route: Route) -> Attempt:
        chat = {
            "model": route.model,
            "messages": [{"role": "user", "content": req.obj["say"]}],
            "max_tokens": 16,
            "stream": req.stream,
        }
        return Attempt(provider.client, "/chat/completions", chat, OPENAI, translated=ToyTranslator())

    def error_body(self, err: WireError, request_id: str) -> bytes:
        return msgspec.json.encode({"toy_error": err.message, "status": err.status})

    def error_frame(self, err: WireError, result: CallResult, translated: Translator | None) -> bytes:
        assert translated is not None
        return translated.fail(err)


API = ToyApi()
