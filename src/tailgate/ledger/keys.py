"""Runtime gateway keys in the store: create, list, update, revoke (docs/keys.md).

A key is an ``sk-``-prefixed random string shown once at creation; the store keeps its SHA-256 (the same
digest the YAML's ``key_sha256`` takes). Per key: ``rpm``, ``tpm``, ``max_concurrency``, token and money
budgets per UTC day and calendar month, the model aliases it may use (None: all), a traffic class, an
expiry and free-form metadata (team, owner). Every change bumps ``keys_version`` in the same transaction,
so replicas polling the version reload the table within their poll interval.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from tailgate.ledger.store import Queryable, StoreConn

__all__ = [
    "LIMIT_FIELDS",
    "KeyRecord",
    "KeyStoreError",
    "create_key",
    "digest",
    "get_key",
    "keys_version",
    "keys_with_spend",
    "list_keys",
    "new_secret",
    "revoke_key",
    "update_key",
]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")

LIMIT_FIELDS: tuple[str, ...] = (
    "rpm",
    "tpm",
    "max_concurrency",
    "tokens_per_day",
    "tokens_per_month",
    "cost_per_day",
    "cost_per_month",
)
"""Numeric limits a key may carry (None: no limit)."""


class KeyStoreError(ValueError):
    """A key operation that cannot be done (unknown id, duplicate id, bad value); the message says why."""


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_secret() -> str:
    """A new key: ``sk-`` and 43 URL-safe random characters (256 bits), like OpenAI's keys look."""
    return "sk-" + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One key as stored (never the key itself)."""

    id: str
    key_sha256: str
    created_at: float
    updated_at: float
    revoked_at: float | None = None
    expires_at: float | None = None
    rpm: float | None = None
    tpm: float | None = None
    max_concurrency: int | None = None
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    cost_per_day: float | None = None
    cost_per_month: float | None = None
    models: tuple[str, ...] | None = None
    """Aliases this key may use; None: every alias."""
    traffic_class: str | None = None
    """Default ``x-tailgate-class`` for this key's requests."""
    metadata: dict[str, str] = field(default_factory=dict)

    def state(self, now: float) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"

    def public(self, now: float | None = None) -> dict[str, Any]:
        """JSON form for listings and the admin API: everything but the digest."""
        out = asdict(self)
        out.pop("key_sha256")
        out["models"] = list(self.models) if self.models is not None else None
        out["state"] = self.state(time.time() if now is None else now)
        return out


_COLUMNS = tuple(f.name for f in fields(KeyRecord))
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM keys"  # noqa: S608 - names from the dataclass


def _from_row(values: tuple[Any, ...]) -> KeyRecord:
    row = dict(zip(_COLUMNS, values, strict=True))
    row["models"] = tuple(json.loads(row["models"])) if row["models"] else None
    row["metadata"] = json.loads(row["metadata"] or "{}")
    return KeyRecord(**row)


def _to_params(rec: KeyRecord) -> tuple[Any, ...]:
    values = []
    for name in _COLUMNS:
        value = getattr(rec, name)
        if name == "models":
            value = json.dumps(list(value)) if value is not None else None
        elif name == "metadata":
            value = json.dumps(value, sort_keys=True)
        values.append(value)
    return tuple(values)


def _check(changes: Mapping[str, Any]) -> dict[str, Any]:
    allowed = {*LIMIT_FIELDS, "models", "traffic_class", "expires_at", "metadata"}
    out: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in allowed:
            raise KeyStoreError(f"unknown key field {name!r} (known: {', '.join(sorted(allowed))})")
        if name in LIMIT_FIELDS and value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise KeyStoreError(f"{name} must be a number > 0 (or none for no limit), got {value!r}")
            if name in ("max_concurrency", "tokens_per_day", "tokens_per_month"):
                if int(value) != value:
                    raise KeyStoreError(f"{name} must be a whole number, got {value!r}")
                value = int(value)
        if name == "models" and value is not None:
            if isinstance(value, str) or not all(isinstance(m, str) and m for m in value):
                raise KeyStoreError(f"models must be a list of aliases, got {value!r}")
            value = tuple(value)
        if name == "metadata":
            if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
                raise KeyStoreError(f"metadata must map names to text, got {value!r}")
            value = {str(k): str(v) for k, v in value.items()}
        if name == "expires_at" and value is not None and not isinstance(value, int | float):
            raise KeyStoreError(f"expires_at must be Unix seconds, got {value!r}")
        out[name] = value
    return out


