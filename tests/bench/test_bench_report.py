"""The offline HTML report of a bench run: structure, escaping, edge cases, the CLI, and a real Chromium render."""

from __future__ import annotations

import json
import random
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from _require import CHROMIUM, require_chromium
from tailgate.bench.document import build_document, check_document
from tailgate.bench.report import render_html
from tailgate.bench.schema import BenchDocument
from tailgate.cli import main
from tailgate.stats import LatencyHistogram

ROOT = Path(__file__).resolve().parents[2]
KINDS = {"latency-vs-load", "cdf", "timeline", "targets"}


def _hist(rng: random.Random, n: int, median_ms: float) -> LatencyHistogram:
    h = LatencyHistogram()
    h.record_many(rng.lognormvariate(0, 0.35) * median_ms for _ in range(n))
    return h


def _run(rng: random.Random, target: str, concurrency: int, slow: float) -> dict[str, Any]:
    """One closed-loop level with histogram-backed metrics, a timeline and (at c=50 on 'slow') errors."""
    n, scale = 200, slow * (1 + concurrency / 20)
    hists = {
        "ttft_ms": _hist(rng, n, 40 * scale),
        "e2e_ms": _hist(rng, n, 900 * scale),
        "itl_ms": _hist(rng, n * 20, 8 * scale),
        "tpot_ms": _hist(rng, n, 9 * scale),
    }
    errors = {"rate_limited": 12, "timeout": 3} if (target == "slow" and concurrency == 50) else {}
    return {
        "target": {"name": target, "base_url": f"http://127.0.0.1:900{len(target)}/v1", "model": "m"},
        "load": {"mode": "closed", "concurrency": concurrency},
        "requests": n + sum(errors.values()),
        "successes": n,
        "errors": errors,
        "error_examples": {"rate_limited": "HTTP 429: rate limited", "timeout": "no first byte in 30 s"}
        if errors
        else {},
        "error_rate": sum(errors.values()) / (n + sum(errors.values())),
        "throughput": {"duration_s": 20.0, "req_per_s": n / 20 * concurrency**0.5, "output_tokens_per_s": 900.0},
        "tokens": {"output": n * 100, "estimated": False},
        "metrics": {name: dict(h.summary()) for name, h in hists.items()}
        | {
            "output_tokens_per_s": {
                "p50": 50.0,
                "p90": 60.0,
                "p95": 62.0,
                "p99": 70.0,
                "max": 80.0,
                "mean": 52.0,
                "count": n,
            }
        },
        "timeline": [
            {"t": t, "ok": 10 + rng.randint(0, 3), "errors": 2 if errors and t > 12 else 0, "output_tokens": 900}
            for t in range(20)
        ],
        "accuracy": {"right": 48, "total": 50, "pct": 96.0} if concurrency == 1 else None,
        "histograms": {name: h.to_dict() for name, h in hists.items()},
    }


def _data(targets: tuple[str, ...] = ("fast", "slow"), levels: tuple[int, ...] = (1, 10, 50)) -> dict[str, Any]:
    """A results document as a file holds it (decoded JSON)."""
    rng = random.Random(7)
    runs = [_run(rng, t, c, 1.0 + i) for c in levels for i, t in enumerate(targets)]
    return {
        "schema": "tailgate.bench/v1",
        "tailgate_version": "0.1.0",
        "started_at": 1764691200.0,
        "finished_at": 1764691260.0,
        "command": ["tailgate", "bench", "--concurrency", "1,10,50"],
        "runs": runs,
        "decay": [
            {
                "target": t,
                "concurrency": c,
                "p99_e2e_ratio": 1 + c / 20,
                "p99_ttft_ratio": 1 + c / 10,
                "mean_tok_s_ratio": 1 / (1 + c / 40),
                "req_per_s": 10.0 * c**0.5,
                "p99_e2e_ms": None,
                "p99_ttft_ms": None,
                "mean_tok_s": None,
                "output_tokens_per_s": None,
                "output_tokens_per_s_ratio": None,
                "error_rate": 0.0,
            }
            for t in targets
            for c in levels
        ],
        "thresholds": [
            {
                "expr": "p90(e2e)<3s",
                "run": 0,
                "target": None,
                "load": {"mode": "closed", "concurrency": 1},
                "value": 2100.0,
                "limit": 3000.0,
                "unit": "ms",
                "passed": True,
                "note": None,
            },
            {
                "expr": "error_rate<1%",
                "run": 5,
                "target": "slow",
                "load": {"mode": "closed", "concurrency": 50},
                "value": 0.07,
                "limit": 0.01,
                "unit": "fraction",
                "passed": False,
                "note": None,
            },
        ],
        "notes": ["warm-up of 2 s excluded at each level"],
    }


def _doc(targets: tuple[str, ...] = ("fast", "slow"), levels: tuple[int, ...] = (1, 10, 50)) -> BenchDocument:
    return check_document(_data(targets, levels))


