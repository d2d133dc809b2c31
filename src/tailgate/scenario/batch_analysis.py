"""A scenario's batch, judged from the run's records (docs/scenarios.md, "A batch beside the load").

Every number comes from a measurement: the client's samples (interactive latency and failures), the gateway's
ledger (who served each request, each batch line's lane, tokens and cost), the simulators' truth (what each
provider received), the batch object and files the client read back, and the store's count of waiting lines.
Five checks, each against the issue's bound:

- ``ttft_p90_ratio`` ≤ 1.05: the interactive P90 TTFT with the batch ÷ the same in the run without it;
- ``interactive_disturbed`` ≤ 0: interactive requests refused or moved with the batch, minus without it;
- ``completed_in_window`` ≤ 1: the batch's time (created → completed) ÷ its window, judged only when it
  completed with every ``custom_id`` answered exactly once (otherwise not ok);
- ``lane_spare_share`` ≥ 0.9: the least share, over the paced providers the batch's alias routes to, of the spare
  pacing budget the lane used while the batch had lines waiting (:class:`~tailgate.scenario.schema.SpareUse`);
- ``cost_ratio`` ≤ 0.55: the batch's ledger cost ÷ the same lines priced as interactive requests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tailgate.config.schema import GatewayConfig
from tailgate.ledger import LedgerRow
from tailgate.routing import Route
from tailgate.routing.promises import configured_split
from tailgate.scenario.batch_client import BatchRecord
from tailgate.scenario.config import ScenarioConfig
from tailgate.scenario.runner import UNTAGGED, PolicyRecord
from tailgate.scenario.schema import BatchOutcome, BatchPath, Check, InteractiveSide, SpareUse
from tailgate.stats import LatencyHistogram

__all__ = ["BATCH_LANES", "LIMITS", "analyze_batch"]

BATCH_LANES = ("batch-lane", "provider-batch")
"""The ledger lanes of a batch's lines."""
LIMITS: dict[str, tuple[str, float]] = {
    "ttft_p90_ratio": ("<=", 1.05),
    "interactive_disturbed": ("<=", 0.0),
    "completed_in_window": ("<=", 1.0),
    "lane_spare_share": (">=", 0.9),
    "cost_ratio": ("<=", 0.55),
}
"""Each check's bound (the issue's must-show)."""
_PROGRESS_POINTS = 200


def _check(name: str, value: float | None, ok: bool | None = None) -> Check:
    op, limit = LIMITS[name]
    if value is None:  # nothing to judge by; a given verdict (a batch that never completed) still stands
        return Check(value=None, op=op, limit=limit, ok=None if ok is None or ok else False)
    passed = value <= limit if op == "<=" else value >= limit
    return Check(value=round(value, 4), op=op, limit=limit, ok=passed if ok is None else ok and passed)


def _routes(cfg: ScenarioConfig, alias: str) -> list[Route]:
    return [Route(alias, r.provider, r.model, r.weight, frozenset(r.classes)) for r in cfg.gateway.models[alias].routes]


def _interactive_rows(record: PolicyRecord) -> list[LedgerRow]:
    return [r for r in record.ledger if r.lane == "interactive" and r.traffic_class != "batch"]


def _interactive(cfg: ScenarioConfig, record: PolicyRecord) -> tuple[int, float | None, int, int]:
    """(requests, P90 TTFT ms, refused, moved) of the run's interactive load."""
    rows = _interactive_rows(record)
    batch_ids = {r.request_id for r in record.ledger if r.traffic_class == "batch"}
    samples = [s for s in record.samples if s.result.request_id not in batch_ids]
    ttft = LatencyHistogram()
    refused = 0
    for s in samples:
        if s.result.ok and s.result.ttft_ms is not None:
            ttft.record(s.result.ttft_ms + s.lag_ms)
        elif not s.result.ok:
            refused += 1
    routes = _routes(cfg, cfg.alias)
    shares: dict[str, dict[str, float]] = {}
    moved = 0
    for row in rows:
        cls = row.traffic_class or UNTAGGED
        if cls not in shares:
            split = configured_split(routes, None if cls == UNTAGGED else cls)
            shares[cls] = {r.provider: v for r, v in split.items()}
        if row.provider is not None and (row.attempts > 1 or shares[cls].get(row.provider, 0.0) <= 0.0):
            moved += 1
    p90 = round(ttft.percentile(90.0), 1) if ttft.count else None
    return len(samples), p90, refused, moved


def _answers(rec: BatchRecord) -> tuple[int, int, int]:
    """(distinct custom_ids answered, answered more than once, missing) over the output and error files."""
    seen = Counter(str(x.get("custom_id")) for x in [*rec.output, *rec.errors])
    want = {f"line-{i}" for i in range(1, rec.lines + 1)}
    return len(seen.keys() & want), sum(1 for n in seen.values() if n > 1), len(want - seen.keys())


def _paths(gw: GatewayConfig, rows: Sequence[LedgerRow]) -> tuple[dict[str, BatchPath], float, float]:
    paths: dict[str, BatchPath] = {}
    total = as_live = 0.0
    for row in rows:
        path = paths.setdefault(row.lane, BatchPath(lines=0, providers={}, cost=0.0, cost_as_interactive=0.0))
        if row.status < 200 or row.status >= 300:
            continue  # a refused attempt (the lane retries it) or a failed line: billed nothing
        path.lines += 1
        if row.provider is not None:
            path.providers[row.provider] = path.providers.get(row.provider, 0) + 1
        prov = gw.providers.get(row.provider or "")
        if row.cost is None or prov is None or prov.price is None:
            continue
        live = prov.price.quote(row.prompt_tokens, row.output_tokens, row.cached_tokens, at=row.ts).cost
        path.cost += row.cost
        path.cost_as_interactive += live
        total += row.cost
        as_live += live
    for path in paths.values():
        path.cost = round(path.cost, 6)
        path.cost_as_interactive = round(path.cost_as_interactive, 6)
    return paths, total, as_live


