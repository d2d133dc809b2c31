"""The ``tailgate`` command line. Commands only parse flags and wire pieces together."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from tailgate import __version__
from tailgate._cli_batches import batches
from tailgate._cli_keys import keys, usage
from tailgate._cli_monitor import leaderboard, monitor
from tailgate._cli_util import _announce_store, _fail, _stdout
from tailgate._runtime import run, setup_logging, wait_for_stop
from tailgate.config.loader import ConfigError

log = logging.getLogger("tailgate")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="tailgate")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """tailgate: keep LLM users from queueing.

    Measure OpenAI-compatible providers honestly and route between them by measured tail latency.
    """
    setup_logging(verbose)


@main.command()
@click.option("--preset", default=None, help="Simulated provider preset (see --list-presets).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Simulator YAML with several providers (each on its own port).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9001,
    show_default=True,
    help="Port for --preset (0 picks a free one).",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--seed", type=int, default=None, help="Seed for pseudo-text, jitter and faults.")
@click.option(
    "--time-scale",
    type=click.FloatRange(0.0001, 100),
    default=None,
    help="Multiply every preset time (0.1 = ten times faster).",
)
@click.option("--model", "models", multiple=True, help="Serve only these model names (repeatable).")
@click.option(
    "--control-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Extra port serving /sim/<name>/... for every provider (survives a 'refuse' outage).",
)
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
@click.option("--list-presets", is_flag=True, help="Print the presets and their parameters, then exit.")
@click.option("--check", is_flag=True, help="Validate --config and print the providers, then exit.")
def mock(
    preset: str | None,
    config_path: Path | None,
    port: int,
    host: str,
    seed: int | None,
    time_scale: float | None,
    models: tuple[str, ...],
    control_port: int | None,
    duration: float | None,
    list_presets: bool,
    check: bool,
) -> None:
    """Run simulated OpenAI-compatible providers (engine model: slots, queue, batching, faults)."""
    from tailgate.sim.cli_support import preset_table, specs_from_flags
    from tailgate.sim.cluster import SimCluster
    from tailgate.sim.config import load_sim_config
    from tailgate.sim.presets import presets_markdown

    if list_presets:
        if sys.stdout.isatty():
            _stdout().print(preset_table())
        else:  # piped: a markdown table that no terminal width can wrap
            click.echo(presets_markdown(), nl=False)
        return
    if (preset is None) == (config_path is None):
        _fail("give exactly one of --preset NAME or --config FILE (try --list-presets)")
    try:
        if config_path is not None:
            cfg = load_sim_config(config_path)
            if seed is not None or time_scale is not None:
                cfg = cfg.model_copy(
                    update={k: v for k, v in (("seed", seed), ("time_scale", time_scale)) if v is not None}
                )
            specs, ctl = cfg.specs(), control_port if control_port is not None else cfg.control_port
        else:
            assert preset is not None
            specs, ctl = (
                specs_from_flags(preset, host, port, seed or 0, time_scale or 1.0, models),
                control_port,
            )
    except ConfigError as exc:
        _fail("invalid simulator config:\n" + "\n".join(f"  {p}" for p in exc.problems))
    except ValueError as exc:
        _fail(str(exc))
    if check:
        table = Table("provider", "preset", "port", "models", "faults", title="simulated providers")
        for spec in specs:
            table.add_row(
                spec.name,
                spec.preset,
                str(spec.port or "auto"),
                ", ".join(spec.models) or "any",
                str(spec.faults.model_dump(exclude_defaults=True) or "-"),
            )
        _stdout().print(table)
        return

    async def serve(stop: asyncio.Event) -> None:
        cluster = SimCluster(specs, host=specs[0].host, control_port=ctl)
        try:
            await cluster.start()
        except OSError as exc:
            _fail(f"cannot listen: {exc.strerror or exc}")
        for p in cluster.providers.values():
            log.info("provider %s (%s) listening on %s", p.name, p.spec.preset, p.url)
        if cluster.control_url:
            log.info("control API on %s/sim/<name>/faults", cluster.control_url)
        try:
            await wait_for_stop(stop, duration)
        finally:
            await cluster.stop()

    run(serve)


@main.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Gateway port; the simulated providers take the next ones (0 picks free ports).",
)
@click.option(
    "--duration",
    type=click.FloatRange(0),
    default=None,
    help="Run this many seconds, drill phases scaled to fit (20 gives ~4 s phases); default: the drill (~90 s).",
)
@click.option(
    "--keep", is_flag=True, help="After the drill's report keep serving (gateway, dashboard, traffic) until Ctrl-C."
)
@click.option("--no-drill", is_flag=True, help="Only serve background traffic (until Ctrl-C); no failover drill.")
@click.option(
    "--all-providers", is_flag=True, help="Add providers shaped like field-note providers B-E as slower fallbacks."
)
@click.option(
    "--rate",
    type=click.FloatRange(0.1, 1000),
    default=15.0,
    show_default=True,
    help="Background traffic, requests per second (open loop).",
)
@click.option(
    "--db",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The store (ledger, monitor samples); default: $TAILGATE_DB, else a temporary file.",
)
@click.option(
    "--requests",
    "n_requests",
    type=click.IntRange(0, 1000),
    default=0,
    show_default=True,
    help="First send this many requests straight to each provider and show what each simulator timed.",
)
@click.option(
    "--time-scale",
    type=click.FloatRange(0.0001, 100),
    default=1.0,
    show_default=True,
    help="Multiply every simulated time (0.1: ten times faster providers).",
)
@click.option(
    "--replicas",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    help="Gateway replicas sharing state through a private redis-server (started if installed; docs/fleet.md).",
)
def demo(
    port: int,
    duration: float | None,
    keep: bool,
    no_drill: bool,
    all_providers: bool,
    rate: float,
    db: Path | None,
    n_requests: int,
    time_scale: float,
    replicas: int,
) -> None:
    """Simulated providers + gateway + traffic + a failover drill, on this machine (no keys, no network)."""
    from tailgate.demo import DemoOptions, run_demo

    if keep and duration is not None:
        raise click.UsageError("--keep serves until Ctrl-C and --duration stops after S seconds: pick one")
    options = DemoOptions(
        port=port,
        duration=duration,
        keep=keep,
        drill=not no_drill,
        all_providers=all_providers,
        time_scale=time_scale,
        rate=rate,
        db=db,
        check_requests=n_requests,
        replicas=replicas,
    )
    try:
        run(lambda stop: run_demo(stop, options, console=_stdout()))
    except OSError as exc:
        _fail(f"cannot listen: {exc.strerror or exc}")


@main.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path), required=True, help="Gateway YAML config.")
@click.option("--host", default=None, help="Listen address (default: listen.host from the config, 127.0.0.1).")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="Listen port (default: listen.port, 8080).")
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Processes sharing the port (SO_REUSEPORT); one /metrics for all; state per process unless state: redis.",
)
@click.option(
    "--drain-timeout",
    type=click.FloatRange(0, 3600),
    default=30.0,
    show_default=True,
    help="On SIGTERM, seconds to let requests in flight finish before closing.",
)
def serve(config_path: Path, host: str | None, port: int | None, workers: int, drain_timeout: float) -> None:
    """Run the OpenAI-compatible gateway: clients change only base_url and api_key."""
    if workers > 1:  # before anything imports prometheus_client: one coherent /metrics for all workers
        from tailgate.gateway.process.workers import multiprocess_metrics

        multiprocess_metrics()
    from tailgate.config.resolve import load_resolved
    from tailgate.gateway.app import BindRefused, Gateway
    from tailgate.gateway.process.serve import serve_forever
    from tailgate.telemetry import SettingsError
    from tailgate.telemetry import resolve as telemetry_settings

    try:  # validate in the parent so a bad config is one clear message, not one per worker
        config, _ = load_resolved(config_path)
        Gateway.check_bind_static(config, host or config.listen.host)
        telemetry_settings(config.telemetry, os.environ)  # an unusable OTEL_* variable: one message, here
    except ConfigError as exc:
        _fail("invalid gateway config:\n" + "\n".join(f"  {p}" for p in exc.problems))
    except BindRefused as exc:
        _fail(str(exc))
    except SettingsError as exc:
        _fail(f"telemetry: {exc}")
    if workers > 1 and (port if port is not None else config.listen.port) == 0:
        _fail("--workers > 1 needs a fixed port (the workers share it)")
    from tailgate.gateway.process.serve import ListenError
    from tailgate.gateway.request_path.admission import key_store
    from tailgate.ledger.commands import check_store
    from tailgate.ledger.schema import SchemaError
    from tailgate.ledger.store import StoreError

    store = key_store(config, None)
    if store is not None:  # refuse a newer schema or a missing role/database before any worker starts
        _announce_store(store)
        if (problem := check_store(store)) is not None:
            _fail(problem)
    try:
        serve_forever(config_path, host=host, port=port, workers=workers, drain_timeout=drain_timeout)
    except (ListenError, SchemaError, StoreError) as exc:
        _fail(str(exc))


@main.group()
def config() -> None:
    """Gateway config files: check one before serving it."""


@config.command("check")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the resolved config as JSON (keys masked).")
def config_check(file: Path, as_json: bool) -> None:
    """Validate FILE and print the routing it resolves to: routes, shares, providers (keys masked), warnings.

    Exit 0 when valid (warnings included), 2 with every problem as file:line: path: message otherwise.
    """
    import json

    from tailgate.config.check import StoreInfo, check_file, to_json, to_text
    from tailgate.config.schema import GatewayConfig
    from tailgate.gateway.request_path.admission import key_store
    from tailgate.ledger.commands import store_summary

    def look(cfg: GatewayConfig) -> StoreInfo:
        target = key_store(cfg, None)
        if target is None:
            return StoreInfo("", None, "ledger.enabled: false")
        found = store_summary(target)
        return StoreInfo(found.where, found.keys, found.note)

    try:
        report = check_file(file, store=look)
    except ConfigError as exc:
        if as_json:
            click.echo(json.dumps({"ok": False, "source": str(file), "problems": exc.problems}, ensure_ascii=False))
        _fail("invalid gateway config:\n" + "\n".join(f"  {p}" for p in exc.problems))
    click.echo(json.dumps(to_json(report), indent=2, ensure_ascii=False) if as_json else to_text(report))


@main.command()
@click.argument("results", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--html",
    "html_out",
    type=click.Path(path_type=Path, dir_okay=False),
    required=True,
    help="Write the report here (one offline file).",
)
@click.option(
    "--csv",
    "csv_out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also write the one-row-per-run CSV.",
)
def report(results: Path, html_out: Path, csv_out: Path | None) -> None:
    """Re-render the report of a `tailgate bench --out RESULTS.json` run: an offline HTML file (and a CSV)."""
    from tailgate.bench.document import load_document, write_csv
    from tailgate.bench.report import render_html
    from tailgate.bench.results import ResultsError

    try:
        doc = load_document(results)
    except ResultsError as exc:
        _fail(str(exc))
    try:
        html_out.write_text(render_html(doc), encoding="utf-8")
        if csv_out is not None:
            write_csv(doc, csv_out)
    except OSError as exc:
        _fail(f"cannot write: {exc}")
    click.echo(f"wrote {html_out}" + (f" and {csv_out}" if csv_out is not None else ""))


@main.command()
@click.option("--base-url", help="OpenAI base URL of one target (http://host/v1).")
@click.option("--model", help="Model name to send (for --base-url, and default for --target).")
@click.option("--api-key-env", help="Environment variable holding the API key for --base-url.")
@click.option(
    "--api",
    type=click.Choice(["openai", "anthropic"]),
    default="openai",
    show_default=True,
    help="The targets' protocol: OpenAI chat, or Anthropic's Messages API (URL: the API root, e.g. a gateway's).",
)
@click.option(
    "--target", "targets", multiple=True, help="NAME=URL[,model=M][,key-env=VAR]; repeat for an interleaved A/B run."
)
@click.option("--provider", help="Test this provider of --config exactly as the gateway calls it.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Gateway config for --provider.")
@click.option("--concurrency", help="Closed loop: a sweep such as 1,10,50,100 (one level after another).")
@click.option("--rate", type=float, help="Open loop: requests per second, latency from the intended send time.")
@click.option("--arrival", type=click.Choice(["constant", "poisson"]), default="constant", show_default=True)
@click.option("--stages", help="k6-style ramps of concurrency, e.g. 30s:10,1m:50,30s:0.")
@click.option("--duration", default="30s", show_default=True, help="Per level (0 to bound by --requests only).")
@click.option("--requests", "n_requests", type=click.IntRange(1), help="Per level: stop after this many requests.")
@click.option("--warmup", default="2s", show_default=True, help="Per level: sent but not counted.")
@click.option("--max-errors", type=click.IntRange(1), help="Stop a level after this many errors.")
@click.option("--input-tokens", default="128", show_default=True, help="512, or mean=512,stdev=128,min=64,max=2048.")
@click.option("--max-tokens", type=click.IntRange(1), default=128, show_default=True)
@click.option("--stream/--no-stream", default=True, show_default=True)
@click.option("--temperature", type=float)
@click.option("--prompts", type=click.Path(path_type=Path), help="JSONL file of {prompt} or {messages}.")
@click.option(
    "--replay", type=click.Path(path_type=Path), help="Replay a traffic trace (JSONL: t, input/output tokens, class)."
)
@click.option(
    "--time-scale",
    type=click.FloatRange(min=0.0001),
    default=1.0,
    show_default=True,
    help="With --replay: multiply the trace's time gaps (0.5 = twice as fast).",
)
@click.option("--accuracy", is_flag=True, help="Send the verifiable task suite and report accuracy %.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True, help="Generator processes.")
@click.option(
    "--threshold", "thresholds", multiple=True, help="e.g. 'p90(e2e)<3s', 'error_rate<1%'; exit 99 if breached."
)
@click.option("--out", type=click.Path(path_type=Path), help="Write results.json (schema tailgate.bench/v1).")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), help="Write one CSV row per run.")
@click.option("--html", type=click.Path(path_type=Path), help="Write a self-contained HTML report.")
@click.option("--no-preflight", is_flag=True, help="Skip the one-request reachability check per target.")
# capacity, goodput, rate limits, workloads (docs/bench.md)
@click.option(
    "--find-max",
    multiple=True,
    help="Search the largest load at which this holds, e.g. 'p90(ttft)<1s'; repeatable (all must hold).",
)
@click.option(
    "--by",
    type=click.Choice(["concurrency", "rate"]),
    default="concurrency",
    show_default=True,
    help="What --find-max varies: closed-loop concurrency or open-loop requests per second.",
)
@click.option("--find-start", type=float, help="First level of the search (default 1).")
@click.option("--find-ceiling", type=float, help="Highest level tried (default 1024 concurrent / 1000 req/s).")
@click.option("--find-precision", type=float, default=0.1, show_default=True, help="Final bracket, relative.")
@click.option("--find-repeats", type=click.IntRange(1, 9), default=3, show_default=True, help="Runs of a near level.")
@click.option("--goodput", help="Per-request SLO for goodput, e.g. ttft:1s,e2e:5s.")
@click.option("--find-limit", is_flag=True, help="Ramp the rate until the provider answers 429; report the limit.")
@click.option(
    "--limit-cap", type=click.IntRange(10), default=5000, show_default=True, help="--find-limit: max requests."
)
@click.option(
    "--tokenizer",
    type=click.Choice(["deepseek", "qwen", "none"]),
    default="none",
    show_default=True,
    help="Make prompts exactly --input-tokens long in this model family (the optional tokenizers extra).",
)
@click.option(
    "--workload",
    type=click.Choice(["synthetic", "shared-prefix", "long-context", "multi-turn", "writing"]),
    help="A named workload (docs/bench.md).",
)
@click.option("--prefix-tokens", type=click.IntRange(1), default=2048, show_default=True, help="shared-prefix.")
@click.option("--turns", type=click.IntRange(1), default=5, show_default=True, help="multi-turn: turns per chat.")
@click.option(
    "--price",
    help="input=2,cached_input=0.2[,currency=CNY] per 1M tokens: report the input cost per 1k requests.",
)
@click.option(
    "--otlp-endpoint",
    help="Export the run as one OpenTelemetry trace (a span per request) to this OTLP collector, e.g. "
    "http://localhost:4318 (OTEL_EXPORTER_OTLP_* also turn it on; docs/observability.md).",
)
def bench(**kw: Any) -> None:
    """Load-test OpenAI-compatible (or, with --api anthropic, Anthropic Messages API) endpoints: TTFT/ITL/TPOT/E2E
    percentiles, decay ratio, thresholds."""
    from tailgate.bench.command import BenchOptions, run_bench

    renames = {"n_requests": "requests", "config_path": "config", "csv_path": "csv"}
    fields = {renames.get(k, k): v for k, v in kw.items() if k != "no_preflight"}
    sys.exit(run_bench(BenchOptions.from_flags(**fields, preflight=not kw["no_preflight"])))


# -- scenario ------------------------------------------------------------------------------------------------
@main.command()
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--policy", "policies", multiple=True, help="Run only this policy (an entry's name or a policy); repeatable."
)
@click.option("--out", type=click.Path(path_type=Path), help="Write results.json (schema tailgate.scenario/v1).")
@click.option("--html", type=click.Path(path_type=Path), help="Write a self-contained HTML report.")
@click.option("--markdown", type=click.Path(path_type=Path), help="Write the comparison as Markdown tables.")
@click.option(
    "--time-scale",
    type=click.FloatRange(0.001, 100),
    default=1.0,
    show_default=True,
    envvar="TAILGATE_TIME_SCALE",
    show_envvar=True,
    help="Multiply every time of the scenario (0.25 runs it 4× shorter; rates stay). Results are recorded at 1.",
)
@click.option("--check", is_flag=True, help="Validate FILE and exit.")
@click.option(
    "--replicas",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    help="Run the gateway as a fleet of N replicas sharing state through a private redis-server (docs/fleet.md).",
)
def scenario(
    file: Path,
    policies: tuple[str, ...],
    out: Path | None,
    html: Path | None,
    markdown: Path | None,
    time_scale: float,
    check: bool,
    replicas: int,
) -> None:
    """Compare routing policies on simulated providers with a scripted fault timeline (see docs/scenarios.md)."""
    from tailgate.scenario.command import prepare, run_command

    try:
        cfg = prepare(file, time_scale)
        cfg.select(list(policies))
    except ConfigError as exc:
        _fail(str(exc))
    except ValueError as exc:
        _fail(str(exc))
    if check:
        click.echo(f"{file}: ok ({len(cfg.select(list(policies)))} policies, {cfg.load.duration:g} s each)")
        return
    if replicas > 1:
        from tailgate.gateway.process.replicas import redis_available

        if not redis_available():
            _fail("--replicas needs redis-server (apt-get install redis-server); not found on PATH")
    sys.exit(
        run(
            lambda stop: run_command(
                stop,
                cfg,
                source=str(file),
                policies=policies,
                time_scale=time_scale,
                out=out,
                html=html,
                markdown=markdown,
                replicas=replicas,
            )
        )
    )


# -- commands kept in their own modules: monitor and leaderboard, keys and usage (docs/keys.md)
main.add_command(monitor)
main.add_command(leaderboard)
main.add_command(keys)
main.add_command(usage)
main.add_command(batches)  # the gateway's Batch API, over HTTP with the admin key (docs/batch.md)
