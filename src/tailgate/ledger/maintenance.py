"""The store's housekeeping, run by every gateway: roll-ups every minute, retention every hour.

Several replicas (or worker processes) may run it against one store: the roll-up serialises on its
watermark row (``usage.rollup``) and retention deletes only what is rolled up, so running it twice
changes nothing. It runs in its own thread with its own connection; a failure is logged and retried at
the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tailgate._runtime import stop_task
from tailgate.ledger.store import StoreConn, open_store
from tailgate.ledger.traffic_hours import rollup_traffic
from tailgate.ledger.usage import retention, rollup

__all__ = ["Maintenance"]

log = logging.getLogger("tailgate.ledger")


class Maintenance:
    def __init__(
        self,
        target: str | Path,
        *,
        raw_s: float,
        rollup_s: float,
        rollup_every: float = 60.0,
        retention_every: float = 3600.0,
    ) -> None:
        self.target = target
        self._raw_s = raw_s
        self._rollup_s = rollup_s
        self._rollup_every = rollup_every
        self._retention_every = retention_every
        self._next_retention = 0.0
        self._conn: StoreConn | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self.rolled = 0
        self.deleted = 0
        self.errors = 0

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tailgate-maintenance")
        self._task = asyncio.create_task(self._run(), name="tailgate-maintenance")

    async def run_once(self) -> None:
        assert self._executor is not None
        await asyncio.get_running_loop().run_in_executor(self._executor, self._once_sync)

    async def close(self) -> None:
        if self._task is not None:
            await stop_task(self._task, reraise=True)
            self._task = None
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(executor, self._close_sync)
            executor.shutdown(wait=False)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._rollup_every)
            try:
                await self.run_once()
            except Exception:
                self.errors += 1
                log.warning("store maintenance (roll-up / retention) failed; retrying", exc_info=True)

    def _once_sync(self) -> None:
        try:
            if self._conn is None:
                self._conn = open_store(self.target, connect_timeout=2.0)
            self.rolled += rollup(self._conn)
            rollup_traffic(self._conn, max_rows=50_000)  # a big first roll-up goes over several ticks
            now = time.time()
            if now >= self._next_retention:
                raw, _ = retention(self._conn, now=now, raw_s=self._raw_s, rollup_s=self._rollup_s)
                self.deleted += raw
                self._next_retention = now + self._retention_every
        except BaseException:
            self._close_sync()
            raise

    def _close_sync(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