def _spare(
    cfg: ScenarioConfig, record: PolicyRecord, rec: BatchRecord, lane_rows: Sequence[LedgerRow]
) -> list[SpareUse]:
    """Per paced provider of the batch's alias: the lane's use of its spare budget while lines were waiting."""
    if rec.submitted_s is None:
        return []
    start = rec.submitted_s
    out: list[SpareUse] = []
    headroom = cfg.gateway.routing.pacing.headroom
    # what each upstream request was, by the x-request-id the gateway sent (probes and the like: neither)
    kind = {r.request_id: "interactive" for r in _interactive_rows(record)}
    kind.update((r.request_id, "batch-lane") for r in lane_rows)
    for route in cfg.gateway.models[cfg.batch_alias].routes:
        limits = cfg.gateway.providers[route.provider].limits
        if limits is None or limits.rpm is None or any(u.provider == route.provider for u in out):
            continue
        p = route.provider
        ends = [record.ledger_t(r) + (r.e2e_ms or 0.0) / 1000.0 for r in lane_rows if r.provider == p]
        end = min(record.duration_s, max([rec.pending_until_s or start, *ends]))
        span = max(0.0, end - start)
        rate = limits.rpm * headroom / 60.0
        took = Counter(
            kind.get(u.request_id or "")
            for u in record.upstream
            if u.provider == p and u.status != 429 and start <= u.t < end
        )
        inter, lane = took["interactive"], took["batch-lane"]
        spare = rate * span - inter
        out.append(
            SpareUse(
                provider=p,
                target_rps=round(rate, 4),
                from_s=round(start, 3),
                to_s=round(end, 3),
                target=round(rate * span, 2),
                interactive=inter,
                spare=round(spare, 2),
                lane=lane,
                share=round(lane / spare, 4) if spare > 0 else None,
            )
        )
    return out


def _progress(rec: BatchRecord) -> list[list[float]]:
    points = rec.progress
    step = max(1, len(points) // _PROGRESS_POINTS + (1 if len(points) % _PROGRESS_POINTS else 0))
    picked = points[::step]
    if points and picked[-1] is not points[-1]:
        picked.append(points[-1])
    return [[float(t), float(c), float(f), float(p)] for t, c, f, p in picked]


def analyze_batch(cfg: ScenarioConfig, record: PolicyRecord, baseline: PolicyRecord | None) -> BatchOutcome:
    """The batch of a run that submitted it, with its checks (``baseline``: the same run without the batch)."""
    rec = record.batch
    assert rec is not None
    rows = [r for r in record.ledger if r.lane in BATCH_LANES]
    paths, cost, as_live = _paths(cfg.gateway, rows)
    answered, twice, missing = _answers(rec)
    took = None
    if rec.created_at is not None and rec.ended_at is not None:
        took = float(rec.ended_at - rec.created_at)
    n, p90, refused, moved = _interactive(cfg, record)
    side = InteractiveSide(requests=n, ttft_p90_ms=p90, refused=refused, moved=moved)
    if baseline is not None:
        bn, bp90, brefused, bmoved = _interactive(cfg, baseline)
        side.baseline_requests, side.baseline_ttft_p90_ms = bn, bp90
        side.baseline_refused, side.baseline_moved = brefused, bmoved
    spare = _spare(cfg, record, rec, [r for r in rows if r.lane == "batch-lane"])
    shares = [u.share for u in spare if u.share is not None]
    whole = rec.status == "completed" and twice == 0 and missing == 0
    checks = {
        "ttft_p90_ratio": _check(
            "ttft_p90_ratio",
            p90 / side.baseline_ttft_p90_ms if p90 is not None and side.baseline_ttft_p90_ms else None,
        ),
        "interactive_disturbed": _check(
            "interactive_disturbed",
            None
            if side.baseline_refused is None or side.baseline_moved is None
            else float(refused + moved - side.baseline_refused - side.baseline_moved),
        ),
        "completed_in_window": _check(
            "completed_in_window", took / rec.window_s if took is not None else None, ok=whole
        ),
        "lane_spare_share": _check("lane_spare_share", min(shares) if shares else None),
        "cost_ratio": _check("cost_ratio", cost / as_live if as_live > 0 else None),
    }
    return BatchOutcome(
        id=rec.batch_id,
        lines=rec.lines,
        endpoint=rec.endpoint,
        completion_window=rec.completion_window,
        window_s=rec.window_s,
        submitted_s=None if rec.submitted_s is None else round(rec.submitted_s, 3),
        status=rec.status,
        took_s=took,
        request_counts=dict(rec.request_counts),
        answered=answered,
        answered_twice=twice,
        missing=missing,
        failed=len(rec.errors),
        error=rec.error,
        paths=dict(sorted(paths.items())),
        cost=round(cost, 6) if rows else None,
        cost_as_interactive=round(as_live, 6) if rows else None,
        reported_cost=rec.reported_cost,
        pending_until_s=None if rec.pending_until_s is None else round(rec.pending_until_s, 3),
        spare=spare,
        baseline=record.baseline,
        interactive=side,
        checks=checks,
        progress=_progress(rec),
    )
