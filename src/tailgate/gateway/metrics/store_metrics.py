"""The store's health, the event loop's task count and the upstream connection pools on /metrics, all read
at scrape time (nothing is counted on the request path).

A full or locked store shows here first; ``tailgate_event_loop_tasks`` (asyncio tasks alive in this
process) is what a soak run watches for leaks (benchmarks/soak.py).

``tailgate_ledger_pending_rows`` (rows in memory, not yet in the store), ``tailgate_ledger_write_errors_total``
(failed write transactions: locked, busy, disk full; each retried) and ``tailgate_ledger_dropped_rows_total``
(rows the store refused or that were abandoned at shutdown): docs/reliability.md. ``tailgate_store_*``: the
spool's shipping to PostgreSQL and the roll-up job (docs/metrics.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tailgate.ledger import SQLiteLedger

if TYPE_CHECKING:
    from tailgate.gateway.request_path.providers import ProviderState
    from tailgate.ledger.maintenance import Maintenance
    from tailgate.ledger.spool import Shipper

__all__ = ["register_ledger_metrics", "register_runtime_metrics", "register_store_metrics", "register_upstream_metrics"]


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


class _StoreCollector(Collector):
    def __init__(self, shipper: Shipper | None, maintenance: Maintenance | None) -> None:
        self.shipper = shipper
        self.maintenance = maintenance

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        shipper = self.shipper
        if shipper is not None:
            st = shipper.stats
            yield GaugeMetricFamily(
                "tailgate_store_spool_backlog",
                "Rows in this replica's spool not yet shipped to PostgreSQL.",
                st.backlog,
            )
            shipped = CounterMetricFamily(
                "tailgate_store_shipped_rows", "Rows this replica inserted into PostgreSQL, by table.", labels=["table"]
            )
            for table, n in st.shipped.items():
                shipped.add_metric([table], n)
            yield shipped
            yield CounterMetricFamily(
                "tailgate_store_ship_errors", "Failed shipping attempts (PostgreSQL down or slow; retried).", st.errors
            )
            yield CounterMetricFamily(
                "tailgate_store_rejected_rows", "Spool rows PostgreSQL refused as bad data (skipped).", st.rejected
            )
            yield GaugeMetricFamily(
                "tailgate_store_connected", "1 while the shipper holds a PostgreSQL connection.", int(st.connected)
            )
        maintenance = self.maintenance
        if maintenance is not None:
            yield CounterMetricFamily(
                "tailgate_store_rolled_up_rows", "Request rows rolled up into usage_hourly by this replica.",
                maintenance.rolled,
            )  # fmt: skip
            yield CounterMetricFamily(
                "tailgate_store_maintenance_errors", "Failed roll-up / retention runs (retried).", maintenance.errors
            )


def register_store_metrics(
    registry: CollectorRegistry, shipper: Shipper | None, maintenance: Maintenance | None
) -> None:
    registry.register(_StoreCollector(shipper, maintenance))


class _UpstreamCollector(Collector):
    """Each provider's keep-alive pool (tailgate.upstream.http): connections in use and idle, and made so far."""

    def __init__(self, holder: HoldsProviders) -> None:
        self.holder = holder

    def collect(self) -> Iterator[Metric]:
        conns = GaugeMetricFamily(
            "tailgate_upstream_connections",
            "Keep-alive connections to each provider: in_use (carrying a call) or idle (ready for the next).",
            labels=["provider", "state"],
        )
        opened = CounterMetricFamily(
            "tailgate_upstream_connects",
            "New connections made to each provider (climbing with the traffic: keep-alive is not holding).",
            labels=["provider"],
        )
        for name, provider in self.holder.providers.items():
            in_use, idle, made = provider.client.connections
            conns.add_metric([name, "in_use"], in_use)
            conns.add_metric([name, "idle"], idle)
            opened.add_metric([name], made)
        yield conns
        yield opened


class HoldsProviders(Protocol):
    """What holds the current providers (the gateway's core: a reload swaps them in it)."""

    @property
    def providers(self) -> Mapping[str, ProviderState]: ...


def register_upstream_metrics(registry: CollectorRegistry, holder: HoldsProviders) -> None:
    """``holder.providers``: the current providers, read at each scrape."""
    registry.register(_UpstreamCollector(holder))
