"""What OpenAI's request APIs (chat, completions, embeddings, responses) share as handlers (gateway/api_handler.py).

Each is decoded and validated by its typed wire struct (``wire.types.decode_request``: a 400 naming the field;
unknown fields are skipped, not kept), then read once as a JSON object, which is what goes upstream with only
``model`` replaced and the provider's ``drop_fields`` left out (docs/gateway.md, "Fields the gateway does not
know"). The upstream path is the client's. Errors are OpenAI's shape; a stream failing after its first byte ends
with an SSE ``error`` event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any

import msgspec

from tailgate.gateway.api_handler import Attempt, Translator
from tailgate.gateway.request_path.estimate import token_estimate
from tailgate.upstream import OPENAI, Dialect
from tailgate.wire import parse_json
from tailgate.wire.types import RequestKind, decode_request, request_decoder

if TYPE_CHECKING:
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.routing import Route
    from tailgate.upstream import CallResult
    from tailgate.wire.errors import WireError

__all__ = ["OpenAIApi", "OpenAIRequest"]

_NONE: frozenset[str] = frozenset()
_EMPTY: Mapping[str, Any] = {}
_TIER = frozenset({"service_tier"})


class OpenAIRequest(msgspec.Struct):
    """One OpenAI-shaped request: its typed head read on arrival; ``obj``, the body as a JSON object, read by
    the estimate — after the key's standing, as ever: typed decoding skips unknown fields, which may hold bad
    UTF-8 (a 400 then, but only for a caller allowed to ask). A struct: made in C, no ``__init__`` frame."""

    model: str
    stream: bool
    wants_usage: bool
    obj: Mapping[str, Any]


class OpenAIApi:
    """An OpenAI request API at ``path`` whose body decodes as ``kind`` (see the module docstring)."""

    protocol = "openai"

    def __init__(
        self,
        name: str,
        path: str,
        kind: RequestKind,
        *,
        dialect: Dialect = OPENAI,
        generates: bool = True,
        judged: bool = False,
    ) -> None:
        self.name = name
        self.path = path
        self.kind: RequestKind = kind
        self._decode = request_decoder(kind).decode
        self.dialect = dialect
        self.generates = generates
        self.affinity = generates  # a prompt cache to keep warm: not for embeddings
        self.judged = judged

    def decode(self, body: bytes, headers: Mapping[str, str]) -> OpenAIRequest:
        req = self._decode(body, strict=False)
        options = getattr(req, "stream_options", None)
        # Responses: a dict, never injected (and usage always comes with its end)
        return OpenAIRequest(
            req.model, bool(getattr(req, "stream", False)), bool(getattr(options, "include_usage", False)), _EMPTY
        )

    def model_of(self, body: bytes) -> str:
        return decode_request(self.kind, body, strict=False).model

    def estimate(self, req: OpenAIRequest, body: bytes, default_max_tokens: int) -> tuple[float, float]:
        req.obj = obj = parse_json(body)
        return token_estimate(obj, body, default_max_tokens, generates=self.generates)

    def uncarried(
        self, req: OpenAIRequest, routes: Sequence[Route], providers: Mapping[str, ProviderState]
    ) -> Set[str]:
        return _NONE  # every provider speaks it

    def plan(self, req: OpenAIRequest, provider: ProviderState, route: Route) -> Attempt:
        # Fields the gateway does not know go as sent: they are the provider's business; those the provider is
        # known to refuse (``drop_fields``) stay here (docs/gateway.md, "Fields the gateway does not know").
        cfg = provider.config
        drop = cfg.drop_fields
        obj = req.obj
        if obj.get("service_tier") == "flex" and not cfg.flex:  # the batch lane's mark, unknown to this provider
            drop = drop | _TIER
        if drop:
            payload = {k: v for k, v in obj.items() if k not in drop}
            payload["model"] = route.model
        else:
            payload = {**obj, "model": route.model}
        return Attempt(provider.client, self.path, payload, self.dialect)

    def error_body(self, err: WireError, request_id: str) -> bytes:
        return err.body()

    def error_frame(self, err: WireError, result: CallResult, translated: Translator | None) -> bytes:
        return err.sse_frame()
