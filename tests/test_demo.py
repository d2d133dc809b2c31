"""`tailgate demo`: the drill's arithmetic on synthetic records, and the real command as a subprocess."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tailgate.demo.drill import DrillPlan, PhaseWindow, RequestRecord, analyse, configured_shares, cutover_time
from tailgate.routing import Route

T0 = 1_796_000_000.0  # wall-clock seconds: the drill works on Unix times, where float steps are ~0.2 µs


def _sends(start: float, end: float, rate: float) -> list[float]:
    n = int((end - start) * rate)
    return [start + i / rate for i in range(n)]


def test_cutover_is_the_last_arrival_after_which_under_one_percent_reach_the_primary() -> None:
    """Five failures then silence: the cut-over is the fifth arrival, 0.4 s after the fault."""
    sends = _sends(T0 - 4, T0 + 4, 15)
    arrivals = [T0 - 0.3, T0 + 0.01, T0 + 0.1, T0 + 0.2, T0 + 0.3, T0 + 0.4]
    cut = cutover_time(T0, T0 + 4, sends, arrivals)
    assert cut is not None
    assert cut == pytest.approx(0.4, abs=1e-3)


def test_a_lone_trial_request_later_does_not_undo_a_cutover() -> None:
    """One half-open trial among ~580 later requests stays under 1%: the cut-over is the end of the stream."""
    sends = _sends(T0, T0 + 40, 15)
    arrivals = [*sends[:16], T0 + 20.0]
    cut = cutover_time(T0, T0 + 40, sends, arrivals)
    assert cut is not None
    assert cut == pytest.approx(1.0, abs=1e-3)


def test_no_cutover_while_the_primary_keeps_a_share() -> None:
    """A primary still taking every tenth request never cut over (the adaptive floor, a degraded phase)."""
    sends = _sends(T0, T0 + 10, 20)
    arrivals = sends[::10]
    assert cutover_time(T0, T0 + 10, sends, arrivals) is None


def test_analyse_counts_errors_by_when_they_happened_and_finds_readmission() -> None:
    """Phases split by intended send time; failures before/after the first token; re-admission after restore."""
    windows = [
        PhaseWindow("warm-up", T0, T0 + 10),
        PhaseWindow("outage", T0 + 10, T0 + 20),
        PhaseWindow("restored", T0 + 20, T0 + 30),
    ]
    records: list[RequestRecord] = []
    for i, t in enumerate(_sends(T0, T0 + 30, 10)):
        if t < T0 + 10:
            who = "primary" if i % 5 else "secondary"
        elif t < T0 + 23:
            who = "secondary"
        else:
            who = "primary" if i % 5 else "secondary"
        records.append(RequestRecord(t, "interactive", True, True, who, 1, 200, None, True, 1.0, 2.0))
    records.append(RequestRecord(T0 + 10.05, "interactive", True, False, None, 3, 502, "http_5xx", False))
    records.append(RequestRecord(T0 + 10.06, "interactive", True, False, "primary", 1, 200, "cut", True, 1.0))
    arrivals = [*_sends(T0, T0 + 10, 10)[1:], T0 + 10.1, T0 + 10.2, *_sends(T0 + 23, T0 + 30, 8)]
    warm, outage, restored = analyse(windows, records, arrivals, "primary")
    assert warm.served == {"primary": 0.8, "secondary": 0.2}
    assert warm.primary_share_end == pytest.approx(1.0, abs=0.05)
    assert (outage.failed_before_stream, outage.failed_mid_stream) == (1, 1)
    assert outage.errors == {"http_5xx": 1, "cut": 1}
    assert outage.cutover_s is not None
    assert outage.cutover_s == pytest.approx(0.2, abs=1e-3)
    assert outage.ttft_p99 == pytest.approx(1.0, rel=1e-3)
    assert restored.readmitted_s is not None
    assert 3.0 <= restored.readmitted_s <= 3.2
    assert restored.recovered_s is not None
    assert 4.0 <= restored.recovered_s <= 5.5


def test_drill_table_sets_the_served_split_against_the_configured_one() -> None:
    """80/20 with batch reserved for the secondary, 10 % batch: configured 72 / 28; each phase shows both, in
    a table that fits 120 columns."""
    from rich.console import Console

    from tailgate.demo.show import drill_table

    routes = [Route("m", "primary", "m", 80), Route("m", "secondary", "m", 20, frozenset({"batch"}))]
    configured = configured_shares(routes, 0.1)
    assert configured == pytest.approx({"primary": 0.72, "secondary": 0.28})
    window = PhaseWindow("warm-up", T0, T0 + 10)
    records = [
        RequestRecord(T0 + i * 0.1, "interactive", True, True, provider="primary" if i % 4 else "secondary")
        for i in range(100)
    ]
    reports = analyse([window], records, [], "primary")
    console = Console(width=200, record=True)
    table = drill_table(reports, configured)
    console.print(table)
    text = console.export_text()
    assert "configured" in text
    assert "primary / secondary" in text  # the header names the providers once, the cells hold the shares
    row = next(line for line in text.splitlines() if line.lstrip().startswith("warm-up"))
    assert "72% / 28%" in row  # configured
    assert "75% / 25%" in row  # served
    assert Console(width=200).measure(table).maximum <= 120  # the tables module's rule: fits 120 columns


def test_drill_phases_scale_to_the_duration() -> None:
    """--duration 20 gives 4 s phases and 8 s after the restore; without a duration the drill is longer."""
    assert DrillPlan.for_duration(20) == DrillPlan(4, 4, 4, 8)
    assert DrillPlan.for_duration(None).total > 60


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TAILGATE_DB"}
    env["TMPDIR"] = str(tmp_path)  # the temporary store goes here (and must be gone afterwards)
    env["COLUMNS"] = "200"
    return env


@pytest.mark.timeout(90)
def test_demo_duration_20_runs_the_drill_and_reports_a_cutover(tmp_path: Path) -> None:
    """`tailgate demo --duration 20` as a real process: exits 0, prints URLs and a cut-over of a few seconds."""
    proc = subprocess.run(
        [sys.executable, "-m", "tailgate", "demo", "--duration", "20"],
        capture_output=True,
        text=True,
        timeout=80,
        env=_env(tmp_path),
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert re.search(r"gateway\s+http://127\.0\.0\.1:\d+/v1", out), out
    assert "from openai import OpenAI" in out
    match = re.search(r"outage cut-over: ([0-9.]+) s", out)
    assert match is not None, out
    # The breaker opens after 5 failures in a row: at ~10 req/s to the primary that is well under a second;
    # 3 s leaves room for a loaded test machine but not for a cut-over that needed the cool-down.
    assert float(match.group(1)) <= 3.0, out
    assert re.search(r"outage errors: 0 of \d+ requests failed", out), out
    assert not list(tmp_path.glob("tailgate-demo-*")), "the temporary store was not removed"


@pytest.mark.timeout(60)
def test_demo_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    """Ctrl-C while traffic runs: every piece stops, no traceback, exit status 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailgate", "demo", "--no-drill"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(tmp_path),
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "serving" in line:
            break
    time.sleep(3.0)  # let requests be in flight
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    out = "".join(lines) + rest
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert re.search(r"served \d+ of \d+ requests", out), out


