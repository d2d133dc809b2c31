"""Client keys: stored as SHA-256 digests, compared in constant time; a per-key RPM (counted by gateway.fleet)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from aiohttp import web
from pydantic import SecretStr

from tailgate.config.schema import GatewayKeyConfig
from tailgate.gateway.access.forwarded import TrustedProxies
from tailgate.gateway.access.key_directory import KeyDirectory, KeyLimits
from tailgate.gateway.access.lockout import SourceLockout
from tailgate.gateway.http.exchange import HasHeaders
from tailgate.wire import errors as wire_errors
from tailgate.wire.errors import WireError


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def bearer(request: HasHeaders) -> str | None:
    """The bearer token of a request (``Authorization: Bearer X`` or OpenAI-style ``api-key: X``)."""
    auth = request.headers.get("Authorization")
    if auth is not None and auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("api-key")


class KnownKeyRefused(WireError):
    """401 for a key the gateway knows but refuses (revoked): its ledger row carries the key's id and the reason."""

    def __init__(self, key_id: str, reason: str, message: str) -> None:
        super().__init__(401, message, type="invalid_request_error", code="invalid_api_key")
        self.key_id = key_id
        self.reason = reason


class SelfCall:
    """A request the gateway makes to itself on behalf of a key (a batch line on the batch lane,
    gateway/batch/batch_exec.py): it carries the key's id instead of a bearer. Nothing that arrives from the network
    is one, so :meth:`KeyRing.identify` trusts its id — but not a key revoked (or removed) since: that is refused as
    a revoked bearer is (``KeyDirectory.gone``)."""

    __slots__ = ()
    owner: str | None


@dataclass(slots=True)
class _Key:
    id: str
    digest: bytes
    rpm: float | None


class KeyRing:
    """Gateway keys and the admin key. With no keys configured the gateway is open (loopback only)."""

    def __init__(
        self, keys: list[GatewayKeyConfig], admin_key: SecretStr | None, directory: KeyDirectory | None = None
    ) -> None:
        self.directory = directory
        """The store's runtime keys (docs/keys.md), looked up after the YAML's."""
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
    def admin_digest(self) -> bytes | None:
        return self._admin

    @property
    def open(self) -> bool:
        return not self._keys and not (self.directory is not None and self.directory.has_store_keys)

    def rpm(self, key_id: str | None, limits: KeyLimits | None = None) -> float | None:
        """The key's ``rpm`` limit (None: unlimited); counted fleet-wide by ``gateway.fleet``. ``limits``: the
        key's directory entry when the caller looked it up already."""
        if key_id is None:
            return None
        rpm = self._rpm.get(key_id)
        if rpm is None and key_id not in self._rpm and self.directory is not None:
            # a runtime key from the store (docs/keys.md)
            stored = limits if limits is not None else self.directory.limits(key_id)
            rpm = stored.rpm if stored is not None else None
        return rpm

    def identify(self, request: HasHeaders) -> str | None:
        """The key id of the caller; raises a 401 as a WireError."""
        if isinstance(request, SelfCall):
            owner = request.owner
            if owner is not None and self.directory is not None and (gone := self.directory.gone(owner)):
                raise KnownKeyRefused(owner, "key_revoked", gone)  # revoked after its batch was submitted
            return owner
        if self.open:
            return None
        # /v1 only: Anthropic's SDK sends its api_key (ANTHROPIC_API_KEY) as x-api-key (its auth_token is a bearer)
        token = bearer(request) or request.headers.get("x-api-key")
        if not token:
            raise wire_errors.authentication_error(
                "Missing API key. Send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>' "
                "(the key the gateway issued you)."
            )
        digest = _digest(token)
        found: _Key | None = None
        for key in self._keys:  # no early exit: the time taken does not depend on which key matched
            if hmac.compare_digest(key.digest, digest):
                found = key
        if found is None:
            stored = self.directory.find(digest) if self.directory is not None else None
            if stored is None:
                raise wire_errors.authentication_error("Incorrect API key provided.")
            if stored.revoked:
                raise KnownKeyRefused(stored.id, "key_revoked", "This API key has been revoked.")
            return stored.id  # its limits (rpm included) are applied by admission.py
        return found.id

    def is_admin(self, request: HasHeaders) -> bool:
        token = bearer(request)
        return self._admin is not None and token is not None and hmac.compare_digest(self._admin, _digest(token))


def unauthorized_admin() -> WireError:
    return WireError(
        401,
        "This endpoint needs the admin key (Authorization: Bearer <admin key>).",
        type="invalid_request_error",
        code="invalid_api_key",
    )


