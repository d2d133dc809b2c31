"""What the OpenTelemetry export itself costs a gateway, per request, apart from the machine's noise.

``gateway_overhead.py --otel`` compares whole processes' CPU per request, export on and off, on a machine shared
with other work: its rounds move ±25 %, more than the cost it looks for. This measures the export's own CPU
instead: ``otel_collector_down.py``'s ``up`` phase (one process: a simulated provider, a gateway exporting to a live
OTLP/HTTP receiver, a closed loop of 20 connections, half the requests streamed), with ``time.thread_time`` around
the three places the export runs:

- ``books``: ``OtelBooks.record`` on the event loop (a request's spans and metric points built from its ledger
  row, queued; the metric points recorded);
- ``span export``: the SDK batching processor's ``_export`` on its thread (encode and send a batch);
- ``metric export``: the GenAI histograms' export on their thread.

Per request: each, and their sum; and the process's CPU per request for scale. The queue and batch are the
defaults (2048 / 512) unless ``--small-batches`` (``otel_collector_down.py``'s 256 / 64).

Usage: ``PYTHONPATH=src .venv/bin/python benchmarks/otel_own_cost.py [--seconds 10]``; a tree's ``src`` on
``PYTHONPATH`` measures that tree (a before / after: run it twice).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk._shared_internal import BatchProcessor

import otel_collector_down as down
from tailgate.gateway.metrics import otel_books
from tailgate.sim.presets import preset
from tailgate.sim.provider import ProviderSpec, SimProvider

SPENT: dict[str, float] = {"books": 0.0, "span export": 0.0, "metric export": 0.0}


def _timed(owner: Any, name: str, key: str) -> None:
    """``owner.name`` with its thread's CPU added to ``SPENT[key]``."""
    inner: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            SPENT[key] += time.thread_time() - t

    setattr(owner, name, timed)


def _instrument(small_batches: bool) -> None:
    _timed(otel_books.OtelBooks, "record", "books")
    _timed(BatchProcessor, "_export", "span export")
    try:  # this tree's own metric export, or (a tree before it) the SDK's periodic reader's collect-and-export
        from tailgate.telemetry.aggregates import MetricPump

        _timed(MetricPump, "export", "metric export")
    except ImportError:
        from opentelemetry.sdk.metrics.export import MetricReader

        _timed(MetricReader, "collect", "metric export")
    if not small_batches:
        validate = down.validate_data  # type: ignore[attr-defined]  # otel_collector_down's import, patched there

        def defaults(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            for key in ("max_queue_size", "max_export_batch_size"):
                data.get("telemetry", {}).pop(key, None)
            return validate(data, *args, **kwargs)

        down.validate_data = defaults  # type: ignore[attr-defined]


async def _run(seconds: float) -> dict[str, Any]:
    sim = SimProvider(ProviderSpec(name="instant", params=preset("instant"), preset="instant", port=0, models=("up",)))
    await sim.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return await down._phase("up", sim.url, seconds, 20, Path(tmp))
    finally:
        await sim.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--small-batches", action="store_true", help="otel_collector_down.py's queue 256, batches 64")
    args = ap.parse_args(argv)
    _instrument(args.small_batches)
    r = asyncio.run(_run(args.seconds))
    n = max(1, r["requests"])
    own = sum(SPENT.values())
    parts = ", ".join(f"{k} {v / n * 1e6:.1f}" for k, v in SPENT.items())
    print(
        f"{r['requests']} requests, {r['exported']:.0f} spans exported, {r['failed']} failed; export's own CPU µs "
        f"per request: {parts}; total {own / n * 1e6:.1f} (the process: {r['cpu_us']:.0f})"
    )
    return 0 if r["failed"] == 0 and r["exported"] > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
