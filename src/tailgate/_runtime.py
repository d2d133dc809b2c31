"""Process-level setup shared by the CLI commands: event loop choice, logging, signal-aware running."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class _ScrubbingFormatter(logging.Formatter):
    """Every log line leaves with the password of any URL in it replaced by ``***`` (a Redis or PostgreSQL
    URL quoted by a library's exception, say): no secret reaches a log by way of an address."""

    def format(self, record: logging.LogRecord) -> str:
        from tailgate.config.resolve import scrub_urls

        return scrub_urls(super().format(record))


def setup_logging(verbose: bool = False) -> None:
    """Log lines to stderr (as ``logging.basicConfig``: nothing changes when the root logger has handlers)."""
    handler = logging.StreamHandler()
    handler.setFormatter(_ScrubbingFormatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s", "%H:%M:%S"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])


def tune_gc() -> None:
    """Fewer, cheaper garbage collections for long-running servers.

    Everything imported so far is moved to the permanent generation (never scanned again), and the
    young-generation threshold is raised: a server allocates many short-lived objects per request,
    and with the default threshold (700) full collections every few seconds showed up as multi-ms
    stalls in the simulator's step lateness (docs/benchmarks.md).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def run(main: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """Run ``main(stop_event)`` on uvloop when available; SIGINT/SIGTERM set the event for a clean stop.

    The loop is chosen here, when a command runs, never at import time (importing tailgate has no side
    effects on the caller's event loop policy).
    """
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover - uvloop is a dependency on every platform we ship for
        runner = asyncio.Runner()

    async def wrapper() -> T:
        tune_gc()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # Signals reach only the main thread; elsewhere (tests, embedding) the caller stops us.
        if sys.platform != "win32" and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
        return await main(stop)

    with runner:
        return runner.run(wrapper())


async def wait_for_stop(stop: asyncio.Event, duration: float | None) -> None:
    """Wait until ``stop`` is set or ``duration`` seconds pass (forever when None)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=duration)


async def stop_task(task: asyncio.Task[object] | asyncio.Task[None], grace_s: float = 0.1) -> None:
    """Cancel a background task and wait until it has really stopped.

    One ``cancel()`` is not always enough on Python 3.11: a cancellation that lands while an
    ``asyncio.timeout`` block inside the task expires is turned into a ``TimeoutError``, and a loop that
    treats timeouts as a Redis hiccup carries on for ever (a fleet test hung in teardown this way in CI).
    So cancel again until the task is done."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=grace_s)
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger("tailgate").debug("background task %s ended with %r", task.get_name(), task.exception())
