"""``tailgate bench``: from parsed options to a written report and an exit code (0, 99, or 2)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console

from tailgate._runtime import run, stop_task
from tailgate.bench import document as doc_mod
from tailgate.bench.cache import input_cost
from tailgate.bench.flags import UsageError as UsageError
from tailgate.bench.flags import parse_price as parse_price
from tailgate.bench.flags import seconds
from tailgate.bench.loadgen import Bounds
from tailgate.bench.runner import (
    Plan,
    PlanError,
    Progress,
    TargetSpec,
    parse_levels,
    parse_stages,
    preflight,
    run_plan,
    run_workers,
)
from tailgate.bench.schema import UNSET, BenchDocument, Capacity, LimitEntry, Run, UnsetType
from tailgate.bench.summary import print_summary
from tailgate.bench.thresholds import ThresholdError, breached, evaluate, parse_threshold
from tailgate.bench.tracing import RunTrace, open_run_trace
from tailgate.bench.workload import LengthDist, Workload, WorkloadError, load_prompts, load_trace
from tailgate.config.schema import PriceConfig
from tailgate.tables import console as tables_console

EXIT_OK, EXIT_USAGE, EXIT_BREACHED = 0, 2, 99


@dataclass(frozen=True)
class TargetOptions:
    """What to load: ``--base-url``/``--model``, ``--target``, or ``--provider`` from ``--config``."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    api: str = "openai"
    """The targets' protocol: ``openai`` or ``anthropic`` (Anthropic's Messages API; docs/bench.md)."""
    targets: tuple[str, ...] = ()
    provider: str | None = None
    config: Path | None = None
    preflight: bool = True


@dataclass(frozen=True)
class LoadShape:
    """How to load it: one load model (closed, open, stages, replay) and how long."""

    concurrency: str | None = None
    rate: float | None = None
    arrival: str = "constant"
    stages: str | None = None
    duration: str | None = "30s"
    requests: int | None = None
    warmup: str = "2s"
    max_errors: int | None = None
    replay: Path | None = None
    time_scale: float = 1.0
    workers: int = 1


@dataclass(frozen=True)
class WorkloadOptions:
    """What each request asks: lengths, prompts, a named workload, the price of its prompt tokens."""

    input_tokens: str = "128"
    max_tokens: int = 128
    stream: bool = True
    temperature: float | None = None
    prompts: Path | None = None
    accuracy: bool = False
    seed: int = 0
    tokenizer: str = "none"
    workload: str | None = None
    prefix_tokens: int = 2048
    turns: int = 5
    price: str | None = None


@dataclass(frozen=True)
class SearchOptions:
    """The capacity search (``--find-max``) and the rate-limit ramp (``--find-limit``)."""

    find_max: tuple[str, ...] = ()
    by: str = "concurrency"
    find_start: float | None = None
    find_ceiling: float | None = None
    find_precision: float = 0.1
    find_repeats: int = 3
    find_limit: bool = False
    limit_cap: int = 5000

    @property
    def searching(self) -> bool:
        return self.find_limit or bool(self.find_max)


@dataclass(frozen=True)
class JudgeOptions:
    """What a run is judged by: ``--threshold`` (exit 99 when breached) and the ``--goodput`` SLO."""

    thresholds: tuple[str, ...] = ()
    goodput: str | None = None


@dataclass(frozen=True)
class OutputOptions:
    """Where the results go, and the command line they record."""

    out: Path | None = None
    csv: Path | None = None
    html: Path | None = None
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    otlp_endpoint: str | None = None
    """``--otlp-endpoint``: the run as one trace to this OTLP collector (bench/tracing.py; ``OTEL_*`` also do)."""


@dataclass(frozen=True)
class BenchOptions:
    """``tailgate bench``'s options, by part (the flags are in cli.py; :meth:`from_flags` sorts them)."""

    target: TargetOptions = field(default_factory=TargetOptions)
    load: LoadShape = field(default_factory=LoadShape)
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    search: SearchOptions = field(default_factory=SearchOptions)
    judge: JudgeOptions = field(default_factory=JudgeOptions)
    output: OutputOptions = field(default_factory=OutputOptions)

    @classmethod
    def from_flags(cls, **flags: Any) -> BenchOptions:
        """The options from one keyword per flag (``base_url=…, concurrency=…``); an unknown one is a TypeError."""
        opts = cls(
            target=_pick(TargetOptions, flags),
            load=_pick(LoadShape, flags),
            workload=_pick(WorkloadOptions, flags),
            search=_pick(SearchOptions, flags),
            judge=_pick(JudgeOptions, flags),
            output=_pick(OutputOptions, flags),
        )
        if flags:
            raise TypeError(f"unknown bench options: {', '.join(sorted(flags))}")
        return opts


