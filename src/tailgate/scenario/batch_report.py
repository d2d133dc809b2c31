"""A scenario's batch in the report: one verdict per check, each with its number, and a table row per run.

Reads the results document only (``tailgate.scenario/v1``, the ``batch`` object of a run), so a saved run gives
the same sentences. The checks and their bounds are ``tailgate.scenario.batch_analysis``'s.
"""

from __future__ import annotations

from msgspec import UnsetType

from tailgate.scenario.schema import BatchOutcome, Check, ScenarioDocument, ScenarioRun

__all__ = ["BATCH_HEAD", "batch_rows", "batch_verdicts"]


def _mark(check: Check) -> str:
    bound = f"{check.op} {check.limit:g}"
    if check.ok is None:
        return f"not judged ({bound}: no data)"
    return f"ok ({bound})" if check.ok else f"FAIL (needs {bound})"


def _n(x: int | float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f} ms"


def _ratio(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _batches(doc: ScenarioDocument) -> list[tuple[ScenarioRun, BatchOutcome]]:
    return [(run, run.batch) for run in doc.runs if not isinstance(run.batch, UnsetType)]


def _paths_text(b: BatchOutcome) -> str:
    parts = []
    for lane, path in b.paths.items():
        where = ", ".join(f"{p} {n:,}" for p, n in sorted(path.providers.items())) or "none"
        parts.append(f"{lane} {path.lines:,} lines ({where})")
    return "; ".join(parts) or "no line billed"


def batch_verdicts(doc: ScenarioDocument) -> list[str]:
    """Five sentences per run with the batch, each with its number and whether it met its bound."""
    out = []
    for run, b in _batches(doc):
        head = f"batch ({run.name}):"
        i, c = b.interactive, b.checks
        base = b.baseline or "no baseline run"
        ttft = c["ttft_p90_ratio"]
        out.append(
            f"{head} interactive P90 TTFT {_ms(i.ttft_p90_ms)} with the batch, {_ms(i.baseline_ttft_p90_ms)} "
            f"without it ({base}): {_ratio(ttft.value)}× — {_mark(ttft)}."
        )
        dist = c["interactive_disturbed"]
        out.append(
            f"{head} interactive requests refused or moved: {i.refused + i.moved:,} of {i.requests:,} with the batch "
            f"({i.refused:,} refused, {i.moved:,} moved), {_n(_sum(i.baseline_refused, i.baseline_moved))} without it: "
            f"{_n(dist.value)} because of batch work — {_mark(dist)}."
        )
        done = c["completed_in_window"]
        took = "-" if b.took_s is None else f"{b.took_s:,.0f} s"
        out.append(
            f"{head} {b.id or 'the batch'} {b.status or 'not submitted'} in {took} of its {b.completion_window} "
            f"window ({_ratio(done.value, 4)} of it); {b.answered:,} of {b.lines:,} custom_ids answered, "
            f"{b.failed:,} in the error file, {b.missing:,} missing, {b.answered_twice:,} twice"
            + (f"; {b.error}" if b.error else "")
            + f" — {_mark(done)}."
        )
        lane = c["lane_spare_share"]
        if b.spare:
            spans = "; ".join(
                f"{u.provider}: {u.lane:,} lane requests of {u.spare:,.0f} spare ({u.target:,.0f} at its pacing "
                f"target {u.target_rps:g}/s − {u.interactive:,} interactive) over {u.from_s:.1f}–{u.to_s:.1f} s"
                for u in b.spare
            )
        else:
            spans = "no route of the batch's alias has limits.rpm (no pacing target)"
        out.append(
            f"{head} the lane used {_ratio(lane.value)} of the spare pacing budget while lines waited ({spans}) — "
            f"{_mark(lane)}."
        )
        cost = c["cost_ratio"]
        money = "-" if b.cost is None else f"{b.cost:,.4f}"
        live = "-" if b.cost_as_interactive is None else f"{b.cost_as_interactive:,.4f}"
        out.append(
            f"{head} cost {money} = {_ratio(cost.value)}× the same lines priced as interactive requests ({live}); "
            f"{_paths_text(b)} — {_mark(cost)}."
        )
    return out


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


BATCH_HEAD = [
    "policy",
    "batch",
    "status",
    "took",
    "answered",
    "paths",
    "TTFT P90 ×",
    "refused/moved",
    "lane ÷ spare",
    "cost ×",
]


def batch_rows(doc: ScenarioDocument) -> list[list[str]]:
    """One row per run with the batch: the numbers its verdicts judge."""
    rows = []
    for run, b in _batches(doc):
        c = b.checks
        rows.append(
            [
                run.name,
                f"{b.lines:,} lines",
                b.status or "-",
                "-" if b.took_s is None else f"{b.took_s:,.0f} s",
                f"{b.answered:,}",
                _paths_text(b),
                _ratio(c["ttft_p90_ratio"].value),
                _n(c["interactive_disturbed"].value),
                _ratio(c["lane_spare_share"].value),
                _ratio(c["cost_ratio"].value),
            ]
        )
    return rows
