"""Client keys: stored as SHA-256 digests, compared in constant time; a per-key RPM (counted by gateway.fleet)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from aiohttp import web
from pydantic import SecretStr

from tailgate.config.schema import GatewayKeyConfig
from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def bearer(request: web.Request) -> str | None:
    """The bearer token of a request (``Authorization: Bearer X`` or OpenAI-style ``api-key: X``)."""
    auth = request.headers.get("Authorization")
    if auth is not None and auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("api-key")


@dataclass(slots=True)
class _Key:
    id: str
    digest: bytes
    rpm: float | None


class KeyRing:
    """Gateway keys and the admin key. With no keys configured the gateway is open (loopback only)."""

    def __init__(self, keys: list[GatewayKeyConfig], admin_key: SecretStr | None) -> None:
        self._keys = [
            _Key(
                k.id,
                _digest(k.key.get_secret_value()) if k.key is not None else bytes.fromhex(k.key_sha256 or ""),
                k.rpm,
            )
            for k in keys
        ]
        self._rpm = {k.id: k.rpm for k in keys if k.rpm}
        self._admin = _digest(admin_key.get_secret_value()) if admin_key is not None else None

    @property
    def open(self) -> bool:
        return not self._keys

    def rpm(self, key_id: str | None) -> float | None:
        """The key's ``rpm`` limit (None: unlimited); counted fleet-wide by ``gateway.fleet``."""
        return self._rpm.get(key_id) if key_id is not None else None

    def identify(self, request: web.Request) -> str | None:
        """The key id of the caller; raises a 401 as a WireError."""
        if not self._keys:
            return None
        token = bearer(request)
        if not token:
            raise wire_errors.authentication_error(
                "Missing API key. Send it as 'Authorization: Bearer <key>' (the key the gateway issued you)."
            )
        digest = _digest(token)
        found: _Key | None = None
        for key in self._keys:  # no early exit: the time taken does not depend on which key matched
            if hmac.compare_digest(key.digest, digest):
                found = key
        if found is None:
            raise wire_errors.authentication_error("Incorrect API key provided.")
        return found.id

    def is_admin(self, request: web.Request) -> bool:
        token = bearer(request)
        return self._admin is not None and token is not None and hmac.compare_digest(self._admin, _digest(token))


def unauthorized_admin() -> WireError:
    return WireError(
        401,
        "This endpoint needs the admin key (Authorization: Bearer <admin key>).",
        type="invalid_request_error",
        code="invalid_api_key",
    )
