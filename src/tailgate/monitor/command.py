"""What ``tailgate monitor`` does, for the CLI: load the config, run rounds on a schedule, report.

Exit codes: 0 after a clean stop (or a ``--once`` round in which at least one probe succeeded);
1 when a ``--once`` round got no successful answer at all; 2 for a config or store problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailgate._runtime import stop_task
from tailgate.config.loader import ConfigError
from tailgate.config.resolve import ResolvedProvider, load_resolved
from tailgate.config.schema import GatewayConfig
from tailgate.ledger.paths import default_db_path
from tailgate.ledger.samples import SampleStore
from tailgate.ledger.schema import SchemaError
from tailgate.ledger.store import redact_url
from tailgate.monitor.runner import Monitor, RoundReport, Target, targets_from_config
from tailgate.monitor.schedule import Schedule
from tailgate.monitor.tracing import round_tracer
from tailgate.monitor.workloads import WORKLOADS

__all__ = ["MonitorOptions", "load_targets", "monitor_main", "round_table", "store_path"]

log = logging.getLogger("tailgate.monitor")

Echo = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class MonitorOptions:
    """``tailgate monitor`` flags, parsed."""

    config: Path
    db: Path | None = None
    once: bool = False
    interval_s: float = 60.0
    jitter: float = 0.1
    retention_s: float | None = 30 * 86400.0
    concurrency: int = 2
    workloads: tuple[str, ...] = WORKLOADS
    apis: tuple[str, ...] = ("openai",)
    """``--api``: the protocols to probe with; ``anthropic`` probes the providers that have an
    ``anthropic_base_url`` at ``/v1/messages`` (their samples and leaderboard rows are kept apart)."""
    serve: bool = False
    host: str = "127.0.0.1"
    port: int = 8090
    peak_at: str | None = None
    """Local time of the scheduled peak-hour load test (``--peak-at 11:00``); None: no test."""
    progress_s: float = 5.0
    """While a round runs longer, a line every ``progress_s`` says which providers it waits for and how long."""
    peak_days: str = "mon-fri"
    peak_profile: Any = None
    """A :class:`tailgate.monitor.peak.PeakProfile` (None: the default profile)."""
    peak_runner: Any = None
    """The bench profile runner the CLI injects (:func:`tailgate.bench.profile.run_profile`)."""

    def db_path(self, config: GatewayConfig | None = None) -> Path:
        """``--db``, else the config's ``ledger.path`` (where its gateway writes), else ``default_db_path()``."""
        return store_path(self.db, config)


def store_path(db: Path | None, config: GatewayConfig | None) -> Path:
    """The store to use: an explicit path, else the gateway config's ``ledger.path``, else the default.

    The same order the gateway follows for its ledger, so a monitor and a gateway run from one config
    write one file (probes next to the gateway's traffic minutes).
    """
    if db is not None:
        return db
    if config is not None and config.ledger.path:
        return Path(config.ledger.path).expanduser()
    return default_db_path()


