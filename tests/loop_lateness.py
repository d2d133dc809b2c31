"""How late this process's event loop wakes, measured beside a test in the same run (tests/bench, tests/sim).

A loaded machine makes a client see every event late by about that much, never early: the truth-comparison
tests widen the late side of their tolerances by it (a bound derived from the same run, not a wall clock).
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from tailgate.stats import LatencyHistogram


async def sim_step_lateness_p99(root_url: str, stat: str = "p99") -> float:
    """The simulator's own measure of how late its decode steps ended (``GET /sim/state``, P99 in ms, or ``stat``:
    ``max``): when the machine starves the simulator's process, a request also waits unseen in its socket, which
    the client rightly counts and the simulator's truth cannot."""
    async with aiohttp.ClientSession() as s, s.get(root_url.removesuffix("/v1") + "/sim/state") as r:
        late = (await r.json())["engine"]["lateness_ms"]
    return float(late.get(stat) or 0.0)


class LoopLateness:
    """How late this process's event loop wakes, measured beside the bench in the same run: a ticker sleeps 5 ms
    at a time and records how much later than asked it woke. A loaded machine makes the client see every event
    that much late; the tolerances below grow by it, so the tests judge the bench, not the machine."""

    def __init__(self) -> None:
        self.ms = LatencyHistogram()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopLateness:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(0.005)
            self.ms.record(max(0.0, (loop.time() - t0 - 0.005) * 1000.0))

    @property
    def p99(self) -> float:
        return float(self.ms.percentile(99.0)) if self.ms.count else 0.0

    @property
    def max_s(self) -> float:
        """The latest this loop woke so far, in seconds (0 before the first tick)."""
        return float(self.ms.max) / 1000.0 if self.ms.count else 0.0


WAKEUPS = 4
"""Wake-ups on the path of a change to a gateway's view in the same process (a poll or sync timer, an executor's or
Redis's answer, the request that observes it, the test's own poll): each may be late by the loop's worst lateness,
so a "within N s" promise is checked against N + WAKEUPS x that, measured in the same run (``LoopLateness``)."""
