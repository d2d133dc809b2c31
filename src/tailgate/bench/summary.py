"""What ``tailgate bench`` prints when a run ends: the per-run summary table, the findings (capacity, limits,
rate-limit flags, goodput) and the prompt cache's line. The document itself is :mod:`tailgate.bench.document`."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tailgate.bench import results as res
from tailgate.bench.schema import Accuracy, BenchDocument, Run, Stats, UnsetType
from tailgate.stats.shown import MINIMUMS, percentile_minimum, wilson
from tailgate.tables import Col, Grid

__all__ = ["accuracy_cell", "print_findings", "print_summary"]


def _fmt(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _q(summary: Stats | None, q: int, digits: int = 0) -> str:
    """A percentile cell, withheld (``n<K``) below the minimums every face uses (tailgate.stats.shown)."""
    n, minimum = (0 if summary is None else summary.count), percentile_minimum(q)
    if n < minimum:
        return "-" if n == 0 else f"n<{minimum}"
    return _fmt(None if summary is None else summary.stat(f"p{q}"), digits)


def accuracy_cell(acc: Accuracy | UnsetType | None) -> str:
    """``86% [64–96] n=14``: right / graded, its 95 % Wilson interval and the task count; ``n<5`` below that."""
    if acc is None or isinstance(acc, UnsetType) or not acc.total:
        return "-"
    right, total = acc.right, acc.total
    if total < MINIMUMS["rate"]:
        return f"n<{MINIMUMS['rate']}"
    lo, hi = wilson(right, total)
    return f"{100.0 * right / total:.0f}% [{100 * lo:.0f}–{100 * hi:.0f}] n={total}"


SUMMARY_COLS = (
    # (column, keep): on a narrow terminal the P50s, answer TTFT and ITL go first; target, load, P99s stay.
    Col("target", "target", 0, left=True),
    Col("load", "load", 0, left=True),
    Col("requests", "requests", 1),
    Col("errors", "errors", 1),
    Col("ok", "n ok", 2),
    Col("req/s", "req/s", 2),
    Col("tok/s", "tok/s", 3),
    Col("ttft_p50", "TTFT\np50", 5),
    Col("ttft_p90", "TTFT\np90", 2),
    Col("ttft_p99", "TTFT\np99", 1),
    Col("ttft_answer_p90", "TTFT answer\np90", 6),
    Col("e2e_p50", "E2E\np50", 5),
    Col("e2e_p90", "E2E\np90", 3),
    Col("e2e_p99", "E2E\np99", 1),
    Col("itl_p50", "ITL\np50", 6),
    Col("itl_p99", "ITL\np99", 4),
)


def print_summary(console: Console, doc: BenchDocument) -> None:
    rows = []
    e2e_n: dict[tuple[str, int], int] = {}
    for run_ in doc.runs:
        m, load = run_.metrics, run_.load
        label = ", ".join(f"{k}={v}" for k, v in load.items() if k != "mode")
        c = load.get_concurrency()
        if load.mode == "closed" and c is not None:
            e2e = m.get("e2e_ms")
            e2e_n[(run_.target.name, c)] = 0 if e2e is None else e2e.count
        rows.append(
            (
                run_.target.name,
                f"{load.mode} {label}",
                str(run_.requests),
                f"{run_.requests - run_.successes}",
                str(run_.successes),
                _fmt(run_.throughput.req_per_s, 1),
                _fmt(run_.throughput.output_tokens_per_s, 0),
                _q(m.get("ttft_ms"), 50),
                _q(m.get("ttft_ms"), 90),
                _q(m.get("ttft_ms"), 99),
                _q(m.get("ttft_answer_ms"), 90),
                _q(m.get("e2e_ms"), 50),
                _q(m.get("e2e_ms"), 90),
                _q(m.get("e2e_ms"), 99),
                _q(m.get("itl_ms"), 50, 1),
                _q(m.get("itl_ms"), 99, 1),
            )
        )
    caption = "percentiles over the successful requests (n ok; ITL over token gaps); 'n<K': fewer than K, withheld"
    cols: tuple[Col, ...] = SUMMARY_COLS
    body: list[tuple[str, ...]] = list(rows)
    if any(r.accuracy for r in doc.runs):
        cols = (*cols, Col("accuracy", "accuracy\n[95% CI]", 1))
        body = [(*row, accuracy_cell(r.accuracy)) for row, r in zip(rows, doc.runs, strict=True)]
    Grid(cols, tuple(body), title="results (ms)", caption=caption).print_to(console)
    if doc.decay:
        p99 = percentile_minimum(99)
        decay_rows = []
        for d in doc.decay:
            n = min(e2e_n.get((d.target, d.concurrency), 0), e2e_n.get((d.target, 1), 0))
            few = n < p99
            decay_rows.append(
                (
                    d.target,
                    str(d.concurrency),
                    str(n),
                    f"n<{p99}" if few else _fmt(d.p99_e2e_ratio, 2),
                    f"n<{p99}" if few else _fmt(d.p99_ttft_ratio, 2),
                    _fmt(d.mean_tok_s_ratio, 2),
                )
            )
        decay_cols = (
            Col("target", "target", 0, left=True),
            Col("concurrency", "concurrency", 0),
            Col("n", "n (fewer of the two)", 2),
            Col("p99_e2e", "P99 E2E ×", 1),
            Col("p99_ttft", "P99 TTFT ×", 1),
            Col("tok_s", "mean tok/s ×", 1),
        )
        Grid(decay_cols, tuple(decay_rows), title="decay vs concurrency 1").print_to(console)
    print_findings(console, doc)
    for check in doc.thresholds:
        mark = "PASS" if check.passed else "FAIL"
        shown = res.describe_load(check.load)
        console.print(f"{mark} {check.expr} [{check.target}, {shown}]: {check.value}", markup=False)


def print_findings(console: Console, doc: BenchDocument) -> None:
    """Capacity curves and answers, rate-limit findings and flags."""
    for cap in [] if isinstance(doc.capacity, UnsetType) else doc.capacity:
        t = Table(
            "level",
            "verdict",
            "runs",
            "req/s",
            "goodput/s",
            "TTFT p90",
            "TTFT p99",
            "E2E p99",
            "errors",
            title=(f"capacity of {cap.target} by {cap.by}: {' and '.join(cap.thresholds)}"),
        )
        for p in cap.curve:
            t.add_row(
                f"{p.level:g}",
                "pass" if p.passed else "FAIL",
                str(p.repeats),
                _fmt(p.req_per_s, 1),
                _fmt(p.goodput_req_per_s, 1),
                _fmt(p.ttft_ms_p90),
                _fmt(p.ttft_ms_p99),
                _fmt(p.e2e_ms_p99),
                _fmt(p.error_rate * 100 if p.error_rate is not None else None, 1) + "%",
            )
        console.print(t)
        console.print(f"answer: {cap.summary}", markup=False, highlight=False)
        d = cap.decay_at_answer
        if cap.knee is not None or d is not None:
            console.print(
                f"  knee of {cap.knee_metric}: {'-' if cap.knee is None else format(cap.knee, 'g')}; "
                f"decay at the answer vs {None if d is None else d.base_level}: "
                f"P99 E2E ×{_fmt(None if d is None else d.p99_e2e_ratio, 2)}, "
                f"P99 TTFT ×{_fmt(None if d is None else d.p99_ttft_ratio, 2)}, "
                f"mean tok/s ×{_fmt(None if d is None else d.mean_tok_s_ratio, 2)}",
                markup=False,
                highlight=False,
            )
    for r in doc.runs:
        pt = r.prompt_tokens
        if not isinstance(pt, UnsetType):
            console.print(
                f"prompt tokens [{r.target.name}, {res.describe_load(r.load)}]: "
                f"intended {pt.intended_mean:g}, "
                f"the provider counted {pt.usage_mean:g} (usage.prompt_tokens, mean of {pt.count})",
                markup=False,
                highlight=False,
            )
    for r in doc.runs:
        line = _cache_line(r)
        if line:
            console.print(
                f"prompt cache [{r.target.name}, {res.describe_load(r.load)}]: {line}",
                markup=False,
                highlight=False,
            )
    for lim in [] if isinstance(doc.limits, UnsetType) else doc.limits:
        console.print(f"rate limit: {lim.summary}", markup=False, highlight=False)
    for flag in [] if isinstance(doc.rate_limits, UnsetType) else doc.rate_limits:
        console.print(
            f"WARNING {flag.target}: {flag.flag} ({flag.refused} of {flag.requests} requests refused with 429; "
            f"latency above is of admitted requests only, refused ones are reported apart)",
            markup=False,
            highlight=False,
        )


def _cache_line(run_: Run) -> str | None:
    """One report line: the cache-hit rate from usage and, with --price, the input cost per 1k requests."""
    cache = run_.cache
    if isinstance(cache, UnsetType) or not cache.requests:
        return None
    if cache.hit_rate is None:
        line = f"hit rate not reported (no usage of {cache.requests} answers said how many prompt tokens were cached)"
    else:
        line = (
            f"hit rate {cache.hit_rate:.1%} ({cache.cached_tokens:,} of {cache.reported_prompt_tokens:,} "
            "prompt tokens cached, from usage)"
        )
    cost = run_.input_cost
    if cost:
        line += (
            f"; input {cost.per_1k_requests:.4g} {cost.currency} per 1k requests "
            f"({cost.uncached_per_1k_requests:.4g} without cache hits)"
        )
    return line
