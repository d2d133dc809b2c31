"""``tailgate bench``: from parsed options to a written report and an exit code (0, 99, or 2)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from tailgate._runtime import run, stop_task
from tailgate.bench import document as doc_mod
from tailgate.bench.cache import input_cost
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
from tailgate.bench.summary import print_summary
from tailgate.bench.thresholds import ThresholdError, breached, evaluate, parse_threshold
from tailgate.bench.workload import LengthDist, Workload, WorkloadError, load_prompts, load_trace
from tailgate.config.schema import PriceConfig
from tailgate.config.units import DURATION_FORMS, parse_duration
from tailgate.tables import console as tables_console

EXIT_OK, EXIT_USAGE, EXIT_BREACHED = 0, 2, 99


class UsageError(ValueError):
    """Bad command-line input; the CLI prints it and exits 2."""


@dataclass
class BenchOptions:
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    api: str = "openai"
    """The targets' protocol: ``openai`` or ``anthropic`` (Anthropic's Messages API; docs/bench.md)."""
    targets: tuple[str, ...] = ()
    provider: str | None = None
    config: Path | None = None
    concurrency: str | None = None
    rate: float | None = None
    arrival: str = "constant"
    stages: str | None = None
    duration: str | None = "30s"
    requests: int | None = None
    warmup: str = "2s"
    max_errors: int | None = None
    input_tokens: str = "128"
    max_tokens: int = 128
    stream: bool = True
    temperature: float | None = None
    prompts: Path | None = None
    replay: Path | None = None
    time_scale: float = 1.0
    accuracy: bool = False
    seed: int = 0
    workers: int = 1
    thresholds: tuple[str, ...] = ()
    out: Path | None = None
    csv: Path | None = None
    html: Path | None = None
    preflight: bool = True
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    # capacity, goodput, rate limits, prompt lengths (docs/bench.md)
    find_max: tuple[str, ...] = ()
    by: str = "concurrency"
    find_start: float | None = None
    find_ceiling: float | None = None
    find_precision: float = 0.1
    find_repeats: int = 3
    goodput: str | None = None
    find_limit: bool = False
    limit_cap: int = 5000
    tokenizer: str = "none"
    workload: str | None = None
    prefix_tokens: int = 2048
    turns: int = 5
    price: str | None = None


def _key(env: str | None, what: str) -> str | None:
    if env is None:
        return None
    value = os.environ.get(env)
    if not value:
        raise UsageError(f"{what}: environment variable {env} is not set")
    return value


def _targets(o: BenchOptions) -> list[TargetSpec]:
    specs: list[TargetSpec] = []
    if o.base_url:
        if not o.model:
            raise UsageError("--base-url needs --model")
        specs.append(
            TargetSpec("target", o.base_url.rstrip("/"), o.model, _key(o.api_key_env, "--api-key-env"), api=o.api)
        )
    for text in o.targets:
        name, sep, rest = text.partition("=")
        if not sep or not name or not rest:
            raise UsageError(f"--target {text!r}: use NAME=URL[,model=M][,key-env=VAR]")
        url, *opts = rest.split(",")
        fields = {}
        for opt in opts:
            k, eq, v = opt.partition("=")
            if not eq or k not in ("model", "key-env"):
                raise UsageError(f"--target {text!r}: unknown option {opt!r} (model=…, key-env=…)")
            fields[k] = v
        model = fields.get("model") or o.model
        if not model:
            raise UsageError(f"--target {text!r}: give model=… or --model")
        specs.append(
            TargetSpec(name, url.rstrip("/"), model, _key(fields.get("key-env"), f"--target {name}"), api=o.api)
        )
    if o.provider or o.config:
        specs.append(_provider_target(o))
    if not specs:
        raise UsageError(
            "nothing to test: give --base-url URL --model M, --target NAME=URL,…, or --provider NAME --config FILE"
        )
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UsageError(f"target names must differ, got {names}")
    return specs


def _provider_target(o: BenchOptions) -> TargetSpec:
    """A provider exactly as the gateway would call it: its base_url, first key, timeouts and headers."""
    from tailgate.config.resolve import load_resolved
    from tailgate.upstream import Timeouts

    if not (o.provider and o.config):
        raise UsageError("--provider and --config go together")
    config, providers = load_resolved(o.config)
    p = providers.get(o.provider)
    if p is None:
        raise UsageError(f"--provider {o.provider!r} is not in {o.config} (known: {', '.join(providers)})")
    model = o.model or next(
        (r.model for m in config.models.values() for r in m.routes if r.provider == o.provider), None
    )
    if model is None:
        raise UsageError(f"--provider {o.provider!r}: no route uses it; give --model")
    t = p.timeouts
    timeouts = Timeouts(connect=t.connect, headers=t.headers, first_token=t.first_token, idle=t.idle, total=t.total)
    base_url = p.base_url
    if o.api == "anthropic":  # the provider's native Anthropic endpoint, as the gateway's passthrough calls it
        if p.anthropic_base_url is None:
            raise UsageError(f"--api anthropic: provider {o.provider!r} has no anthropic_base_url in {o.config}")
        base_url = p.anthropic_base_url
    return TargetSpec(
        p.name, base_url, model, p.api_keys[0] if p.api_keys else None, timeouts, tuple(p.headers.items()), o.api
    )


def _cache_price(o: BenchOptions, price: PriceConfig | None) -> tuple[float, str]:
    """A cached prompt token's price ÷ an uncached one's for the workload's ``input_cost_ratio_all_hits``, and
    where it came from: ``--price``; else the ``--provider``'s ``price`` in ``--config`` (its preset's, unless the
    config sets it) when it has both ``input`` and ``cached_input``; else ``CACHE_HIT_PRICE`` (``default``)."""
    from tailgate.bench.shapes import CACHE_HIT_PRICE

    if price is not None and price.input > 0:
        return price.cached_rate / price.input, "--price"
    if o.provider and o.config:
        from tailgate.config.resolve import load_resolved

        p = load_resolved(o.config)[1].get(o.provider)
        if p is not None and p.price.input > 0 and p.price.cached_input is not None:
            return p.price.cached_input / p.price.input, "provider"
    return CACHE_HIT_PRICE, "default"


_PRICE_FIELDS = ("input", "cached_input", "output", "currency")


def parse_price(text: str) -> PriceConfig:
    """``--price input=2,cached_input=0.2[,output=3][,currency=CNY]`` (per million tokens, as in the config)."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in _PRICE_FIELDS:
            raise UsageError(
                f"--price: cannot read {part!r}; use input=2,cached_input=0.2 (fields: input, "
                "cached_input, output, currency)"
            )
        fields[key] = value.strip()
    if "input" not in fields:
        raise UsageError("--price: give input=… (the price of a million uncached prompt tokens)")
    try:
        return PriceConfig.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(x) for x in first["loc"]) or "price"
        raise UsageError(f"--price: {where}: {first['msg']}") from None