def load_targets(
    path: Path, apis: tuple[str, ...] = ("openai",)
) -> tuple[GatewayConfig, dict[str, ResolvedProvider], list[Target]]:
    """The config, its providers and the provider × model × api targets to probe; raises ConfigError."""
    config, providers = load_resolved(path)
    return config, providers, targets_from_config(config, providers, apis)


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def round_table(report: RoundReport, urls: Mapping[str, str] | None = None) -> list[str]:
    """The samples of one round as aligned text lines (for ``--once``); a failure names the URL it went to."""
    header = ("provider", "model", "workload", "result", "TTFT ms", "E2E ms", "tokens", "tok/s", "right")
    rows = [header]
    details = [*report.details, *[None] * (len(report.samples) - len(report.details))]
    for s, detail in sorted(
        zip(report.samples, details, strict=True),
        key=lambda sd: (sd[0].provider, sd[0].api, sd[0].model, sd[0].workload),
    ):
        where = s.provider if s.api == "openai" else f"{s.provider} ({s.api})"
        result = "ok" if s.ok else failure_words(s.error_class, s.status, urls.get(where) if urls else None, detail)
        right = "-" if s.accuracy_ok is None else ("yes" if s.accuracy_ok else "no")
        rows.append(
            (
                where,
                s.model,
                s.workload,
                result,
                _fmt_ms(s.ttft_ms),
                _fmt_ms(s.e2e_ms if s.ok else None),  # a failed call has no end-to-end time to compare
                "-" if s.output_tokens is None else str(s.output_tokens),
                "-" if s.tok_s is None else f"{s.tok_s:.1f}",
                right,
            )
        )
    for skip in report.skipped:
        t = skip.target
        rows.append(
            (
                t.provider if t.api == "openai" else f"{t.provider} ({t.api})",
                t.model,
                skip.workload,
                f"skipped: {skip.reason}",
                *"-" * 5,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def failure_words(error_class: str | None, status: int | None, url: str | None, detail: str | None) -> str:
    """A failed probe in words, naming where it went: ``could not connect to URL (connection refused)``,
    ``http_5xx (503) from URL``."""
    if error_class == "connect" and url is not None:
        reason = _connect_reason(detail)
        if reason == "connection reset":  # it connected: the connection dropped before any response header
            return f"the connection to {url} was dropped before any answer ({reason})"
        return f"could not connect to {url} ({reason})"
    where = f" from {url}" if url is not None else ""
    return f"{error_class}" + (f" ({status})" if status else "") + where


def _connect_reason(detail: str | None) -> str:
    """The measurement core's connect failure (``ConnectionRefusedError: [Errno 111] …``) in a few words."""
    text = detail or ""
    for needle, words in (
        ("ConnectionRefused", "connection refused"),
        ("timed out", "timed out"),
        ("Timeout", "timed out"),
        ("gaierror", "name not resolved"),
        ("ConnectionReset", "connection reset"),
        ("SSL", "TLS handshake failed"),
    ):
        if needle in text:
            return words
    return text or "no connection"


async def monitor_main(stop: asyncio.Event, options: MonitorOptions, echo: Echo = print) -> int:
    """Run ``tailgate monitor`` until ``stop`` is set (or one round with ``--once``); return the exit code."""
    try:
        config, providers, targets = load_targets(options.config, options.apis)
    except ConfigError as exc:
        echo("error: invalid gateway config:\n" + "\n".join(f"  {p}" for p in exc.problems))
        return 2
    if not targets and options.apis == ("anthropic",):
        echo(f"error: {options.config}: --api anthropic: no routed provider has an anthropic_base_url to probe")
        return 2
    if not targets:  # pragma: no cover - the schema requires at least one model with one route
        echo(f"error: {options.config}: no provider × model pairs to probe (models.*.routes is empty)")
        return 2
    db_path = options.db_path(config)
    fleet = options.db is None and config.ledger.url
    shown = redact_url(config.ledger.url) if fleet and config.ledger.url else os.path.abspath(db_path)  # noqa: ASYNC240 - getcwd, once
    print(f"store: {shown}", file=sys.stderr)  # which store, whatever the working directory (docs/config.md)
    store = SampleStore(db_path)
    try:
        await store.start()
    except (OSError, sqlite3.Error, SchemaError) as exc:
        echo(f"error: cannot open the store {db_path}: {exc}")
        return 2
    shipper = None
    if options.db is None and config.ledger.url:  # the fleet's PostgreSQL: ship the samples (docs/ledger.md)
        from tailgate.ledger.spool import Shipper

        shipper = Shipper(db_path, config.ledger.url, interval=config.ledger.ship_interval)
        try:
            await shipper.start()
        except SchemaError as exc:
            await store.close()
            echo(f"error: {exc}")
            return 2
    try:
        tracer = round_tracer(config.telemetry)
    except ValueError as exc:  # an OTEL_* variable that cannot be used
        await store.close()
        echo(f"error: telemetry: {exc}")
        return 2
    monitor = Monitor(
        providers,
        targets,
        store,
        workloads=options.workloads,
        concurrency=options.concurrency,
        max_pacing_wait_s=options.interval_s,
        retention_s=options.retention_s,
        tracer=tracer,
    )
    runner = None
    try:
        if options.serve:
            from tailgate.monitor.serve import build_app, start

            try:
                where = config.ledger.url if shipper is not None and config.ledger.url else db_path  # the fleet's
                runner, url = await start(build_app(where), options.host, options.port)
            except OSError as exc:
                echo(f"error: --serve: cannot listen on {options.host}:{options.port}: {exc.strerror or exc}")
                return 2
            echo(f"dashboard: {url}")
        pairs = len(targets)
        every = "once" if options.once else f"every {options.interval_s:g} s (jitter {options.jitter:.0%})"
        echo(
            f"probing {pairs} provider × model pair{'s' * (pairs != 1)} with {', '.join(options.workloads)} "
            f"{every}; store {db_path}"
        )
        peak = _start_peak(stop, options, providers, targets, db_path, echo)
        try:
            return await _loop(stop, options, monitor, echo)
        finally:
            if peak is not None:
                await stop_task(peak, reraise=True)
    finally:
        await monitor.close()
        if tracer is not None:  # exports what is left, off the loop (bounded by the export timeout)
            await asyncio.to_thread(tracer.close)
        await store.close()
        if shipper is not None:
            await shipper.close()
        if runner is not None:
            await runner.cleanup()


def _start_peak(
    stop: asyncio.Event,
    options: MonitorOptions,
    providers: dict[str, ResolvedProvider],
    targets: list[Target],
    db_path: Path,
    echo: Echo,
) -> asyncio.Task[None] | None:
    """The scheduled peak-hour load test as a background task (``--peak-at``), or None."""
    if options.peak_at is None or options.once or options.peak_runner is None:
        return None
    from tailgate.monitor.peak import PeakProfile, PeakSchedule, peak_loop, run_peak

    schedule = PeakSchedule.parse(options.peak_at, options.peak_days)
    profile = options.peak_profile or PeakProfile()

    async def run() -> Any:
        return await run_peak(providers, targets, profile, options.peak_runner, db_path)

    return asyncio.ensure_future(peak_loop(stop, schedule, run, echo))


def waiting_line(awaited: list[tuple[str, list[str], float]]) -> str:
    """The progress line of a round that is still waiting: which providers, which workloads, for how long."""
    if not awaited:
        return "waiting: storing the round's samples"
    parts = [f"{label} ({', '.join(sorted(workloads))}) {elapsed:.0f} s" for label, workloads, elapsed in awaited]
    return "waiting for " + "; ".join(parts)


async def _loop(stop: asyncio.Event, options: MonitorOptions, monitor: Monitor, echo: Echo) -> int:
    schedule = Schedule(options.interval_s, jitter=options.jitter)
    index = 0
    while not stop.is_set():
        delay = schedule.delay()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
            if stop.is_set():
                break
        round_task = asyncio.ensure_future(monitor.run_round(index))
        stopper = asyncio.ensure_future(stop.wait())
        while not (
            await asyncio.wait({round_task, stopper}, timeout=options.progress_s, return_when=asyncio.FIRST_COMPLETED)
        )[0]:
            echo(waiting_line(monitor.awaited()))  # a hung provider never leaves the terminal silent
        stopper.cancel()
        if not round_task.done():  # stopped mid-round: the probes in flight are cancelled, nothing half-stored
            await stop_task(round_task, reraise=True)
            break
        report = round_task.result()
        echo(report.summary())
        if options.once:
            for line in round_table(report, monitor.urls):
                echo(line)
            if report.ok == 0:
                echo("error: nothing could be probed: no probe got a successful answer (see the table above)")
                return 1
            if not report.stored:
                echo(f"error: the samples could not be written to {monitor.store.path}")
                return 1
            return 0
        index += 1
    return 0