class _Page(HTMLParser):
    """Collects the charts (kind → data elements in each), table rows, and anything that would load a resource."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[tuple[str, int]] = []
        self.rows = 0
        self.tags: list[str] = []
        self.loads: list[str] = []
        self._tbody = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        self.loads += [f"{k}={v}" for k, v in attrs if k in ("src", "href")]
        if tag == "svg" and a.get("class") == "chart":
            self.charts.append((a.get("data-chart") or "", 0))
        elif tag in ("path", "rect") and a.get("class") == "data" and self.charts:
            kind, n = self.charts[-1]
            self.charts[-1] = (kind, n + 1)
        self._tbody = self._tbody or tag == "tbody"
        self.rows += tag == "tr" and self._tbody

    def handle_endtag(self, tag: str) -> None:
        self._tbody = self._tbody and tag != "tbody"


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


def test_report_has_every_chart_with_data_and_every_table() -> None:
    """Two targets × three levels: the four chart kinds each draw data, the tables are filled."""
    html = render_html(_doc())
    page = _parse(html)
    kinds = {k for k, n in page.charts if n > 0}
    assert kinds == KINDS
    assert sum(k == "timeline" for k, _ in page.charts) == 6
    assert page.rows >= 6 + 2 + 6 + 2 + 2  # summary, errors, decay, thresholds, accuracy (+ targets)
    for text in ("PASS", "FAIL", "HTTP 429: rate limited", "c=50", "96", "warm-up of 2 s"):
        assert text in html


def test_report_is_self_contained() -> None:
    """No script, no external resource, no URL except the target base URLs shown as text."""
    data = _data()
    for run in data["runs"]:
        run["target"]["base_url"] = "127.0.0.1:9001"
    html = render_html(check_document(data))
    page = _parse(html)
    assert "script" not in page.tags
    assert page.loads == []
    assert "http://" not in html
    assert "https://" not in html


def test_outside_text_is_escaped() -> None:
    """A hostile target name and error example come out as text, never as markup."""
    data = _data(targets=("<script>alert(1)</script>",), levels=(1, 50))
    data["runs"][1]["errors"] = {"malformed": 1}
    data["runs"][1]["error_examples"] = {"malformed": '<img src=x onerror="alert(2)">'}
    html = render_html(check_document(data))
    assert "<script>" not in html
    assert "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    page = _parse(html)
    assert "script" not in page.tags
    assert "img" not in page.tags


def test_one_run_only() -> None:
    """A single run still draws all four chart kinds."""
    page = _parse(render_html(_doc(targets=("solo",), levels=(10,))))
    assert {k for k, n in page.charts if n > 0} == KINDS


def test_no_successful_requests_says_so() -> None:
    """A run where everything failed (null metrics, empty histograms): no latency chart, a sentence instead."""
    data = _data(targets=("down",), levels=(1,))
    run = data["runs"][0]
    run.update(successes=0, errors={"connect": 200}, error_examples={"connect": "connection refused"}, error_rate=1.0)
    run["metrics"] = {
        name: dict.fromkeys(("p50", "p90", "p95", "p99", "max", "mean"), None) | {"count": 0} for name in run["metrics"]
    }
    run["histograms"] = {"e2e_ms": LatencyHistogram().to_dict()}
    html = render_html(check_document(data))
    page = _parse(html)
    assert "no successful requests" in html
    assert [k for k, _ in page.charts] == ["timeline"]
    assert "connection refused" in html


def test_missing_histograms_are_named() -> None:
    """Without histograms the CDFs are skipped and the report says for which runs."""
    data = _data(levels=(1,))
    for run in data["runs"]:
        run.pop("histograms")
    html = render_html(check_document(data))
    assert "cdf" not in {k for k, _ in _parse(html).charts}
    assert "no histogram for: fast · c=1 (TTFT)" in html


def test_empty_document_renders() -> None:
    """Not even a run: still a valid page with the sections explaining what is missing."""
    html = render_html(build_document([], command=[], started_at=0.0))
    assert "no runs" in html
    assert _parse(html).charts == []


def test_cli_report_writes_html(tmp_path: Path) -> None:
    """`tailgate report results.json --html out.html --csv out.csv` writes both; a non-results file exits 2."""
    src, out, csv = tmp_path / "results.json", tmp_path / "out.html", tmp_path / "out.csv"
    src.write_text(json.dumps(_data()), encoding="utf-8")
    result = CliRunner().invoke(main, ["report", str(src), "--html", str(out), "--csv", str(csv)])
    assert result.exit_code == 0, result.output
    assert len(csv.read_text(encoding="utf-8").splitlines()) == 1 + 6
    assert {k for k, n in _parse(out.read_text(encoding="utf-8")).charts if n} == KINDS
    src.write_text('{"hello": 1}', encoding="utf-8")
    bad = CliRunner().invoke(main, ["report", str(src), "--html", str(out)])
    assert bad.exit_code == 2
    assert "not a tailgate bench results document" in bad.output


@pytest.mark.timeout(60)
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    """Real Chromium draws every chart with a size and its data paths, without console errors; screenshot saved."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    out = tmp_path / "report.html"
    out.write_text(render_html(_doc()), encoding="utf-8")
    shot = ROOT / "artifacts" / "bench-report.png"
    shot.parent.mkdir(exist_ok=True)
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    args += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=args)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            problems: list[str] = []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: problems.append(r.url) if not r.url.startswith("file:") else None)
            page.goto(out.as_uri())
            charts = page.locator("svg.chart")
            kinds = set()
            for i in range(charts.count()):
                chart = charts.nth(i)
                box = chart.bounding_box()
                assert box is not None
                assert box["width"] > 100
                assert box["height"] > 100
                assert chart.locator("path.data, rect.data").count() > 0
                kinds.add(chart.get_attribute("data-chart"))
            assert kinds == KINDS
            assert page.locator("path.data").count() > 20
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert problems == []
    assert shot.stat().st_size > 10_000
