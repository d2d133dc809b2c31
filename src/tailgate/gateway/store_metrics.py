"""The ledger's health and the event loop's task count on /metrics, read at scrape time.

A full or locked store shows here first; ``tailgate_event_loop_tasks`` (asyncio tasks alive in this
process) is what a soak run watches for leaks (benchmarks/soak.py).

``tailgate_ledger_pending_rows`` (rows in memory, not yet in the store), ``tailgate_ledger_write_errors_total``
(failed write transactions: locked, busy, disk full; each retried) and ``tailgate_ledger_dropped_rows_total``
(rows the store refused or that were abandoned at shutdown). docs/reliability.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tailgate.ledger import SQLiteLedger


class _LedgerCollector(Collector):
    def __init__(self, ledger: SQLiteLedger) -> None:
        self.ledger = ledger

    def collect(self) -> Iterator[Metric]:
        ledger = self.ledger
        yield GaugeMetricFamily(
            "tailgate_ledger_pending_rows", "Ledger rows in memory, not yet written to the store.", value=ledger.pending
        )
        yield CounterMetricFamily(
            "tailgate_ledger_write_errors",
            "Failed ledger write transactions (locked, busy, disk full); each is retried.",
            value=ledger.write_errors,
        )
        yield CounterMetricFamily(
            "tailgate_ledger_dropped_rows",
            "Ledger rows not stored: refused by the store, over the pending limit, or abandoned at shutdown.",
            value=ledger.dropped,
        )


class _TaskCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # scraped outside a running loop (a test registry)
            tasks = 0
        yield GaugeMetricFamily("tailgate_event_loop_tasks", "asyncio tasks alive in this process.", value=tasks)


def register_runtime_metrics(registry: CollectorRegistry) -> None:
    registry.register(_TaskCollector())


def register_ledger_metrics(registry: CollectorRegistry, ledger: SQLiteLedger) -> None:
    registry.register(_LedgerCollector(ledger))
