"""The leaderboard's and the dashboard's quality column over a store written by `tailgate demo`'s stack: samples and
95 % intervals, the same cell on both faces (issue 42's must-show).

The demo's stack (gateway, two simulated providers, the monitor) runs its traffic while the primary answers 20 % of
requests with nothing (the simulator's ``empty_answer_rate``): the gateway counts every answer's signals per
provider × model into the store (``quality_counts``), the monitor grades its canaries (``samples``). Then the CLI's
leaderboard and the dashboard (its read-only page over the store, in headless Chromium) read that store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from _require import CHROMIUM, require_chromium
from tailgate.demo.stack import MODEL, PRIMARY, SECONDARY, StackOptions, start_stack
from tailgate.demo.traffic import Traffic, TrafficShape
from tailgate.ledger.quality import read_rates
from tailgate.ledger.schema import open_db
from tailgate.sim.faults import Faults

CELL = re.compile(r"empty (\d+\.\d)% \[(\d+\.\d)–(\d+\.\d)\] n=(\d+)")
"""The primary's worst signal with its 95 % Wilson interval and the answers it was checked on."""
OK_CELL = re.compile(r"ok n=(\d+)")
"""The secondary: no signal hit, over this many checked answers."""
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


async def _demo_store(db: Path) -> None:
    """The demo's stack and traffic, the primary answering 20 % empty, until each provider has served 60 requests
    and the monitor has probed once."""
    stack = await start_stack(StackOptions(db=db))
    try:
        stack.primary.set_faults(Faults(empty_answer_rate=0.2))
        traffic = Traffic(stack.url, MODEL, TrafficShape(rate=25.0, batch_share=0.2))
        sending = asyncio.create_task(traffic.run())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 90.0
        while True:
            served = Counter(r.provider for r in traffic.records if r.ok)
            if min(served[PRIMARY], served[SECONDARY]) >= 60 and stack.monitor and stack.monitor.rounds:
                break
            assert loop.time() < deadline, (served, stack.monitor and stack.monitor.rounds)
            await asyncio.sleep(0.2)
        traffic.stop()
        await sending
        await traffic.drain(30.0)
    finally:
        await stack.close()  # the last quality counts and traffic minutes are written


def _leaderboard(db: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "tailgate", "leaderboard", "--db", str(db), "--window", "1h", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _check_cell(cell: str, counts: dict[str, int]) -> None:
    """``empty 19.4% [15.9–23.5] n=400``: the rate of the counts in the store, inside its interval."""
    m = CELL.fullmatch(cell)
    assert m is not None, cell
    pct, lo, hi, n = float(m[1]), float(m[2]), float(m[3]), int(m[4])
    assert n == counts["checked"] >= 60
    assert pct == round(100.0 * counts["hits"] / counts["checked"], 1)
    assert 0.0 < lo < pct < hi < 100.0
    assert 10.0 <= pct <= 30.0  # 20 % served empty


@pytest.mark.slow  # the demo's traffic until both providers served 60 requests: 10-20 s
@pytest.mark.timeout(180)
async def test_the_quality_column_of_a_demo_store_has_samples_and_intervals_on_the_leaderboard_and_dashboard(
    tmp_path: Path,
) -> None:
    require_chromium()
    from playwright.async_api import async_playwright

    from tailgate.monitor.serve import build_app, start

    db = tmp_path / "demo.db"
    await _demo_store(db)
    with contextlib.closing(open_db(db)) as conn:  # what the gateway wrote: the counts both faces must show
        stored = read_rates(conn, since=time.time() - 3600.0, until=time.time())[(PRIMARY, MODEL)]["empty_answer"]

    # The CLI: --json carries every signal's counts and interval; the table's quality column the worst one.
    rows = {(r["provider"], r["model"]): r for r in json.loads(_leaderboard(db, "--json"))["rows"]}
    primary, secondary = rows[(PRIMARY, MODEL)], rows[(SECONDARY, MODEL)]
    empty = primary["quality"]["empty_answer"]
    assert empty["checked"] >= 60
    assert empty["hits"] > 0
    assert empty["low_pct"] < empty["pct"] < empty["high_pct"]
    assert secondary["quality"]["empty_answer"]["hits"] == 0
    assert secondary["quality"]["empty_answer"]["high_pct"] > 0.0  # 0 of n still has an upper bound
    assert (stored.checked, stored.hits) == (empty["checked"], empty["hits"])
    table = _leaderboard(db, "--columns", "provider,model,quality")
    by_provider = {line.split()[0]: " ".join(line.split()[2:]) for line in table.splitlines() if line.split()}
    _check_cell(by_provider[PRIMARY], empty)
    ok = OK_CELL.fullmatch(by_provider[SECONDARY])
    assert ok is not None, by_provider
    assert int(ok[1]) >= 60
    # the canaries the monitor graded have their own column, with samples and an interval too
    assert primary["accuracy_n"] is not None
    assert primary["accuracy_n"] >= 1

    # The dashboard over the same store (read-only, as `tailgate monitor --serve` mounts it), in Chromium.
    runner, url = await start(build_app(db), "127.0.0.1", 0)
    problems: list[str] = []
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1400, "height": 1000})
                page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
                await page.goto(url)
                await page.wait_for_selector("body[data-loaded]", timeout=15_000)
                every = await page.locator("#leaderboard tbody td").all_text_contents()
            finally:
                await browser.close()
    finally:
        await runner.cleanup()
    assert problems == []
    assert by_provider[PRIMARY] in every, every  # the same cell as the CLI's
    assert by_provider[SECONDARY] in every, every
