"""The gateway's view of its keys: the YAML's ``keys:`` plus the store's runtime keys, kept current.

:class:`KeyDirectory` loads the store's ``keys`` table (docs/keys.md) and reloads it when its
``keys_version`` moves — polled every ``poll`` seconds (0.25 s) in a worker thread, and at once when the
fleet state's ``keys`` generation moves (another replica's ``/admin/keys`` bumped it) — so a new key
works and a revoked one is refused on every replica within about half a second. If the store cannot be
read, the last loaded keys stay in force (logged). Lookups are dictionary reads on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tailgate._runtime import stop_task
from tailgate.config.schema import GatewayKeyConfig
from tailgate.ledger.keys import KeyRecord, keys_version, list_keys
from tailgate.ledger.store import StoreConn, open_store

__all__ = ["KeyDirectory", "KeyLimits", "limits_from_config", "limits_from_record"]

log = logging.getLogger("tailgate.gateway")


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """What admission needs to know about one key, whichever source it came from."""

    id: str
    rpm: float | None = None
    tpm: float | None = None
    max_concurrency: int | None = None
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    cost_per_day: float | None = None
    cost_per_month: float | None = None
    models: frozenset[str] | None = None
    traffic_class: str | None = None
    expires_at: float | None = None
    revoked: bool = False
    source: str = "store"
    """``store`` or ``config``. Either's ``rpm`` is counted by ``gateway.fleet`` (fleet-wide), not here."""

    budgeted: bool = field(init=False, repr=False, compare=False)
    """Any token or money budget? (Worked out once: admission asks on every request.)"""
    limited: bool = field(init=False, repr=False, compare=False)
    """Anything for admission to check (beyond the key ring's own checks)?"""

    def __post_init__(self) -> None:
        budgeted = any(
            v is not None for v in (self.tokens_per_day, self.tokens_per_month, self.cost_per_day, self.cost_per_month)
        )
        limited = (
            self.models is not None
            or self.tpm is not None
            or self.max_concurrency is not None
            or budgeted
            or self.expires_at is not None
        )
        object.__setattr__(self, "budgeted", budgeted)
        object.__setattr__(self, "limited", limited)


def limits_from_record(rec: KeyRecord) -> KeyLimits:
    return KeyLimits(
        id=rec.id,
        rpm=rec.rpm,
        tpm=rec.tpm,
        max_concurrency=rec.max_concurrency,
        tokens_per_day=rec.tokens_per_day,
        tokens_per_month=rec.tokens_per_month,
        cost_per_day=rec.cost_per_day,
        cost_per_month=rec.cost_per_month,
        models=frozenset(rec.models) if rec.models is not None else None,
        traffic_class=rec.traffic_class,
        expires_at=rec.expires_at,
        revoked=rec.revoked_at is not None,
    )


def limits_from_config(key: GatewayKeyConfig) -> KeyLimits:
    budget = key.budget
    return KeyLimits(
        id=key.id,
        rpm=key.rpm,
        tpm=key.tpm,
        max_concurrency=key.max_concurrency,
        tokens_per_day=budget.tokens_per_day if budget else None,
        tokens_per_month=budget.tokens_per_month if budget else None,
        cost_per_day=budget.cost_per_day if budget else None,
        cost_per_month=budget.cost_per_month if budget else None,
        models=frozenset(key.models) if key.models is not None else None,
        source="config",
    )