_Part = TypeVar("_Part")


def _pick(part: type[_Part], flags: dict[str, Any]) -> _Part:  # reason: click's values by flag name
    """``part`` built from the flags that are its fields (taken out of ``flags``)."""
    names = {f.name for f in dataclass_fields(part)}  # type: ignore[arg-type]
    return part(**{k: flags.pop(k) for k in list(flags) if k in names})


def _key(env: str | None, what: str) -> str | None:
    if env is None:
        return None
    value = os.environ.get(env)
    if not value:
        raise UsageError(f"{what}: environment variable {env} is not set")
    return value


def _targets(t: TargetOptions) -> list[TargetSpec]:
    specs: list[TargetSpec] = []
    if t.base_url:
        if not t.model:
            raise UsageError("--base-url needs --model")
        specs.append(
            TargetSpec("target", t.base_url.rstrip("/"), t.model, _key(t.api_key_env, "--api-key-env"), api=t.api)
        )
    for text in t.targets:
        name, sep, rest = text.partition("=")
        if not sep or not name or not rest:
            raise UsageError(f"--target {text!r}: use NAME=URL[,model=M][,key-env=VAR]")
        url, *extras = rest.split(",")
        fields = {}
        for opt in extras:
            k, eq, v = opt.partition("=")
            if not eq or k not in ("model", "key-env"):
                raise UsageError(f"--target {text!r}: unknown option {opt!r} (model=…, key-env=…)")
            fields[k] = v
        model = fields.get("model") or t.model
        if not model:
            raise UsageError(f"--target {text!r}: give model=… or --model")
        specs.append(
            TargetSpec(name, url.rstrip("/"), model, _key(fields.get("key-env"), f"--target {name}"), api=t.api)
        )
    if t.provider or t.config:
        specs.append(_provider_target(t))
    if not specs:
        raise UsageError(
            "nothing to test: give --base-url URL --model M, --target NAME=URL,…, or --provider NAME --config FILE"
        )
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UsageError(f"target names must differ, got {names}")
    return specs


def _provider_target(t: TargetOptions) -> TargetSpec:
    """A provider exactly as the gateway would call it: its base_url, first key, timeouts and headers."""
    from tailgate.config.resolve import load_resolved
    from tailgate.upstream import Timeouts

    if not (t.provider and t.config):
        raise UsageError("--provider and --config go together")
    config, providers = load_resolved(t.config)
    p = providers.get(t.provider)
    if p is None:
        raise UsageError(f"--provider {t.provider!r} is not in {t.config} (known: {', '.join(providers)})")
    model = t.model or next(
        (r.model for m in config.models.values() for r in m.routes if r.provider == t.provider), None
    )
    if model is None:
        raise UsageError(f"--provider {t.provider!r}: no route uses it; give --model")
    pt = p.timeouts
    timeouts = Timeouts(
        connect=pt.connect, headers=pt.headers, first_token=pt.first_token, idle=pt.idle, total=pt.total
    )
    base_url = p.base_url
    if t.api == "anthropic":  # the provider's native Anthropic endpoint, as the gateway's passthrough calls it
        if p.anthropic_base_url is None:
            raise UsageError(f"--api anthropic: provider {t.provider!r} has no anthropic_base_url in {t.config}")
        base_url = p.anthropic_base_url
    return TargetSpec(
        p.name, base_url, model, p.api_keys[0] if p.api_keys else None, timeouts, tuple(p.headers.items()), t.api
    )


def _cache_price(t: TargetOptions, price: PriceConfig | None) -> tuple[float, str]:
    """A cached prompt token's price ÷ an uncached one's for the workload's ``input_cost_ratio_all_hits``, and
    where it came from: ``--price``; else the ``--provider``'s ``price`` in ``--config`` (its preset's, unless the
    config sets it) when it has both ``input`` and ``cached_input``; else ``CACHE_HIT_PRICE`` (``default``)."""
    from tailgate.bench.shapes import CACHE_HIT_PRICE

    if price is not None and price.input > 0:
        return price.cached_rate / price.input, "--price"
    if t.provider and t.config:
        from tailgate.config.resolve import load_resolved

        p = load_resolved(t.config)[1].get(t.provider)
        if p is not None and p.price.input > 0 and p.price.cached_input is not None:
            return p.price.cached_input / p.price.input, "provider"
    return CACHE_HIT_PRICE, "default"