Area = Literal["admin", "dashboard", "metrics"]


class AccessGuard:
    """The gateway's one access decision for everything that is not ``/v1`` (docs/reliability.md, "Access"):
    who may use ``/admin`` (the admin key), the dashboard's API (with gateway keys — YAML or store — or a
    ``dashboard_key`` configured: the admin key or the read-only dashboard key) and ``/metrics`` (with
    ``metrics.key``: that key or the admin key).

    Decided per request from the keys in force *now*: a key created or revoked at runtime (the store's
    keys, polled by :class:`KeyDirectory`) moves the decision at once, and a config reload hands the new
    key ring, ``dashboard_key`` and ``metrics.key`` to :meth:`configure`. Every comparison is constant-time
    over digests, and a client address with too many wrong keys gets 429s for its wrong keys for a while
    (:class:`SourceLockout`); a right key always passes, so nobody can lock the admin out. The client address
    is the socket's peer, or behind ``server.trusted_proxies`` the one ``X-Forwarded-For`` names
    (:class:`TrustedProxies`)."""

    def __init__(
        self,
        keys: KeyRing,
        *,
        dashboard_key: SecretStr | None,
        metrics_key: SecretStr | None,
        lockout: SourceLockout,
        trusted_proxies: Sequence[str] = (),
    ) -> None:
        self.lockout = lockout
        self.keys = keys
        self.proxies = TrustedProxies()
        self._dashboard: bytes | None = None
        self._metrics: bytes | None = None
        self.configure(keys, dashboard_key=dashboard_key, metrics_key=metrics_key, trusted_proxies=trusted_proxies)

    def configure(
        self,
        keys: KeyRing,
        *,
        dashboard_key: SecretStr | None,
        metrics_key: SecretStr | None,
        trusted_proxies: Sequence[str] = (),
    ) -> None:
        """The keys of a (re)loaded config: from the next request on, every area decides with these."""
        self.keys = keys
        self.proxies = TrustedProxies(trusted_proxies)
        self._dashboard = _digest(dashboard_key.get_secret_value()) if dashboard_key is not None else None
        self._metrics = _digest(metrics_key.get_secret_value()) if metrics_key is not None else None

    def required(self, area: Area) -> bool:
        """Does ``area`` need a key at all, now?"""
        if area == "admin":
            return True
        if area == "dashboard":
            return not self.keys.open or self._dashboard is not None
        return self._metrics is not None

    @property
    def admin_configured(self) -> bool:
        return self.keys.admin_digest is not None

    def is_admin(self, request: HasHeaders) -> bool:
        """Is the bearer the admin key (constant-time; no lockout bookkeeping)?"""
        admin = self.keys.admin_digest
        token = bearer(request)
        return admin is not None and token is not None and hmac.compare_digest(admin, _digest(token))

    def _accepted(self, area: Area) -> list[bytes]:
        digests = [self.keys.admin_digest] if self.keys.admin_digest is not None else []
        own = {"admin": None, "dashboard": self._dashboard, "metrics": self._metrics}[area]
        return digests + ([own] if own is not None else [])

    def client(self, request: web.Request) -> str | None:
        """The request's client address: its peer, or through a trusted proxy the one it forwarded."""
        return self.proxies.client(request.remote, request.headers.getall("X-Forwarded-For", ()))

    def check(self, request: web.Request, area: Area) -> WireError | None:
        """None when the request may pass; else the error to send (401, 403, or 429 when locked out)."""
        if not self.required(area):
            return None
        accepted = self._accepted(area)
        if not accepted:  # /admin without an admin_key, or a closed gateway's dashboard with neither key
            what = (
                "Admin endpoints are off: set admin_key in the config."
                if area == "admin"
                else "The dashboard's data is closed on a gateway with client keys and no key to read it with: "
                "set dashboard_key (read-only) or admin_key in the config."
            )
            return WireError(403, what, type="request_forbidden")
        token = bearer(request)
        if token:
            digest = _digest(token)
            ok = False
            for want in accepted:  # no early exit: timing does not say which key matched
                ok |= hmac.compare_digest(want, digest)
            if ok:
                return None  # a right key is never locked out: only wrong attempts are throttled
        source = self.client(request)
        if (locked := self.lockout.refusal(source)) is not None:
            return locked
        if token:
            self.lockout.failed(source)
        names = {
            "admin": "the admin key",
            "dashboard": "the admin key or the dashboard key",
            "metrics": "the metrics key or the admin key",
        }
        return WireError(
            401,
            f"This endpoint needs {names[area]} (Authorization: Bearer <key>).",
            type="invalid_request_error",
            code="invalid_api_key",
        )
