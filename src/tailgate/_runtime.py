"""Process-level setup shared by the CLI commands: event loop choice, logging, signal-aware running."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

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


async def stop_task(task: asyncio.Task[Any], grace_s: float = 0.1, *, reraise: bool = False) -> None:
    """Cancel a background task and wait until it has really stopped.

    One ``cancel()`` is not always enough on Python 3.11: a cancellation that lands while an
    ``asyncio.timeout`` block inside the task expires is turned into a ``TimeoutError``, and a loop that
    treats timeouts as a Redis hiccup carries on for ever (a fleet test hung in teardown this way in CI).
    So cancel again until the task is done. Unlike ``task.cancel()`` then ``await task`` under
    ``suppress(CancelledError)``, a cancellation of the caller itself while it waits is not swallowed.

    A task that had ended with an exception: raised again with ``reraise`` (what ``await task`` would do),
    else logged at debug level."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=grace_s)
    if not task.cancelled() and (error := task.exception()) is not None:
        if reraise:
            raise error
        logging.getLogger("tailgate").debug("background task %s ended with %r", task.get_name(), error)


async def bounded_step(what: str, step: Awaitable[object], limit_s: float, log: logging.Logger) -> bool:
    """Await one step of a shutdown for at most ``limit_s`` seconds; True when it finished in time.

    A step past its bound is logged by name ("stopping: <what> did not finish within N s; going on without
    it") and cancelled without being waited for, so a component that stops answering (a paused Redis, a
    PostgreSQL holding a lock) delays the stop by ``limit_s``, never for ever. A step that fails is logged
    and the stop goes on too."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=limit_s)
    if not done:
        log.warning("stopping: %s did not finish within %gs; going on without it", what, limit_s)
        task.cancel()
        return False
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("stopping: %s failed (%s); going on", what, type(exc).__name__, exc_info=exc)
    return True


def exit_if_not_stopped_within(seconds: float, log: logging.Logger, code: int = 1) -> threading.Timer:
    """Last resort of a stopping server process: if it has not exited ``seconds`` from now, log it and exit
    with ``code`` at once (``os._exit``), whatever still hangs (an executor thread waiting on a store, a task
    that ignores its cancellation). A daemon timer: a process that exits in time never sees it."""

    def overran() -> None:
        log.error("stopping: still not stopped %gs after the stop signal; exiting now (status %d)", seconds, code)
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        os._exit(code)

    timer = threading.Timer(seconds, overran)
    timer.daemon = True
    timer.start()
    return timer