def _refuse_inapplicable(load: LoadShape, search: SearchOptions) -> None:
    """Options that do not apply to the chosen mode are refused, naming both (never silently ignored)."""
    given = {
        "--concurrency": load.concurrency is not None,
        "--rate": load.rate is not None,
        "--stages": load.stages is not None,
        "--replay": load.replay is not None,
        "--requests": load.requests is not None,
        "--max-errors": load.max_errors is not None,
        "--arrival poisson": load.arrival != "constant",
        "--workers": load.workers > 1,
    }
    if search.find_limit:
        why = {
            "--concurrency": "it ramps an open loop by rate; start it with --find-start",
            "--rate": "it chooses the rates itself; start it with --find-start",
            "--stages": "it ramps its own open-loop steps",
            "--replay": "it ramps its own open-loop steps",
            "--requests": "each step runs --duration; the total is bounded by --limit-cap",
            "--max-errors": "429s are what it looks for",
            "--arrival poisson": "a constant schedule is what measures a bucket's refill rate",
            "--workers": "it runs in one process",
        }
        for flag, on in given.items():
            if on:
                raise UsageError(f"{flag} does not apply to --find-limit ({why[flag]})")
    if search.find_max:
        for flag in ("--stages", "--replay"):
            if given[flag]:
                raise UsageError(f"{flag} does not apply to --find-max (it searches concurrency or rate levels)")
        if search.by == "rate" and given["--concurrency"]:
            raise UsageError("--concurrency does not apply to --find-max --by rate (it searches arrival rates)")
        if search.by != "rate" and given["--concurrency"]:
            raise UsageError(
                "--concurrency does not apply to --find-max (it chooses the concurrency levels; start it with "
                "--find-start)"
            )
        if search.by != "rate" and given["--rate"]:
            raise UsageError(
                "--rate does not apply to --find-max --by concurrency (search rates with --by rate; --rate then "
                "sets the first level)"
            )
    elif search.by != "concurrency":
        raise UsageError("--by applies to --find-max only (the dimension the capacity search grows)")
    searching = search.find_limit or bool(search.find_max)
    for flag, on in (
        ("--find-start", search.find_start is not None),
        ("--find-ceiling", search.find_ceiling is not None),
    ):
        if on and not searching:
            raise UsageError(f"{flag} applies to --find-max or --find-limit only; give one of them or leave it out")
    if not search.find_max:
        for flag, on in (
            ("--find-precision", search.find_precision != 0.1),
            ("--find-repeats", search.find_repeats != 3),
        ):
            if on:
                raise UsageError(f"{flag} applies to --find-max only")
    if search.limit_cap != 5000 and not search.find_limit:
        raise UsageError("--limit-cap applies to --find-limit only")
    if given["--arrival poisson"] and load.rate is None and not (search.find_max and search.by == "rate"):
        raise UsageError("--arrival poisson applies to an open loop (--rate) only")
    if load.time_scale != 1.0 and load.replay is None:
        raise UsageError("--time-scale applies to --replay only (it scales the trace's time gaps)")


def _plan(load: LoadShape, search: SearchOptions) -> Plan:
    chosen = [x for x in (load.concurrency, load.rate, load.stages, load.replay) if x is not None]
    if len(chosen) > 1:
        raise UsageError("choose one load model: --concurrency, --rate, --stages or --replay")
    _refuse_inapplicable(load, search)
    duration = seconds("--duration", load.duration) if load.duration not in (None, "", "0") else None
    warmup = seconds("--warmup", load.warmup)
    if load.replay is not None:
        if load.time_scale <= 0:
            raise UsageError(f"--time-scale must be positive, got {load.time_scale:g}")
        try:
            entries = load_trace(load.replay)
        except WorkloadError as exc:
            raise UsageError(str(exc)) from None
        bounds = Bounds(duration=None if load.duration in (None, "", "0", "30s") else duration, requests=load.requests)
        return Plan("replay", bounds, replay=tuple(entries), time_scale=load.time_scale, replay_name=load.replay.name)
    if duration is None and load.requests is None and load.stages is None:
        raise UsageError("give --duration or --requests (a run must end by itself)")
    bounds = Bounds(duration=duration, requests=load.requests, warmup=warmup, max_errors=load.max_errors)
    try:
        if load.stages is not None:
            return Plan("stages", bounds, stages=parse_stages(load.stages))
        if load.rate is not None:
            if load.rate <= 0:
                raise UsageError(f"--rate must be positive, got {load.rate:g}")
            return Plan("open", bounds, rate=load.rate, arrival=load.arrival)
        return Plan("closed", bounds, levels=parse_levels(load.concurrency or "1"))
    except PlanError as exc:
        raise UsageError(str(exc)) from None