class KeyDirectory:
    """YAML keys and the store's keys; ``target`` None: YAML keys only (no store)."""

    def __init__(
        self,
        target: str | Path | None,
        config_keys: list[GatewayKeyConfig],
        *,
        poll: float = 0.25,
        generation: Callable[[], int] | None = None,
    ) -> None:
        self.target = target
        self._poll = poll
        self._generation = generation
        self._config = {k.id: limits_from_config(k) for k in config_keys}
        self._by_digest: dict[bytes, KeyLimits] = {}
        self._by_id: dict[str, KeyLimits] = {}
        self._version = -1
        self._seen_generation = -1
        self._conn: StoreConn | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None  # the one thread that uses the store connection
        self._wake = asyncio.Event()
        self._next_log = 0.0
        self.reloads = 0
        self.last_error: str | None = None
        self.on_change: Callable[[], None] | None = None
        """Called on the event loop after a load that changed the keys (the gateway logs when it closes or
        opens: the first key appears, the last disappears)."""

    def set_config_keys(self, config_keys: list[GatewayKeyConfig]) -> None:
        """The YAML's keys after a config reload."""
        self._config = {k.id: limits_from_config(k) for k in config_keys}

    # -- lookups (event loop) -------------------------------------------------------------------------

    @property
    def has_store_keys(self) -> bool:
        """True while the store holds keys — or could not be read yet (fail closed: an unreadable store
        must not turn a gateway that has runtime keys into an open one)."""
        return bool(self._by_digest) or (self.target is not None and self._version < 0)

    def find(self, digest: bytes) -> KeyLimits | None:
        """The store key with this SHA-256 digest (revoked and expired ones included: the caller says why)."""
        return self._by_digest.get(digest)

    def limits(self, key_id: str) -> KeyLimits | None:
        """Limits of a key by id: the YAML's entry wins over a store key of the same id."""
        return self._config.get(key_id) or self._by_id.get(key_id)

    def gone(self, key_id: str) -> str | None:
        """Why the key ``key_id`` may no longer be used — revoked, or no longer known (removed from the YAML) once the
        store's keys are loaded — or None. For requests made in a key's name without its secret (a batch's lines)."""
        limits = self.limits(key_id)
        if limits is not None:
            return "This API key has been revoked." if limits.revoked else None
        if self.target is not None and self._version < 0:  # the store's keys not read yet: not known to be gone
            return None
        return "This API key has been revoked: the gateway no longer knows it."

    def store_keys(self) -> list[KeyLimits]:
        return list(self._by_id.values())

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the store's keys once (a store that cannot be read now only logs: YAML keys still work)."""
        if self.target is None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tailgate-keys")
        try:
            await self._in_thread(False)
        except Exception as exc:
            self._note(exc)
        self._task = asyncio.create_task(self._run(), name="tailgate-keys")

    async def reload(self) -> None:
        """Reload now (after this replica changed a key)."""
        if self._executor is not None:
            await self._in_thread(True)

    async def _in_thread(self, force: bool) -> None:
        assert self._executor is not None
        before = self.reloads
        await asyncio.get_running_loop().run_in_executor(self._executor, self._reload_sync, force)
        if self.reloads != before and self.on_change is not None:
            self.on_change()

    async def close(self) -> None:
        if self._task is not None:
            await stop_task(self._task, reraise=True)
            self._task = None
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(executor, self._close_sync)
            executor.shutdown(wait=False)

    def _close_sync(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll):
                    await self._wake.wait()
            self._wake.clear()
            force = False
            if self._generation is not None:
                gen = self._generation()
                force, self._seen_generation = gen != self._seen_generation, gen
            try:
                await self._in_thread(force)
            except Exception as exc:
                self._note(exc)

    def _note(self, exc: BaseException) -> None:
        self.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        now = time.monotonic()
        if now >= self._next_log:
            self._next_log = now + 10.0
            log.warning("keys: cannot read the store's keys (%s); the last loaded keys stay in force", self.last_error)

    # -- worker thread ----------------------------------------------------------------------------------

    def _reload_sync(self, force: bool = False) -> None:
        try:
            self._load(force)
        except BaseException:
            self._close_sync()  # reconnect next time (PostgreSQL may have restarted)
            raise

    def _load(self, force: bool) -> None:
        assert self.target is not None
        if self._conn is None:
            self._conn = open_store(self.target, connect_timeout=2.0)
        version = keys_version(self._conn)
        if version == self._version and not force:
            return
        records = list_keys(self._conn)
        by_digest = {}
        by_id = {}
        for rec in records:
            limits = limits_from_record(rec)
            by_digest[bytes.fromhex(rec.key_sha256)] = limits
            by_id[rec.id] = limits
        self._by_digest, self._by_id, self._version = by_digest, by_id, version
        self.reloads += 1
        self.last_error = None
