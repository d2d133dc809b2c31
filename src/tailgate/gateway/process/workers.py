"""One coherent ``/metrics`` for ``tailgate serve --workers N`` (prometheus_client's multiprocess mode).

Every worker writes its samples to files in one private directory; whichever worker a scrape reaches merges
them all (``GatewayMetrics.render``). This must run before ``prometheus_client`` is imported anywhere in the
process, which is why it lives in a module that imports nothing heavy, and why the CLI calls it first.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

__all__ = ["multiprocess_metrics", "worker_gone"]

ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_metrics() -> str:
    """Point this process and the workers it will spawn at a fresh, private metrics directory."""
    path = tempfile.mkdtemp(prefix="tailgate-metrics-")
    os.environ[ENV] = path
    atexit.register(shutil.rmtree, path, True)
    return path


def worker_gone(pid: int) -> None:
    """A worker exited: drop its live gauges (its counters keep counting in the totals)."""
    if os.environ.get(ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