def _workload(w: WorkloadOptions) -> Workload:
    if w.workload is not None or w.tokenizer != "none":
        from tailgate.bench.shapes import build_workload

        try:
            return build_workload(
                w.workload,
                w.tokenizer,
                w.input_tokens,
                w.max_tokens,
                w.stream,
                w.seed,
                prefix_tokens=w.prefix_tokens,
                turns=w.turns,
                temperature=w.temperature,
            )
        except WorkloadError as exc:
            raise UsageError(str(exc)) from None
    try:
        return Workload(
            input_tokens=LengthDist.parse(w.input_tokens),
            max_tokens=w.max_tokens,
            stream=w.stream,
            temperature=w.temperature,
            prompts=load_prompts(w.prompts) if w.prompts else None,
            accuracy=w.accuracy,
            seed=w.seed,
        )
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None


def run_bench(opts: BenchOptions, console: Console | None = None) -> int:
    """The whole command; returns the exit code."""
    console = console or tables_console(stderr=True)
    try:
        specs, plan, workload = _targets(opts.target), _plan(opts.load, opts.search), _workload(opts.workload)
        if opts.judge.goodput:
            from dataclasses import replace

            from tailgate.bench.goodput import SLO, GoodputError

            try:
                plan = replace(plan, slo=SLO.parse(opts.judge.goodput))
            except GoodputError as exc:
                raise UsageError(str(exc)) from None
        thresholds = [parse_threshold(t) for t in opts.judge.thresholds]
        price = parse_price(opts.workload.price) if opts.workload.price is not None else None
    except (UsageError, ThresholdError) as exc:
        console.print(f"error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    except Exception as exc:  # config errors from --config
        from tailgate.config.loader import ConfigError

        if isinstance(exc, ConfigError):
            console.print("error: invalid config:\n" + "\n".join(f"  {p}" for p in exc.problems), markup=False)
            return EXIT_USAGE
        raise
    if opts.target.preflight:
        problems = asyncio.run(preflight(specs))
        if problems:
            for p in problems:
                console.print(f"error: {p}", markup=False, highlight=False)
            return EXIT_USAGE
    started = time.time()
    progress = Progress(console)
    found = _Found()
    runs: list[Run]
    try:
        trace = open_run_trace(opts.output.otlp_endpoint, opts.target.config, specs, opts.output.command)
    except ValueError as exc:  # an OTEL_* variable or --otlp-endpoint that cannot be used
        console.print(f"error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    try:
        if opts.search.searching:
            try:
                runs, found = _search(opts, specs, workload, plan, progress, trace)
            except UsageError as exc:
                console.print(f"error: {exc}", markup=False, highlight=False)
                return EXIT_USAGE
        elif opts.load.workers > 1:
            runs = run_workers(specs, workload, plan, opts.load.workers, trace)
        else:

            async def main(stop: asyncio.Event) -> list[Run]:
                ticker = asyncio.create_task(progress.lines())
                try:
                    with progress.live:
                        return await run_plan(specs, workload, plan, stop, on_phase=progress.on_phase, trace=trace)
                finally:
                    await stop_task(ticker, reraise=True)

            runs = run(main)
    finally:
        if trace is not None:
            console.print(trace.close().line(), markup=False, highlight=False)
    if price is not None:
        for run_ in runs:
            run_.input_cost = input_cost(run_, price)
    checks = evaluate(thresholds, runs) if thresholds else []
    doc = doc_mod.build_document(runs, command=opts.output.command, started_at=started, thresholds=checks)
    doc.limits, doc.capacity = found.limits, found.capacity
    from tailgate.bench.shapes import ShapedWorkload

    if isinstance(workload, ShapedWorkload):
        doc.workload = workload.describe(_cache_price(opts.target, price))
    _add_findings(doc)
    if opts.load.workers == 1 and progress.phase is not None:
        progress.on_phase(progress.phase)  # reports the last phase as done
    out = tables_console()
    print_summary(out, doc)
    if opts.output.out:
        doc_mod.write_json(doc, opts.output.out)
    if opts.output.csv:
        doc_mod.write_csv(doc, opts.output.csv)
    if opts.output.html:
        from tailgate.bench.report import render_html

        opts.output.html.write_text(render_html(doc), encoding="utf-8")
    for path in (opts.output.out, opts.output.csv, opts.output.html):
        if path:
            console.print(f"wrote {path}", markup=False)
    if checks and breached(checks):
        console.print("thresholds breached: exit 99", markup=False)
        return EXIT_BREACHED
    return EXIT_OK


def _search(
    opts: BenchOptions,
    specs: list[TargetSpec],
    workload: Workload,
    plan: Plan,
    progress: Progress,
    trace: RunTrace | None = None,
) -> tuple[list[Run], _Found]:
    """``--find-max`` / ``--find-limit``: (the runs made, the document's sections they found)."""
    from tailgate.bench.finder import BY, FindSpec
    from tailgate.bench.goodput import SLO, GoodputError
    from tailgate.bench.ratelimit import LimitSpec
    from tailgate.bench.searches import run_find_limit, run_find_max

    if opts.load.workers > 1:
        raise UsageError("--find-max/--find-limit run in one process; leave out --workers")
    if opts.search.by not in BY:
        raise UsageError(f"--by must be one of {', '.join(BY)}, got {opts.search.by!r}")
    try:
        slo = SLO.parse(opts.judge.goodput) if opts.judge.goodput else None
        thresholds = tuple(parse_threshold(t) for t in opts.search.find_max)
    except (GoodputError, ThresholdError) as exc:
        raise UsageError(str(exc)) from None
    rate = opts.search.by == "rate"
    start = opts.search.find_start if opts.search.find_start is not None else (plan.rate if rate and plan.rate else 1.0)
    ceiling = opts.search.find_ceiling if opts.search.find_ceiling is not None else (1000.0 if rate else 1024.0)
    if start <= 0 or ceiling < start:
        raise UsageError(f"--find-start/--find-ceiling: need 0 < start <= ceiling, got {start:g} and {ceiling:g}")
    if not 0 < opts.search.find_precision < 1 or opts.search.find_repeats < 1:
        raise UsageError("--find-precision must be in (0, 1) and --find-repeats >= 1")
    bounds = plan.bounds

    async def main(stop: asyncio.Event) -> tuple[list[Run], _Found]:
        runs: list[Run] = []
        found = _Found()
        with progress.live:
            if opts.search.find_limit:
                lspec = LimitSpec(
                    start=opts.search.find_start or 2.0,
                    ceiling=opts.search.find_ceiling or 2000.0,
                    cap=opts.search.limit_cap,
                    step_s=bounds.duration or 5.0,
                    warmup_s=bounds.warmup,
                )
                made, found.limits = await run_find_limit(
                    specs, workload, lspec, stop, slo=slo, on_phase=progress.on_phase, trace=trace
                )
                runs += made
            if thresholds:
                fspec = FindSpec(
                    thresholds, opts.search.by, start, ceiling, opts.search.find_precision, opts.search.find_repeats
                )
                made, cap = await run_find_max(
                    specs,
                    workload,
                    bounds,
                    fspec,
                    stop,
                    slo=slo,
                    arrival=plan.arrival,
                    on_phase=progress.on_phase,
                    trace=trace,
                )
                offset = len(runs)
                for entry in cap:
                    entry.runs = [offset + i for i in entry.runs]
                found.capacity = cap
                runs += made
        return runs, found

    return run(main)


@dataclass
class _Found:
    """What a search adds to the document: ``limits`` (--find-limit) and ``capacity`` (--find-max)."""

    limits: list[LimitEntry] | UnsetType = UNSET
    capacity: list[Capacity] | UnsetType = UNSET


def _add_findings(doc: BenchDocument) -> None:
    """The document's rate-limit flags (and their notes)."""
    from tailgate.bench.ratelimit import assess

    flags = assess(doc.runs)
    doc.rate_limits = flags
    doc.notes += [f"{f.target}: {f.flag}" for f in flags]
