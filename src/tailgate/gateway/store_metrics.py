"""``/metrics`` for the store: the spool's shipping to PostgreSQL and the roll-up job (docs/metrics.md).

A collector read at scrape time, so nothing is counted on the request path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

if TYPE_CHECKING:
    from tailgate.gateway.app import Gateway

__all__ = ["register_store_metrics"]


class _StoreCollector(Collector):
    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        shipper = self.gw.shipper
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
        maintenance = self.gw.maintenance
        if maintenance is not None:
            yield CounterMetricFamily(
                "tailgate_store_rolled_up_rows", "Request rows rolled up into usage_hourly by this replica.",
                maintenance.rolled,
            )  # fmt: skip
            yield CounterMetricFamily(
                "tailgate_store_maintenance_errors", "Failed roll-up / retention runs (retried).", maintenance.errors
            )


def register_store_metrics(gw: Gateway, registry: CollectorRegistry) -> None:
    registry.register(_StoreCollector(gw))
