"""The results document of a bench run: decay table, JSON (``tailgate.bench/v1``) and CSV, reading back.

Run objects come from :meth:`tailgate.bench.results.RunRecorder.to_run`; the schema is documented in
docs/bench-results.md.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import msgspec

from tailgate import __version__
from tailgate.bench.results import (
    CSV_METRICS,
    ERROR_KEYS,
    SCHEMA,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    STATS,
    ResultsError,
    describe_load,
    target_name,
)
from tailgate.bench.schema import (
    BenchDocument,
    DecayRow,
    Run,
    ThresholdResult,
    UnsetType,
    from_json_obj,
    to_json_obj,
    to_json_obj_map,
)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0.0:
        return None
    return round(a / b, 3)


def decay_table(runs: list[Run]) -> list[DecayRow]:
    """Per target, each closed-loop level as a ratio to that target's concurrency-1 run.

    One row per closed-loop run of a target that has a concurrency-1 run (the baseline row itself
    included, with ratios 1.0), ordered by target (first appearance) then concurrency. A ratio is
    null when either side has no samples. ``[]`` when no target has a concurrency-1 run.
    """
    by_target: dict[str, list[tuple[int, Run]]] = {}
    for run in runs:
        c = run.load.get_concurrency()
        if run.load.mode != "closed" or c is None:
            continue
        by_target.setdefault(target_name(run.target), []).append((c, run))
    rows: list[DecayRow] = []
    for name, target_runs in by_target.items():
        base = next((r for c, r in target_runs if c == 1), None)
        if base is None:
            continue
        b_e2e = base.metric("e2e_ms", "p99")
        b_ttft = base.metric("ttft_ms", "p99")
        b_tok = base.metric("output_tokens_per_s", "mean")
        b_agg = base.throughput.output_tokens_per_s
        for c, run in sorted(target_runs, key=lambda cr: cr[0]):
            e2e = run.metric("e2e_ms", "p99")
            ttft = run.metric("ttft_ms", "p99")
            tok = run.metric("output_tokens_per_s", "mean")
            thr = run.throughput
            rows.append(
                DecayRow(
                    target=name,
                    concurrency=c,
                    p99_e2e_ratio=_ratio(e2e, b_e2e),
                    p99_ttft_ratio=_ratio(ttft, b_ttft),
                    mean_tok_s_ratio=_ratio(tok, b_tok),
                    req_per_s=thr.req_per_s,
                    p99_e2e_ms=e2e,
                    p99_ttft_ms=ttft,
                    mean_tok_s=tok,
                    output_tokens_per_s=thr.output_tokens_per_s,
                    output_tokens_per_s_ratio=_ratio(thr.output_tokens_per_s, b_agg),
                    error_rate=run.error_rate,
                )
            )
    return rows


def build_document(
    runs: list[Run],
    *,
    command: list[str],
    started_at: float,
    thresholds: list[ThresholdResult] | None = None,
    notes: list[str] | None = None,
) -> BenchDocument:
    """The whole ``results.json``: schema tag, provenance, runs, decay table, threshold results."""
    evaluated = list(thresholds or [])
    return BenchDocument(
        schema=SCHEMA,
        tailgate_version=__version__,
        command=list(command),
        started_at=started_at,
        finished_at=round(time.time(), 3),
        runs=runs,
        decay=decay_table(runs),
        thresholds=evaluated,
        thresholds_passed=(all(t.passed is not False for t in evaluated) if evaluated else None),
        notes=list(notes or []),
    )


def _atomic_write(path: str | os.PathLike[str], text: str) -> None:
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dumps_document(doc: BenchDocument) -> str:
    """The document as indented JSON, each histogram's bucket list kept on one line."""
    data = cast("dict[str, object]", to_json_obj(doc))
    compact: dict[str, str] = {}
    shallow_runs: list[object] = []
    for i, run in enumerate(doc.runs):
        shallow = cast("dict[str, object]", to_json_obj(run))
        if not isinstance(run.histograms, UnsetType):
            marker = f"@@tailgate-histograms-{i}@@"
            compact[marker] = json.dumps(to_json_obj_map(run.histograms), separators=(",", ":"), allow_nan=False)
            shallow["histograms"] = marker  # in its place: the key order stays the run's
        shallow_runs.append(shallow)
    data["runs"] = shallow_runs
    text = json.dumps(data, indent=2, allow_nan=False, ensure_ascii=False)
    for marker, body in compact.items():
        text = text.replace(json.dumps(marker), body, 1)
    return text + "\n"