def _seconds(flag: str, text: str | None) -> float:
    try:
        return float(parse_duration(text))
    except (ValueError, TypeError):
        raise UsageError(f"{flag} {text!r}: not a duration; use {DURATION_FORMS}") from None


def _refuse_inapplicable(o: BenchOptions) -> None:
    """Options that do not apply to the chosen mode are refused, naming both (never silently ignored)."""
    given = {
        "--concurrency": o.concurrency is not None,
        "--rate": o.rate is not None,
        "--stages": o.stages is not None,
        "--replay": o.replay is not None,
        "--requests": o.requests is not None,
        "--max-errors": o.max_errors is not None,
        "--arrival poisson": o.arrival != "constant",
        "--workers": o.workers > 1,
    }
    if o.find_limit:
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
    if o.find_max:
        for flag in ("--stages", "--replay"):
            if given[flag]:
                raise UsageError(f"{flag} does not apply to --find-max (it searches concurrency or rate levels)")
        if o.by == "rate" and given["--concurrency"]:
            raise UsageError("--concurrency does not apply to --find-max --by rate (it searches arrival rates)")
        if o.by != "rate" and given["--concurrency"]:
            raise UsageError(
                "--concurrency does not apply to --find-max (it chooses the concurrency levels; start it with "
                "--find-start)"
            )
        if o.by != "rate" and given["--rate"]:
            raise UsageError(
                "--rate does not apply to --find-max --by concurrency (search rates with --by rate; --rate then "
                "sets the first level)"
            )
    elif o.by != "concurrency":
        raise UsageError("--by applies to --find-max only (the dimension the capacity search grows)")
    searching = o.find_limit or bool(o.find_max)
    for flag, on in (
        ("--find-start", o.find_start is not None),
        ("--find-ceiling", o.find_ceiling is not None),
    ):
        if on and not searching:
            raise UsageError(f"{flag} applies to --find-max or --find-limit only; give one of them or leave it out")
    if not o.find_max:
        for flag, on in (("--find-precision", o.find_precision != 0.1), ("--find-repeats", o.find_repeats != 3)):
            if on:
                raise UsageError(f"{flag} applies to --find-max only")
    if o.limit_cap != 5000 and not o.find_limit:
        raise UsageError("--limit-cap applies to --find-limit only")
    if given["--arrival poisson"] and o.rate is None and not (o.find_max and o.by == "rate"):
        raise UsageError("--arrival poisson applies to an open loop (--rate) only")
    if o.time_scale != 1.0 and o.replay is None:
        raise UsageError("--time-scale applies to --replay only (it scales the trace's time gaps)")