def _bump(conn: Queryable) -> None:
    conn.execute("UPDATE keys_version SET version = version + 1 WHERE id = 1")


def keys_version(conn: Queryable) -> int:
    """Incremented by every create / update / revoke (poll it to know when to reload)."""
    row = conn.execute("SELECT version FROM keys_version WHERE id = 1").fetchone()
    return int(row[0]) if row else 0


def list_keys(conn: Queryable, *, include_revoked: bool = True) -> list[KeyRecord]:
    where = "" if include_revoked else " WHERE revoked_at IS NULL"
    return [_from_row(r) for r in conn.execute(f"{_SELECT}{where} ORDER BY id").fetchall()]


def get_key(conn: Queryable, key_id: str) -> KeyRecord | None:
    row = conn.execute(f"{_SELECT} WHERE id = ?", (key_id,)).fetchone()
    return _from_row(row) if row else None


def create_key(
    conn: StoreConn, key_id: str, *, secret: str | None = None, now: float | None = None, **limits: Any
) -> tuple[KeyRecord, str]:
    """Create key ``key_id``; return its record and the secret (shown once, never stored)."""
    if not _ID.match(key_id):
        raise KeyStoreError(
            f"key id must be 1-128 letters, digits or . _ : @ - (starting with a letter or digit), got {key_id!r}"
        )
    secret = secret or new_secret()
    at = time.time() if now is None else now
    rec = KeyRecord(id=key_id, key_sha256=digest(secret), created_at=at, updated_at=at, **_check(limits))
    exists = KeyStoreError(f"a key with id {key_id!r} already exists (update or revoke it)")
    try:
        with conn.transaction():
            if get_key(conn, key_id) is not None:
                raise exists
            marks = ", ".join("?" * len(_COLUMNS))
            conn.execute(f"INSERT INTO keys ({', '.join(_COLUMNS)}) VALUES ({marks})", _to_params(rec))  # noqa: S608
            _bump(conn)
    except Exception as exc:
        if type(exc).__name__ in ("IntegrityError", "UniqueViolation"):  # created by someone else meanwhile
            raise exists from None
        raise
    return rec, secret


def update_key(conn: StoreConn, key_id: str, *, now: float | None = None, **changes: Any) -> KeyRecord:
    """Change limits, models, class, expiry or metadata of ``key_id`` (None clears a limit)."""
    checked = _check(changes)
    with conn.transaction():
        rec = get_key(conn, key_id)
        if rec is None:
            raise KeyStoreError(f"no key with id {key_id!r}")
        rec = replace(rec, updated_at=time.time() if now is None else now, **checked)
        sets = ", ".join(f"{c} = ?" for c in _COLUMNS if c != "id")
        params = [v for c, v in zip(_COLUMNS, _to_params(rec), strict=True) if c != "id"]
        conn.execute(f"UPDATE keys SET {sets} WHERE id = ?", (*params, key_id))  # noqa: S608
        _bump(conn)
    return rec


def revoke_key(conn: StoreConn, key_id: str, *, now: float | None = None) -> KeyRecord:
    """Revoke ``key_id`` (refused by every replica at its next reload); revoking twice is a no-op."""
    at = time.time() if now is None else now
    with conn.transaction():
        rec = get_key(conn, key_id)
        if rec is None:
            raise KeyStoreError(f"no key with id {key_id!r}")
        if rec.revoked_at is not None:
            return rec
        conn.execute("UPDATE keys SET revoked_at = ?, updated_at = ? WHERE id = ?", (at, at, key_id))
        _bump(conn)
    return replace(rec, revoked_at=at, updated_at=at)


def keys_with_spend(conn: StoreConn, now: float) -> list[dict[str, Any]]:
    """Every key's public fields plus ``spend`` today and this month (tokens and cost, from the store)."""
    from tailgate.ledger.usage import day_start, month_start, usage

    today = {g["key"]: g for g in usage(conn, since=day_start(now), by="key")}
    month = {g["key"]: g for g in usage(conn, since=month_start(now), by="key")}
    out = []
    for rec in list_keys(conn):
        entry = rec.public(now)
        entry["spend"] = {
            period: {
                "requests": g.get("requests", 0),
                "refused": g.get("refused", 0),
                "tokens": g.get("input_tokens", 0) + g.get("output_tokens", 0),
                "cost": g.get("cost", 0.0),
            }
            for period, g in (("day", today.get(rec.id, {})), ("month", month.get(rec.id, {})))
        }
        out.append(entry)
    return out