def write_json(doc: BenchDocument, path: str | os.PathLike[str]) -> None:
    """Write the document (atomically: a reader never sees half a file)."""
    _atomic_write(path, dumps_document(doc))


def csv_header() -> list[str]:
    head = [
        "target",
        "model",
        "base_url",
        "load",
        "mode",
        "concurrency",
        "rate",
        "stage",
        "requests",
        "successes",
        "errors",
        "error_rate",
        "req_per_s",
        "output_tokens_per_s",
        "duration_s",
    ]
    head += [f"{m}_{s}" for m in CSV_METRICS for s in STATS]
    head += [f"errors_{k}" for k in ERROR_KEYS]
    return head


Cell = str | int | float | None


def _cell(x: Cell | UnsetType) -> Cell:
    return "" if x is None or isinstance(x, UnsetType) else x


def csv_rows(doc: BenchDocument) -> Iterable[list[Cell]]:
    for run in doc.runs:
        target, load, thr = run.target, run.load, run.throughput
        row: list[Cell | UnsetType] = [
            target_name(target),
            target.model,
            target.base_url,
            describe_load(load),
            load.mode,
            load.concurrency,
            load.rate,
            load.stage,
            run.requests,
            run.successes,
            sum(run.errors.values()),
            run.error_rate,
            thr.req_per_s,
            thr.output_tokens_per_s,
            thr.duration_s,
        ]
        row += [run.metric(m, s) for m in CSV_METRICS for s in STATS]
        row += [run.errors.get(k, 0) for k in ERROR_KEYS]
        yield [_cell(x) for x in row]


def write_csv(doc: BenchDocument, path: str | os.PathLike[str]) -> None:
    """One row per run (see :func:`csv_header`); empty cells where a value is null."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(csv_header())
    w.writerows(csv_rows(doc))
    _atomic_write(path, buf.getvalue())


def check_document(doc: object, *, source: str = "results") -> BenchDocument:
    """Validate the schema tag and shape of decoded JSON; returns the typed document."""
    if not isinstance(doc, dict):
        raise ResultsError(f"{source}: not a tailgate bench results document (top level is not an object)")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith(f"{SCHEMA_NAME}/v"):
        raise ResultsError(
            f"{source}: not a tailgate bench results document (schema is {schema!r}, expected {SCHEMA!r})"
        )
    version_text = schema.removeprefix(f"{SCHEMA_NAME}/v")
    if not version_text.isdigit() or int(version_text) != SCHEMA_VERSION:
        raise ResultsError(
            f"{source}: results schema {schema!r} is not supported by tailgate {__version__}, "
            f"which reads {SCHEMA!r}" + (" (written by a newer tailgate?)" if version_text.isdigit() else "")
        )
    runs = doc.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ResultsError(f"{source}: 'runs' must be a list of run objects")
    for i, run in enumerate(runs):
        for key in ("target", "load", "metrics", "errors", "throughput"):
            if not isinstance(run.get(key), dict):
                raise ResultsError(f"{source}: runs[{i}].{key} is missing or not an object")
    try:
        return from_json_obj(doc, BenchDocument)
    except msgspec.ValidationError as exc:
        raise ResultsError(f"{source}: {exc}") from None


def load_document(path: str | os.PathLike[str]) -> BenchDocument:
    """Read a ``results.json``; a wrong or unsupported schema raises :class:`ResultsError`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ResultsError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{os.fspath(path)}: not JSON ({exc})") from exc
    return check_document(doc, source=os.fspath(path))
