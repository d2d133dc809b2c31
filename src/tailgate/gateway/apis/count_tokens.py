"""``POST /v1/messages/count_tokens``: the caller's key, then the alias's first native Anthropic endpoint counts.

Beside the messages API (gateway/apis/messages.py) and the request path of proxy.py, not on it: a count
generates nothing, so it reserves no tokens or budget, writes no ledger row and takes no pacer, breaker or retry;
it asks the key what a generation asks (standing, then ``rpm``, after the checks that refuse it for good) and is
counted in ``tailgate_count_tokens_total``."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tailgate.gateway.apis import messages as anthropic
from tailgate.gateway.http.exchange import Exchange, Reply
from tailgate.gateway.request_path import client_headers
from tailgate.gateway.request_path.request_context import Ctx
from tailgate.upstream import ANTHROPIC, Body, call
from tailgate.wire import errors as wire_errors
from tailgate.wire import parse_json
from tailgate.wire.anthropic import decode_count_tokens
from tailgate.wire.errors import WireError

if TYPE_CHECKING:
    from tailgate.gateway.request_path.core import Core


class CountTokens:
    """The count_tokens handler over the gateway's owners; ``check_key`` is the proxy's key standing check."""

    def __init__(self, core: Core, check_key: Callable[[Ctx], None], ids: random.Random) -> None:
        self.core = core
        self._check_key = check_key
        self._ids = ids

    async def handle(self, request: Exchange) -> Reply:
        """``POST /v1/messages/count_tokens``: the caller's key, the alias, then the first route in the policy's
        order whose provider has a native Anthropic endpoint answers (the request forwarded, ``model`` replaced).
        No provider of the alias has one: a 404 saying so (a translation has no way to count). The key must be
        valid, not revoked, not expired and allowed the alias, and the request counts against its ``rpm``; it
        reserves no tokens or budget and writes no ledger row (it generates nothing). Counted in
        ``tailgate_count_tokens_total``; errors in Anthropic's shape."""
        refused: WireError | None = None
        try:
            rid = client_headers.request_id(request.headers) or f"{self._ids.getrandbits(128):032x}"
        except WireError as err:  # a client header that fails its check (client_headers.py)
            rid, refused = f"{self._ids.getrandbits(128):032x}", err
        headers = {"x-request-id": rid}
        alias, served_by = "", ""
        reply: Reply | None = None
        try:
            if refused is not None:
                raise refused
            reply = await self._count(request, rid, headers)
            served_by = reply.headers.get("x-tailgate-provider", "")
            return reply
        except WireError as err:
            reply = Reply(err.status, {**(err.headers or {}), **headers}, anthropic.error_body(err, rid))
            return reply
        finally:
            with contextlib.suppress(WireError):
                alias = decode_count_tokens(request.body, strict=False).model
            if alias not in self.core.routes.aliases:
                alias = ""  # an unknown alias is the client's text: not a metric label
            status = str(reply.status) if reply is not None else "500"
            self.core.metrics.count_tokens.labels(alias=alias, provider=served_by, status=status).inc()

    async def _count(self, request: Exchange, rid: str, headers: dict[str, str]) -> Reply:
        core = self.core
        key_id = core.keys.identify(request)  # 401: missing, wrong or revoked
        obj = parse_json(request.body)
        if not isinstance(obj, dict):
            raise wire_errors.invalid_request("The request body must be a JSON object.")
        model = decode_count_tokens(request.body, strict=False).model
        table = core.routes
        routes = table.aliases.get(model)
        if routes is None:
            raise wire_errors.model_not_found(model)
        if key_id is not None:
            check = Ctx(request_id=rid, endpoint="messages", table=table, protocol="anthropic")
            check.key_id, check.alias = key_id, model
            self._check_key(check)  # expired, model not allowed
        now = time.monotonic()
        exclude = {name for name, p in core.providers.items() if p.drained or p.paused(now)}
        order = table.policy_for(model).order(routes, client_headers.traffic_class(request.headers), exclude)
        native = [(r, p) for r in order if (p := core.providers[r.provider]).anthropic_client is not None]
        if not native:
            raise WireError(
                404,
                f"No provider of '{model}' serves count_tokens: it needs a native Anthropic endpoint "
                "(anthropic_base_url); the others are reached by translation to OpenAI chat.",
                type="not_found_error",
            )
        if key_id is not None and (rpm := core.keys.rpm(key_id)) is not None:
            # after the checks that refuse it for good: a refusal of ours keeps nothing (docs/keys.md)
            await core.fleet.admit_key(key_id, rpm)  # 429 with Retry-After over the key's rpm
        route, provider = native[0]
        client = provider.anthropic_client
        assert client is not None
        payload = {**obj, "model": route.model}
        async with call(
            client,
            anthropic.UPSTREAM_PATH + "/count_tokens",
            payload,
            stream=False,
            request_id=rid,
            headers=anthropic.forward_headers(request.headers),
            dialect=ANTHROPIC,
        ) as c:
            async for event in c:
                if isinstance(event, Body):
                    return Reply(200, {**headers, "x-tailgate-provider": provider.name}, event.raw)
        result = c.result
        assert result is not None
        raise result.error or WireError(502, f"count_tokens at {provider.name} failed ({result.error_class}).")