def _plan(o: BenchOptions) -> Plan:
    chosen = [x for x in (o.concurrency, o.rate, o.stages, o.replay) if x is not None]
    if len(chosen) > 1:
        raise UsageError("choose one load model: --concurrency, --rate, --stages or --replay")
    _refuse_inapplicable(o)
    duration = _seconds("--duration", o.duration) if o.duration not in (None, "", "0") else None
    warmup = _seconds("--warmup", o.warmup)
    if o.replay is not None:
        if o.time_scale <= 0:
            raise UsageError(f"--time-scale must be positive, got {o.time_scale:g}")
        try:
            entries = load_trace(o.replay)
        except WorkloadError as exc:
            raise UsageError(str(exc)) from None
        bounds = Bounds(duration=None if o.duration in (None, "", "0", "30s") else duration, requests=o.requests)
        return Plan("replay", bounds, replay=tuple(entries), time_scale=o.time_scale, replay_name=o.replay.name)
    if duration is None and o.requests is None and o.stages is None:
        raise UsageError("give --duration or --requests (a run must end by itself)")
    bounds = Bounds(duration=duration, requests=o.requests, warmup=warmup, max_errors=o.max_errors)
    try:
        if o.stages is not None:
            return Plan("stages", bounds, stages=parse_stages(o.stages))
        if o.rate is not None:
            if o.rate <= 0:
                raise UsageError(f"--rate must be positive, got {o.rate:g}")
            return Plan("open", bounds, rate=o.rate, arrival=o.arrival)
        return Plan("closed", bounds, levels=parse_levels(o.concurrency or "1"))
    except PlanError as exc:
        raise UsageError(str(exc)) from None


def _workload(o: BenchOptions) -> Workload:
    if o.workload is not None or o.tokenizer != "none":
        from tailgate.bench.shapes import build_workload

        try:
            return build_workload(
                o.workload,
                o.tokenizer,
                o.input_tokens,
                o.max_tokens,
                o.stream,
                o.seed,
                prefix_tokens=o.prefix_tokens,
                turns=o.turns,
                temperature=o.temperature,
            )
        except WorkloadError as exc:
            raise UsageError(str(exc)) from None
    try:
        return Workload(
            input_tokens=LengthDist.parse(o.input_tokens),
            max_tokens=o.max_tokens,
            stream=o.stream,
            temperature=o.temperature,
            prompts=load_prompts(o.prompts) if o.prompts else None,
            accuracy=o.accuracy,
            seed=o.seed,
        )
    except WorkloadError as exc:
        raise UsageError(str(exc)) from None


