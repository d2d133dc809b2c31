"""The results document of a scenario run (``--out results.json``, schema ``tailgate.scenario/v1``)."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
from msgspec import UNSET

from tailgate import __version__
from tailgate.scenario.analysis import WINDOW, analyze_run, phases_of
from tailgate.scenario.batch_analysis import analyze_batch
from tailgate.scenario.config import ScenarioConfig, ScenarioStep
from tailgate.scenario.runner import PolicyRecord
from tailgate.scenario.schema import ConfigEcho, PhaseSpan, ScenarioDocument, ScenarioInfo, Step

__all__ = ["SCHEMA", "build_document", "check_document", "dumps_document", "write_json"]

SCHEMA = "tailgate.scenario/v1"
_RUN_KEYS = ("name", "policy", "hedge", "stopped_early", "overall", "phases", "events", "over_time", "gateway_counters")


def build_document(
    cfg: ScenarioConfig,
    records: Sequence[PolicyRecord],
    *,
    source: str,
    time_scale: float = 1.0,
    command: Sequence[str] = (),
    started_at: dt.datetime | None = None,
    planned: int | None = None,
) -> ScenarioDocument:
    """The whole document: what was run (scenario, load, timeline, phases) and one run object per policy."""
    started = started_at or dt.datetime.now(dt.UTC)
    runs = [analyze_run(cfg, record) for record in records]
    by_label = {record.run.label: record for record in records}
    for run, record in zip(runs, records, strict=True):
        if record.without_batch:
            run.without_batch = True
        if record.batch is not None:
            baseline = by_label.get(record.baseline) if record.baseline is not None else None
            run.batch = analyze_batch(cfg, record, baseline)
    alias = cfg.alias
    routes: list[ConfigEcho] = [r.model_dump(mode="json") for r in cfg.gateway.models[alias].routes]
    partial = any(r.stopped for r in records) or (planned is not None and len(records) < planned)
    return ScenarioDocument(
        schema=SCHEMA,
        tailgate_version=__version__,
        started_at=started.isoformat(timespec="seconds"),
        command=list(command),
        partial=partial,
        scenario=ScenarioInfo(
            name=cfg.name or Path(source).stem,
            file=source,
            description=cfg.description.strip(),
            time_scale=time_scale,
            sim_time_scale=cfg.time_scale,
            seed=cfg.seed,
            alias=alias,
            routes=routes,
            slo=cfg.gateway.routing.slo.model_dump(mode="json"),
            providers={n: p.model_dump(mode="json", exclude_defaults=True) for n, p in cfg.providers.items()},
            load=cfg.load.model_dump(mode="json"),
            timeline=[_step(s) for s in cfg.steps],
            phases=[PhaseSpan(name=p.name, start_s=p.start, end_s=p.end) for p in phases_of(cfg)],
            window_requests=WINDOW,
            batch=UNSET if cfg.batch is None else cfg.batch.model_dump(mode="json"),
        ),
        runs=runs,
    )


def _step(step: ScenarioStep) -> Step:
    return Step(
        at=step.at,
        kind=step.kind,
        phase=UNSET if step.phase is None else step.phase,
        provider=UNSET if step.provider is None else step.provider,
        clear=True if step.clear else UNSET,
        set=UNSET if step.set is None else step.set.model_dump(mode="json", exclude_unset=True),
    )


def check_document(doc: object, *, source: str = "results") -> ScenarioDocument:
    """A ``tailgate.scenario/v1`` document from decoded JSON; ValueError (naming the path) otherwise."""
    if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        raise ValueError(f"{source}: not a {SCHEMA} document (schema: {got!r})")
    runs = doc.get("runs")
    if not isinstance(runs, list):
        raise ValueError(f"{source}: 'runs' must be a list")
    for i, run in enumerate(runs):
        missing = [k for k in _RUN_KEYS if not isinstance(run, Mapping) or k not in run]
        if missing:
            raise ValueError(f"{source}: runs[{i}] lacks {', '.join(missing)}")
    try:
        return msgspec.convert(doc, ScenarioDocument)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{source}: {exc}") from None


def dumps_document(doc: ScenarioDocument) -> str:
    """The document as the file holds it (indent 1, UTF-8 text as is)."""
    return json.dumps(msgspec.to_builtins(doc), indent=1, ensure_ascii=False) + "\n"


def write_json(doc: ScenarioDocument, path: str | os.PathLike[str]) -> None:
    """Write atomically (a temporary file renamed over the target)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(dumps_document(doc), encoding="utf-8")
    tmp.replace(target)
