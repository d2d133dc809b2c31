"""What the OpenTelemetry export path costs alone: CPU per span and per GenAI metric point, in one process.

The gateway's own :class:`tailgate.telemetry.export.Exporter` exports to a sink collector (``_otlp_sink.py``, a
process of its own: its work is not counted) while this process plays the gateway's books: per "request" two span
records (a server span and an attempt, 22 attributes each, as ``metrics/otel_books.py`` makes them) and/or the four
histogram points. The queue is large enough that nothing is dropped: every span is built, queued, encoded and sent.
CPU is this process's (``time.process_time``: the export threads included), from the first request to the end of the
final flush, per request. Reported, not judged: it says where ``gateway_overhead.py --otel``'s cost goes.

Usage: ``.venv/bin/python benchmarks/bench_otel_export.py [--requests N] [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from bench_sim import server
from tailgate.config.telemetry_config import TelemetryConfig
from tailgate.telemetry.export import Exporter
from tailgate.telemetry.settings import resolve
from tailgate.telemetry.spans import AttrValue, Ids, SpanRecord

HERE = Path(__file__).resolve().parent
ATTRS: dict[str, AttrValue] = {f"tailgate.attr{i}": "a value" for i in range(12)}
ATTRS.update({f"gen_ai.attr{i}": i for i in range(10)})
POINT: dict[str, AttrValue] = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "deepseek",
    "gen_ai.request.model": "deepseek-v3.2",
    "gen_ai.response.model": "deepseek-chat",
    "tailgate.provider": "lanyun",
}


def run(endpoint: str, mode: str, requests: int) -> float:
    """CPU µs per request of ``mode`` (``spans``, ``metrics``, ``both``), the final flush included."""
    section = TelemetryConfig(endpoint=endpoint, metrics=mode != "spans", max_queue_size=4 * requests + 16)
    settings = resolve(section, {})
    assert settings is not None
    ex = Exporter(settings, CollectorRegistry())
    ids = Ids(1)
    t0 = time.process_time()
    for i in range(requests):
        if mode != "metrics":
            trace, server_id, now = ids.trace_id(), ids.span_id(), time.time_ns()
            ex.emit(
                [
                    SpanRecord("chat deepseek-v3.2", "server", trace, server_id, None, now, now + 10**6, dict(ATTRS)),
                    SpanRecord("chat up", "client", trace, ids.span_id(), server_id, now, now + 9 * 10**5, dict(ATTRS)),
                ]
            )
        if mode != "spans":
            ex.record(ex.duration, 0.01, POINT)
            ex.record(ex.tokens, 100, {**POINT, "gen_ai.token.type": "input"})
            ex.record(ex.tokens, 20, {**POINT, "gen_ai.token.type": "output"})
            ex.record(ex.ttft, 0.001, POINT)
        if i % 500 == 499:
            time.sleep(0.02)  # the gateway's idle moments: the export thread runs beside, as it does there
    ex.shutdown()
    cpu = time.process_time() - t0
    exported = ex.counts.exported._value.get()
    if mode != "metrics" and exported != 2 * requests:
        raise RuntimeError(f"{mode}: {exported:.0f} of {2 * requests} spans exported")
    return cpu / requests * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--quick", action="store_true", help="2,000 requests")
    args = ap.parse_args(argv)
    requests = 2_000 if args.quick else args.requests
    with tempfile.TemporaryDirectory(prefix="bench_otel_export-") as tmp:
        argv_sink = [sys.executable, str(HERE / "_otlp_sink.py"), "0"]
        with server("otlp sink", argv_sink, Path(tmp) / "sink.log", pin=False) as sink:
            results = {mode: run(sink.url, mode, requests) for mode in ("spans", "metrics", "both")}
    print(f"{requests:,} requests of 2 spans (22 attributes each) and 4 GenAI histogram points; CPU per request:")
    for mode, us in results.items():
        print(f"  {mode:8} {us:8.1f} µs")
    print(f"  per span {results['spans'] / 2:.1f} µs; per metric point {results['metrics'] / 4:.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