@pytest.mark.timeout(60)
async def test_demo_without_duration_ends_after_the_drill_with_a_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --duration or --keep the demo returns by itself after the drill's report, with the verdict and the
    dashboard's URL (the drill's phases shortened here; the default ones take ~90 s)."""
    import asyncio

    from rich.console import Console

    from tailgate.demo import DemoOptions, run_demo

    monkeypatch.setattr(DrillPlan, "for_duration", classmethod(lambda cls, d: cls(2.0, 2.0, 2.0, 3.0)))
    console = Console(record=True, width=200, force_terminal=False)
    await run_demo(asyncio.Event(), DemoOptions(db=tmp_path / "demo.db"), console=console)
    out = console.export_text()
    assert "the demo ends after its report" in out
    assert re.search(r"verdict: (PASS|CHECK) — ", out), out
    assert re.search(r"dashboard\s+http://127\.0\.0\.1:\d+/dashboard closes now: the demo is done", out), out
    assert "tailgate demo --keep" in out


def test_demo_keep_and_duration_are_refused_together() -> None:
    """--keep (serve until Ctrl-C) with --duration (stop after S s) is a usage error naming both."""
    from click.testing import CliRunner

    from tailgate.cli import main

    result = CliRunner().invoke(main, ["demo", "--keep", "--duration", "5"])
    assert result.exit_code == 2
    assert "--keep serves until Ctrl-C and --duration stops after S seconds" in result.stderr
