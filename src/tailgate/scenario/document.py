"""The results document of a scenario run (``--out results.json``, schema ``tailgate.scenario/v1``)."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tailgate import __version__
from tailgate.scenario.analysis import WINDOW, analyze_run, phases_of
from tailgate.scenario.config import ScenarioConfig, ScenarioStep
from tailgate.scenario.runner import PolicyRecord

__all__ = ["SCHEMA", "build_document", "check_document", "write_json"]

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
) -> dict[str, Any]:
    """The whole document: what was run (scenario, load, timeline, phases) and one run object per policy."""
    started = started_at or dt.datetime.now(dt.UTC)
    runs = []
    for record in records:
        run = analyze_run(cfg, record)
        hedge = cfg.hedge_of(record.run)
        run["hedge"] = None if hedge is None else hedge.model_dump(mode="json")
        runs.append(run)
    alias = cfg.alias
    routes = [r.model_dump(mode="json") for r in cfg.gateway.models[alias].routes]
    partial = any(r.stopped for r in records) or (planned is not None and len(records) < planned)
    return {
        "schema": SCHEMA,
        "tailgate_version": __version__,
        "started_at": started.isoformat(timespec="seconds"),
        "command": list(command),
        "partial": partial,
        "scenario": {
            "name": cfg.name or Path(source).stem,
            "file": source,
            "description": cfg.description.strip(),
            "time_scale": time_scale,
            "sim_time_scale": cfg.time_scale,
            "seed": cfg.seed,
            "alias": alias,
            "routes": routes,
            "slo": cfg.gateway.routing.slo.model_dump(mode="json"),
            "providers": {n: p.model_dump(mode="json", exclude_defaults=True) for n, p in cfg.providers.items()},
            "load": cfg.load.model_dump(mode="json"),
            "timeline": [_step(s) for s in cfg.steps],
            "phases": [{"name": p.name, "start_s": p.start, "end_s": p.end} for p in phases_of(cfg)],
            "window_requests": WINDOW,
        },
        "runs": runs,
    }


def _step(step: ScenarioStep) -> dict[str, Any]:
    out: dict[str, Any] = {"at": step.at, "kind": step.kind}
    if step.phase is not None:
        out["phase"] = step.phase
    if step.provider is not None:
        out["provider"] = step.provider
    if step.clear:
        out["clear"] = True
    if step.set is not None:
        out["set"] = step.set.model_dump(mode="json", exclude_unset=True)
    return out


def check_document(doc: Any, *, source: str = "results") -> dict[str, Any]:
    """Raise ValueError unless ``doc`` is a ``tailgate.scenario/v1`` document with the run fields."""
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
    return dict(doc)


def write_json(doc: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write atomically (a temporary file renamed over the target)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(target)
