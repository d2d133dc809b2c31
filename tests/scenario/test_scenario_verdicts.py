"""The scenario report's verdicts: one sentence per question, computed from the document's numbers."""

from __future__ import annotations

import msgspec

from tailgate.scenario.report import comparison_rows, render_markdown
from tailgate.scenario.schema import (
    Event,
    OverTime,
    ScenarioDocument,
    ScenarioInfo,
    ScenarioRun,
    Section,
    Stats,
)
from tailgate.scenario.verdicts import time_scale_note, verdicts


def _phase(name: str, p99: float, n: int = 200, errors: int = 0) -> Section:
    return Section(
        name=name,
        requests=n,
        errors=errors,
        failed_before_first_token=errors,
        failed_after_first_token=0,
        errors_by_class={},
        ttft_ms=Stats(p50=p99 / 2, p90=p99 / 1.2, p99=p99, count=n - errors),
        e2e_ms=Stats(p50=1.0, p90=2.0, p99=3.0, count=n - errors),
        cache_hit_rate=None,
        gateway_requests=n,
        share={"primary": 0.8, "secondary": 0.2},
        share_by_class={},
        no_provider=0,
        multi_attempt=0,
        cost_per_1k=None,
        provider_e2e_ms={},
        upstream={},
        upstream_requests=n,
        upstream_rate_limited=0,
        upstream_rate_limited_ratio=0.0,
        extra_upstream_ratio=0.0,
    )


def _run(name: str, healthy: float, degraded: float, cutover: float | None, errors: int) -> ScenarioRun:
    phases = [_phase("healthy", healthy), _phase("degraded", degraded, errors=errors), _phase("recovered", healthy)]
    return ScenarioRun(
        name=name,
        policy=name,
        configured_by_class={},
        pacing=True,
        affinity=False,
        stopped_early=False,
        phases=phases,
        overall=_phase("all", degraded, n=600, errors=errors),
        events=[
            Event(at_s=30.0, provider="primary", kind="fault", cutover_s=cutover),
            Event(at_s=90.0, provider="primary", kind="recovery", readmit_s=4.2),
        ],
        over_time=OverTime(bucket_s=1.0, share={}, p99_e2e_ms=[]),
        gateway_counters={},
    )


def _doc(runs: list[ScenarioRun], time_scale: float = 1.0) -> ScenarioDocument:
    info = ScenarioInfo(
        name="degrades",
        file="degrades.yaml",
        description="",
        time_scale=time_scale,
        sim_time_scale=1.0,
        seed=0,
        alias="m",
        routes=[],
        slo={},
        providers={"primary": {}, "secondary": {}},
        load={},
        timeline=[],
        phases=[],
        window_requests=200,
    )
    return ScenarioDocument(
        schema="tailgate.scenario/v1",
        tailgate_version="0",
        started_at="2026-12-07T00:00:00+00:00",
        command=[],
        partial=False,
        scenario=info,
        runs=runs,
    )


DOC = _doc([_run("weighted", 1000.0, 21_000.0, None, 12), _run("adaptive", 1000.0, 1000.0, 2.1, 0)])


def test_one_sentence_per_question_from_the_numbers() -> None:
    """Tail per phase (best first, as a multiple of the healthy phase), cut-over, re-admission, errors."""
    said = verdicts(DOC)
    assert said[0] == "degraded: adaptive kept P99 TTFT at 1.0× the healthy phase's; weighted 21×."
    assert said[1] == "recovered: adaptive kept P99 TTFT at 1.0× the healthy phase's; weighted 1.0×."
    assert said[2] == "fault on primary at 30 s: new traffic left it (<1 %) after adaptive 2.1 s; weighted never."
    assert said[3].startswith("recovery of primary at 90 s: it got half its first-phase share back after")
    assert said[4] == "requests that failed for the client: adaptive 0 of 600 (0.0 %); weighted 12 of 600 (2.0 %)."
    assert len(said) == 5


def test_a_p99_of_too_few_requests_is_withheld() -> None:
    """A phase with fewer than 20 successful requests gives n<20, never a ratio."""
    run = _run("weighted", 1000.0, 3000.0, None, 0)
    run.phases[1].ttft_ms.count = 12
    assert verdicts(_doc([run]))[0] == "degraded: too few requests for a P99 TTFT with any policy (n<20 per phase)."


def test_a_scaled_run_says_so_and_a_one_phase_run_has_no_all_row() -> None:
    """--time-scale other than 1 gives a caveat (also in the Markdown); one phase prints one row per policy."""
    assert time_scale_note(DOC) is None
    scaled = _doc(DOC.runs, time_scale=0.25)
    note = time_scale_note(scaled)
    assert note is not None
    assert note.startswith("run at --time-scale 0.25")
    assert "Note: run at --time-scale 0.25" in render_markdown(scaled)
    one = _doc([msgspec.structs.replace(_run("adaptive", 1.0, 1.0, 1.0, 0), phases=[_phase("steady", 900.0)])])
    assert [r[1] for r in comparison_rows(one)] == ["steady"]
    assert [r[1] for r in comparison_rows(DOC)][:4] == ["healthy", "degraded", "recovered", "all"]


def test_the_comparison_withholds_a_p99_of_too_few_requests() -> None:
    """A phase with 12 successful requests shows its P50/P90 but n<20 for P99, like every other table."""
    few = _phase("short", 900.0, n=12)
    doc = _doc([msgspec.structs.replace(_run("adaptive", 1.0, 1.0, 1.0, 0), phases=[few])])
    [row] = comparison_rows(doc)
    assert row[3:6] == ["450", "750", "n<20"]
    assert row[8] == "n<20"
