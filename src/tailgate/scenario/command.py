"""The ``tailgate scenario`` command's logic: load, run every policy with a live view, print, write."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from tailgate._runtime import stop_task
from tailgate.scenario.config import ScenarioConfig, load_scenario
from tailgate.scenario.document import build_document, write_json
from tailgate.scenario.report import render_html, render_markdown, rich_tables
from tailgate.scenario.runner import LiveStatus, PolicyRecord, planned_runs, run_scenario
from tailgate.scenario.schema import ScenarioDocument
from tailgate.scenario.verdicts import time_scale_note, verdicts
from tailgate.tables import console as tables_console

__all__ = ["prepare", "run_command"]


def prepare(path: Path, time_scale: float) -> ScenarioConfig:
    """Load and scale a scenario (raises ConfigError with located messages)."""
    return load_scenario(path).scaled(time_scale)


def _write(doc: ScenarioDocument, out: Path | None, html: Path | None, markdown: Path | None) -> list[Path]:
    written = []
    if out is not None:
        write_json(doc, out)
        written.append(out)
    if html is not None:
        html.write_text(render_html(doc), encoding="utf-8")
        written.append(html)
    if markdown is not None:
        markdown.write_text(render_markdown(doc), encoding="utf-8")
        written.append(markdown)
    return written


PROGRESS_EVERY_S = 5.0
"""Off a terminal (pipes, CI logs) a plain progress line this often."""


def _progress_line(status: LiveStatus) -> str:
    """One plain line: where the run is and how long is left (off a terminal, every ``PROGRESS_EVERY_S``)."""
    phase = status.load
    left = max(0.0, status.duration_s - status.elapsed) + status.duration_s * (status.total - status.index)
    return (
        f"progress: {status.policy} ({status.index}/{status.total}) {status.elapsed:.0f}/{status.duration_s:g} s, "
        f"phase {status.phase_name or '-'}, sent {phase.sent if phase else 0}, errors {phase.errors if phase else 0}; "
        f"~{left:.0f} s left"
    )


async def _tick(console: Console, status: LiveStatus) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        if status.started:
            console.print(_progress_line(status), markup=False, highlight=False)


def _render(status: LiveStatus) -> Group:
    whole = status.duration_s * max(status.total, 1)
    done_s = status.duration_s * max(status.index - 1, 0) + min(status.elapsed, status.duration_s)
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=whole or 1.0, completed=done_s, width=40),
        f"{done_s:.0f}/{whole:g} s, ~{max(0.0, whole - done_s):.0f} s left",
    )
    table = Table("policy", "t", "phase", "sent", "done", "in flight", "errors", box=None)
    phase = status.load
    table.add_row(
        f"{status.policy} ({status.index}/{status.total})",
        f"{status.elapsed:5.1f}/{status.duration_s:g} s",
        status.phase_name,
        str(phase.sent if phase else 0),
        str(phase.done if phase else 0),
        str(phase.in_flight if phase else 0),
        str(phase.errors if phase else 0),
    )
    return Group(bar, table, *(Text(e, style="dim") for e in status.events[-4:]))


async def run_command(
    stop: asyncio.Event,
    cfg: ScenarioConfig,
    *,
    source: str,
    policies: Sequence[str] = (),
    time_scale: float = 1.0,
    out: Path | None = None,
    html: Path | None = None,
    markdown: Path | None = None,
    console: Console | None = None,
    replicas: int = 1,
) -> int:
    """Run the scenario; print the comparison; write the files asked for. Returns the exit code."""
    console = console or tables_console(stderr=True)
    runs = cfg.select(list(policies))
    planned = len(planned_runs(cfg, runs))
    started = dt.datetime.now(dt.UTC)
    status = LiveStatus()
    name = cfg.name or Path(source).stem
    console.print(
        f"scenario [bold]{name}[/]: {len(runs)} polic{'y' if len(runs) == 1 else 'ies'} × "
        f"{cfg.load.duration:g} s ({', '.join(r.label for r in runs)}); Ctrl-C stops cleanly"
        + (f"; a fleet of {replicas} gateway replicas on a private redis-server" if replicas > 1 else "")
    )
    if cfg.batch is not None:
        console.print(
            f"batch: {cfg.batch.lines:,} lines to {cfg.batch.endpoint} at {cfg.batch.submit_at:g} s through the "
            f"gateway's Batch API (window {cfg.batch.completion_window}); "
            + ("each policy runs first without it (its baseline)" if cfg.batch.baseline else "no baseline run"),
            markup=False,
            highlight=False,
        )
    if time_scale != 1.0:
        console.print(
            f"time scale {time_scale:g}: every time of the scenario is multiplied by {time_scale:g} (phases, faults, "
            f"the providers' latencies; request rates stay), so it runs {1 / time_scale:g}× shorter",
            markup=False,
            highlight=False,
        )

    def done(record: PolicyRecord) -> None:
        console.print(f"done: {record.run.label} — {len(record.samples)} requests")

    ticker = None if console.is_terminal else asyncio.create_task(_tick(console, status))
    try:
        with Live(console=console, refresh_per_second=4, transient=True, get_renderable=lambda: _render(status)):
            records = await run_scenario(cfg, runs, stop, status, on_done=done, replicas=replicas)
    finally:
        if ticker is not None:
            await stop_task(ticker, reraise=True)
    doc = build_document(
        cfg,
        records,
        source=source,
        time_scale=time_scale,
        command=["tailgate", *sys.argv[1:]],
        started_at=started,
        planned=planned,
    )
    stdout = tables_console()
    for grid in rich_tables(doc):
        grid.print_to(stdout)
    for line in verdicts(doc):
        stdout.print(f"verdict: {line}", markup=False, highlight=False)
    if note := time_scale_note(doc):
        console.print(f"note: {note}", markup=False, highlight=False)
    if doc.partial:
        console.print("[yellow]stopped early: the results are partial[/]")
    for written in await asyncio.to_thread(_write, doc, out, html, markdown):
        console.print(f"wrote {written}")
    return 130 if doc.partial and stop.is_set() else 0
