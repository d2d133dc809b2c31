"""Bench results carry the time to first answer token beside TTFT, and reasoning tokens beside output."""

from __future__ import annotations

import re

from tailgate.bench.document import build_document
from tailgate.bench.report import render_html
from tailgate.bench.results import RunRecorder
from tailgate.bench.schema import Load, Target
from tailgate.upstream import CallResult

TARGET = Target(name="sim", base_url="http://127.0.0.1:1/v1", model="m")
CLOSED = Load(mode="closed", concurrency=1)


def _result(ttft: float, answer: float, reasoning: int | None) -> CallResult:
    return CallResult(
        200,
        None,
        0.0,
        True,
        ttft_ms=ttft,
        e2e_ms=answer + 100.0,
        output_tokens=30,
        tokens_estimated=False,
        ttft_answer_ms=answer,
        reasoning_tokens=reasoning,
    )


def test_answer_ttft_and_reasoning_tokens_survive_merge_and_files() -> None:
    """Recorded, merged across workers, written and read back exactly."""
    a, b = RunRecorder(TARGET, CLOSED), RunRecorder(TARGET, CLOSED)
    for i in range(10):
        a.add(_result(100.0 + i, 900.0 + i, 20), t_done=1.0)
        b.add(_result(50.0, 50.0, None), t_done=1.0)
    a.merge(b)
    d = a.to_dict()
    assert d["tokens"]["reasoning"] == 200
    assert d["metrics"]["ttft_answer_ms"]["count"] == 20
    assert d["metrics"]["ttft_answer_ms"]["max"] >= 909.0 > d["metrics"]["ttft_ms"]["max"]
    back = RunRecorder.from_dict(d).to_dict()
    assert back["metrics"]["ttft_answer_ms"] == d["metrics"]["ttft_answer_ms"]
    assert back["tokens"] == d["tokens"]
    old = dict(d, histograms={k: v for k, v in d["histograms"].items() if k != "ttft_answer_ms"})
    assert RunRecorder.from_dict(old).ttft_answer.count == 0  # files from before the field still load


def test_report_shows_the_answer_ttft_column() -> None:
    """The HTML report's summary table has a TTFT answer column beside TTFT."""
    rec = RunRecorder(TARGET, CLOSED)
    for _ in range(5):
        rec.add(_result(100.0, 700.0, 40), t_done=1.0)
    html = render_html(build_document([rec.to_run()], command=[], started_at=0.0))
    runs = html.split("<h2>Runs</h2>", 1)[1].split("</table>", 1)[0]
    head = re.findall(r"<th[^>]*>(.*?)</th>", runs)
    first_row = runs.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    row = dict(zip(head, re.findall(r"<td[^>]*>(.*?)</td>", first_row), strict=True))
    assert head.index("TTFT answer P90 ms") == head.index("TTFT P90 ms") + 2  # beside TTFT (after its P99)
    assert (row["TTFT P90 ms"], row["TTFT answer P90 ms"], row["requests"]) == ("100", "700", "5")