def run_bench(o: BenchOptions, console: Console | None = None) -> int:
    """The whole command; returns the exit code."""
    console = console or tables_console(stderr=True)
    try:
        specs, plan, workload = _targets(o), _plan(o), _workload(o)
        if o.goodput:
            from dataclasses import replace

            from tailgate.bench.goodput import SLO, GoodputError

            try:
                plan = replace(plan, slo=SLO.parse(o.goodput))
            except GoodputError as exc:
                raise UsageError(str(exc)) from None
        thresholds = [parse_threshold(t) for t in o.thresholds]
        price = parse_price(o.price) if o.price is not None else None
    except (UsageError, ThresholdError) as exc:
        console.print(f"error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    except Exception as exc:  # config errors from --config
        from tailgate.config.loader import ConfigError

        if isinstance(exc, ConfigError):
            console.print("error: invalid config:\n" + "\n".join(f"  {p}" for p in exc.problems), markup=False)
            return EXIT_USAGE
        raise
    if o.preflight:
        problems = asyncio.run(preflight(specs))
        if problems:
            for p in problems:
                console.print(f"error: {p}", markup=False, highlight=False)
            return EXIT_USAGE
    started = time.time()
    progress = Progress(console)
    extra: dict[str, Any] = {}
    if o.find_max or o.find_limit:
        try:
            runs, extra = _search(o, specs, workload, plan, progress)
        except UsageError as exc:
            console.print(f"error: {exc}", markup=False, highlight=False)
            return EXIT_USAGE
    elif o.workers > 1:
        runs = run_workers(specs, workload, plan, o.workers)
    else:

        async def main(stop: asyncio.Event) -> list[dict[str, Any]]:
            ticker = asyncio.create_task(progress.lines())
            try:
                with progress.live:
                    return await run_plan(specs, workload, plan, stop, on_phase=progress.on_phase)
            finally:
                await stop_task(ticker, reraise=True)

        runs = run(main)
    if price is not None:
        for run_ in runs:
            run_["input_cost"] = input_cost(run_, price)
    checks = evaluate(thresholds, runs) if thresholds else []
    doc = doc_mod.build_document(runs, command=o.command, started_at=started, thresholds=checks)
    describe = getattr(workload, "describe", None)
    if describe is not None:
        extra["workload"] = describe(_cache_price(o, price))
    _add_findings(doc, extra)
    if o.workers == 1 and progress.phase is not None:
        progress.on_phase(progress.phase)  # reports the last phase as done
    out = tables_console()
    print_summary(out, doc)
    if o.out:
        doc_mod.write_json(doc, o.out)
    if o.csv:
        doc_mod.write_csv(doc, o.csv)
    if o.html:
        from tailgate.bench.report import render_html

        o.html.write_text(render_html(doc), encoding="utf-8")
    for path in (o.out, o.csv, o.html):
        if path:
            console.print(f"wrote {path}", markup=False)
    if checks and breached(checks):
        console.print("thresholds breached: exit 99", markup=False)
        return EXIT_BREACHED
    return EXIT_OK


def _search(
    o: BenchOptions, specs: list[TargetSpec], workload: Workload, plan: Plan, progress: Progress
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``--find-max`` / ``--find-limit``: (the runs made, the document's extra sections)."""
    from tailgate.bench.finder import BY, FindSpec
    from tailgate.bench.goodput import SLO, GoodputError
    from tailgate.bench.ratelimit import LimitSpec
    from tailgate.bench.searches import run_find_limit, run_find_max

    if o.workers > 1:
        raise UsageError("--find-max/--find-limit run in one process; leave out --workers")
    if o.by not in BY:
        raise UsageError(f"--by must be one of {', '.join(BY)}, got {o.by!r}")
    try:
        slo = SLO.parse(o.goodput) if o.goodput else None
        thresholds = tuple(parse_threshold(t) for t in o.find_max)
    except (GoodputError, ThresholdError) as exc:
        raise UsageError(str(exc)) from None
    rate = o.by == "rate"
    start = o.find_start if o.find_start is not None else (plan.rate if rate and plan.rate else 1.0)
    ceiling = o.find_ceiling if o.find_ceiling is not None else (1000.0 if rate else 1024.0)
    if start <= 0 or ceiling < start:
        raise UsageError(f"--find-start/--find-ceiling: need 0 < start <= ceiling, got {start:g} and {ceiling:g}")
    if not 0 < o.find_precision < 1 or o.find_repeats < 1:
        raise UsageError("--find-precision must be in (0, 1) and --find-repeats >= 1")
    bounds = plan.bounds

    async def main(stop: asyncio.Event) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        runs: list[dict[str, Any]] = []
        extra: dict[str, Any] = {}
        with progress.live:
            if o.find_limit:
                lspec = LimitSpec(
                    start=o.find_start or 2.0,
                    ceiling=o.find_ceiling or 2000.0,
                    cap=o.limit_cap,
                    step_s=bounds.duration or 5.0,
                    warmup_s=bounds.warmup,
                )
                made, extra["limits"] = await run_find_limit(
                    specs, workload, lspec, stop, slo=slo, on_phase=progress.on_phase
                )
                runs += made
            if thresholds:
                fspec = FindSpec(thresholds, o.by, start, ceiling, o.find_precision, o.find_repeats)
                made, cap = await run_find_max(
                    specs, workload, bounds, fspec, stop, slo=slo, arrival=plan.arrival, on_phase=progress.on_phase
                )
                offset = len(runs)
                for entry in cap:
                    entry["runs"] = [offset + i for i in entry["runs"]]
                extra["capacity"] = cap
                runs += made
        return runs, extra

    return run(main)


def _add_findings(doc: dict[str, Any], extra: dict[str, Any]) -> None:
    """The document's additive sections: capacity, limits, rate-limit flags (and their notes), goodput SLO."""
    from tailgate.bench.ratelimit import assess

    doc.update(extra)
    flags = assess(doc["runs"])
    doc["rate_limits"] = flags
    doc["notes"] += [f"{f['target']}: {f['flag']}" for f in flags]
