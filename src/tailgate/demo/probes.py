"""The monitor inside the demo: probe rounds over the demo's providers into the demo's store.

The monitor probes each provider directly (not through the gateway), so its probes also land in the
primary's ground truth. The drill counts *gateway* traffic reaching the primary, so it removes the
monitor's own probes again, matched by send time (``probe_times``).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tailgate._runtime import stop_task
from tailgate.config.resolve import ResolvedProvider
from tailgate.config.schema import GatewayConfig

log = logging.getLogger("tailgate.demo")


class DemoMonitor:
    """Runs monitor rounds every ``interval_s`` (the first at once) until :meth:`close`."""

    def __init__(self, monitor: Any, store: Any, interval_s: float) -> None:
        self.monitor = monitor
        self.store = store
        self.interval_s = interval_s
        self.rounds = 0
        self.samples: list[Any] = []
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._loop())

    def probe_times(self, provider: str) -> list[float]:
        """Wall-clock send times of every probe sent to ``provider`` so far."""
        return sorted(s.ts for s in self.samples if s.provider == provider)

    async def _loop(self) -> None:
        index = 0
        while not self._stop.is_set():
            try:
                report = await self.monitor.run_round(index)
            except Exception as exc:  # the demo goes on without probes rather than fail
                log.warning("monitor round %d failed: %r", index, exc)
            else:
                self.samples.extend(report.samples)
                self.rounds += 1
                log.info("monitor %s", report.summary())
            index += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)

    async def close(self) -> None:
        self._stop.set()
        await stop_task(self._task, reraise=True)
        await self.monitor.close()
        await self.store.close()


async def start_monitor(
    config: GatewayConfig, providers: Mapping[str, ResolvedProvider], db: Path, *, interval_s: float = 30.0
) -> DemoMonitor | None:
    """Start probing every route's provider × model into the store at ``db``; None without the monitor."""
    try:
        from tailgate.ledger.samples import SampleStore
        from tailgate.monitor.runner import Monitor, targets_from_config
    except ImportError:
        return None
    store = SampleStore(db)
    await store.start()
    monitor = Monitor(providers, targets_from_config(config), store, concurrency=1, probe_timeout_s=60.0)
    return DemoMonitor(monitor, store, interval_s)


def without_probes(arrivals: list[float], probes: list[float], tolerance: float = 0.25) -> list[float]:
    """``arrivals`` (sorted) minus one arrival within ``tolerance`` s after each probe send time."""
    out = list(arrivals)
    for t in probes:
        # The simulator stamps ``received_at`` when it reads the request: a few ms after the probe's send.
        i = bisect.bisect_left(out, t - 0.01)
        if i < len(out) and out[i] <= t + tolerance:
            del out[i]
    return out
