"""``tailgate monitor`` and ``tailgate leaderboard`` (docs/monitor.md).

Registered on the main command group by ``tailgate.cli``; the logic lives in ``tailgate.monitor``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tailgate._cli_util import _duration, _echo_line, _fail, _stdout
from tailgate._runtime import run
from tailgate.ledger.leaderboard import SORTS

__all__ = ["leaderboard", "monitor"]


@click.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path), required=True, help="Gateway YAML config.")
@click.option("--once", is_flag=True, help="Run one round, print its samples and exit (1 if no probe succeeded).")
@click.option(
    "--db",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Store (default: the config's ledger.path, else $TAILGATE_DB, else the XDG data folder).",
)
@click.option("--interval", default="60s", show_default=True, help="Time between rounds (jittered by up to 10%).")
@click.option("--retention", default="30d", show_default=True, help="Delete samples older than this ('0' keeps all).")
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    type=click.Choice(["short", "long", "accuracy"]),
    help="Probe only these workloads (repeatable; default: all three).",
)
@click.option(
    "--api",
    "apis",
    multiple=True,
    type=click.Choice(["openai", "anthropic"]),
    help="Probe with these protocols (repeatable; default: openai). anthropic: the providers with an "
    "anthropic_base_url, at /v1/messages; kept apart on the leaderboard.",
)
@click.option("--concurrency", type=click.IntRange(1, 64), default=2, show_default=True, help="Probes per provider.")
@click.option("--serve", is_flag=True, help="Also serve the dashboard over the store.")
@click.option("--host", default="127.0.0.1", show_default=True, help="With --serve: listen address.")
@click.option("--port", type=click.IntRange(0, 65535), default=8090, show_default=True, help="With --serve: port.")
@click.option("--peak-at", help="Run a bench profile at this local time (HH:MM, e.g. 11:00): the peak-hour test.")
@click.option("--peak-days", default="mon-fri", show_default=True, help="Days of the peak test: mon-fri, daily …")
@click.option("--peak-levels", default="1,10,50", show_default=True, help="Peak test: concurrency levels.")
@click.option("--peak-duration", default="30s", show_default=True, help="Peak test: per level.")
@click.option("--peak-find-max", multiple=True, help="Peak test: also search capacity, e.g. 'p90(ttft)<1s'.")
def monitor(
    config_path: Path,
    once: bool,
    db: Path | None,
    interval: str,
    retention: str,
    workloads: tuple[str, ...],
    apis: tuple[str, ...],
    concurrency: int,
    serve: bool,
    host: str,
    port: int,
    **peak: Any,
) -> None:
    """Probe every provider × model of a gateway config on a schedule and store the samples."""
    from tailgate.monitor.command import MonitorOptions, monitor_main

    if once and serve:
        _fail("--serve runs until stopped; it cannot be combined with --once")
    _refuse_inapplicable(peak, serve)
    keep = None if retention.strip() == "0" else _duration("--retention", retention)
    options = MonitorOptions(
        config=config_path,
        db=db,
        once=once,
        interval_s=_duration("--interval", interval),
        retention_s=keep,
        concurrency=concurrency,
        workloads=workloads or ("short", "long", "accuracy"),
        apis=tuple(dict.fromkeys(apis)) or ("openai",),
        serve=serve,
        host=host,
        port=port,
        **_peak_options(peak),
    )
    sys.exit(run(lambda stop: monitor_main(stop, options, echo=_echo_line)))


def _explicit(name: str) -> bool:
    """Whether the user gave this option (not its default)."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, click.core.ParameterSource.DEFAULT)


def _refuse_inapplicable(peak: dict[str, Any], serve: bool) -> None:
    """Options of a mode that is off are refused, naming both, instead of doing nothing."""
    if not peak.get("peak_at"):
        for name in ("peak_days", "peak_levels", "peak_duration", "peak_find_max"):
            if _explicit(name) and peak.get(name):
                flag = "--" + name.replace("_", "-")
                _fail(f"{flag} applies to the peak-hour test only: add --peak-at HH:MM (e.g. --peak-at 11:00)")
    if not serve:
        for name in ("host", "port"):
            if _explicit(name):
                _fail(f"--{name} applies to --serve only (the dashboard's address): add --serve or leave it out")


def _peak_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(","))
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        _fail(f"--peak-levels {text!r}: not a list of positive integers; use e.g. 1,10,50")
    return levels


def _peak_options(peak: dict[str, Any]) -> dict[str, Any]:
    """``--peak-*`` → MonitorOptions fields; the bench profile runner is wired in here (faces stay apart)."""
    if not peak.get("peak_at"):
        return {}
    from tailgate.bench.profile import run_profile
    from tailgate.bench.thresholds import ThresholdError, parse_threshold
    from tailgate.monitor.peak import PeakProfile, PeakSchedule

    try:
        PeakSchedule.parse(peak["peak_at"], peak["peak_days"])
    except ValueError as exc:
        _fail(str(exc))  # names --peak-at or --peak-days and the accepted forms
    levels = _peak_levels(str(peak["peak_levels"]))
    for expr in peak["peak_find_max"]:
        try:
            parse_threshold(expr)
        except ThresholdError as exc:
            _fail(f"--peak-find-max {expr!r}: {exc}; e.g. 'p90(ttft)<1s'")
    profile = PeakProfile(
        levels=levels,
        duration_s=_duration("--peak-duration", peak["peak_duration"]),
        find_max=tuple(peak["peak_find_max"]),
    )
    return {
        "peak_at": peak["peak_at"],
        "peak_days": peak["peak_days"],
        "peak_profile": profile,
        "peak_runner": run_profile,
    }


@click.command()
@click.option("--window", default="7d", show_default=True, help="How far back: 1h, 24h, 7d, 30d …")
@click.option(
    "--sort",
    default="p90",
    show_default=True,
    help="The column to rank by (docs/monitor.md): " + " | ".join(SORTS) + ".",
)
@click.option("--model", default=None, help="Only this upstream model id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema tailgate.leaderboard/v1).")
@click.option(
    "--db",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Store (default: the config's ledger.path, else $TAILGATE_DB, else the XDG data folder).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="Gateway config: its store (ledger.path / ledger.url, as monitor and serve use it), price, max output "
    "length and configured pairs without samples.",
)
@click.option("--columns", help="Table columns, comma-separated (e.g. provider,model,n,ttft_p99); see --wide.")
@click.option("--wide", is_flag=True, help="Every column (snapshot, P50s, answer TTFT, price, ...).")
def leaderboard(
    window: str,
    sort: str,
    model: str | None,
    as_json: bool,
    db: Path | None,
    config_path: Path | None,
    columns: str | None,
    wide: bool,
) -> None:
    """Rank providers × models from the monitor's samples and the gateway's traffic."""
    from tailgate.monitor.board import BoardOptions, leaderboard_main, pick_columns

    if wide and columns is not None:
        _fail("--wide shows every column; --columns picks some: give one of them")
    try:
        chosen = pick_columns(columns, wide=wide)
    except ValueError as exc:
        _fail(str(exc))
    options = BoardOptions(
        window_s=_duration("--window", window),
        sort=sort,
        model=model,
        as_json=as_json,
        db=db,
        config=config_path,
        columns=chosen,
    )
    out = _stdout()
    sys.exit(leaderboard_main(options, echo=_echo_line, show=lambda grid: grid.print_to(out)))
