"""The leaderboard fits the width it has: snapshots at 80, 120 and 200 columns and piped, never a cut value.

The store has probe samples for three providers (long names, P99s, accuracy with intervals) and a peak-hour
load test per pair, so the widest columns are in play. Snapshots live in ``snapshots/``; set
``TAILGATE_UPDATE_SNAPSHOTS=1`` to rewrite them after an intended change (and read the diff).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from tailgate.ledger.loadtests import LoadTest, insert_load_test
from tailgate.ledger.samples import Sample, insert_samples
from tailgate.ledger.schema import open_db
from tailgate.monitor.board import COLUMN_KEYS, BoardOptions, leaderboard_main

SNAPSHOTS = Path(__file__).parent / "snapshots"
NOW = 1_700_000_000.0  # in the past: the piped run reads up to the real now
PROVIDERS = (
    ("primary-lanyun-shanghai", "/maas/deepseek-ai/DeepSeek-V3.2", 960.0, 119.0, 13),
    ("secondary-bailian", "deepseek-v3.2", 1210.0, 88.0, 12),
    ("aggregator-openrouter", "deepseek/deepseek-v3.2-exp", 2900.0, 48.0, 10),
)


def _store(path: Path) -> Path:
    """96 probes per pair over a day (32 per workload), one failure each, 15 graded tasks; a peak test each."""
    rows: list[Sample] = []
    for provider, model, ttft, tok_s, right in PROVIDERS:
        for i in range(96):
            ts = NOW - 86_000 + i * 895.0
            workload = ("short", "long", "accuracy")[i % 3]
            slow = 1.0 + (i % 16) / 10.0  # spread, so P90 and P99 differ
            if i == 7:
                rows.append(Sample(ts, provider, model, workload, 500, "http_5xx"))
                continue
            graded = None if workload != "accuracy" else (i // 3) % 15 < right
            rows.append(
                Sample(
                    ts,
                    provider,
                    model,
                    workload,
                    200,
                    None,
                    ttft * slow,
                    ttft * slow + 200_000.0 / tok_s,
                    200 if workload == "long" else 12,
                    tok_s / slow if workload == "long" else None,
                    graded,
                    ttft * slow,
                )
            )
    db = path / "board.db"
    with closing(open_db(db)) as conn:
        insert_samples(conn, rows)
        for k, (provider, model, ttft, _, _) in enumerate(PROVIDERS):
            levels: list[dict[str, float]] = [
                {"concurrency": 1, "requests": 30, "errors": 0, "e2e_p99_ms": 3000.0},
                {"concurrency": 48, "requests": 9 if k == 2 else 240, "errors": 0, "e2e_p99_ms": 9000.0},
            ]
            insert_load_test(
                conn,
                LoadTest(
                    NOW - 3600,
                    provider,
                    model,
                    "c=1,48 30s",
                    sum(int(lv["requests"]) for lv in levels),
                    0,
                    ttft * 1.8,
                    ttft * 4.45,
                    ttft * 3,
                    ttft * 6,
                    3.0,
                    32.0 if k != 2 else None,
                    "concurrency",
                    json.dumps(levels),
                ),
            )
    return db


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("board"))


def _table(db: Path, width: int, **kw: object) -> str:
    grids: list[object] = []
    lines: list[str] = []
    options = BoardOptions(db=db, now=NOW, window_s=86_400.0, **kw)  # type: ignore[arg-type]
    assert leaderboard_main(options, lines.append, grids.append) == 0, lines
    (grid,) = grids
    return grid.render(width)  # type: ignore[attr-defined, no-any-return]


# A number cut short by rich ends in "…" (or an ellipsis sits right after a digit, "%", "×" or "/").
CUT = re.compile(r"[\d%×/.\]]…|…[\d]")


def assert_nothing_cut(text: str) -> None:
    """No cell ends in an ellipsis: a value is shown whole or its column is left out."""
    found = [line for line in text.splitlines() if "…" in line]
    assert not found, "truncated cells:\n" + "\n".join(found)


def _shown(text: str) -> list[str]:
    """The column headers of a rendered table (two-line headers joined), left to right.

    Columns are separated by at least two spaces on every line of the table (header and rows).
    """
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("──"))
    width = len(lines[rule])
    body = [line.ljust(width) for line in lines[1:rule]]
    rows = [line.ljust(width) for line in lines[rule + 1 :] if line.startswith(tuple(p for p, *_ in PROVIDERS))]
    blank = [all(line[i] == " " for line in body + rows) for i in range(width)]
    cols, start = [], None
    for i in range(width + 1):
        gap = i == width or (blank[i] and (i + 1 == width or blank[i + 1]))
        if start is None and not gap and i < width and not blank[i]:
            start = i
        elif start is not None and gap:
            cols.append(" ".join(h[start:i].strip() for h in body if h[start:i].strip()))
            start = None
    return cols


def _snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if os.environ.get("TAILGATE_UPDATE_SNAPSHOTS") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no snapshot {name}: run with TAILGATE_UPDATE_SNAPSHOTS=1 once and read it"
    assert text == path.read_text(encoding="utf-8"), f"{name} changed; TAILGATE_UPDATE_SNAPSHOTS=1 to accept"


@pytest.mark.parametrize("width", [80, 120, 200])
def test_the_table_fits_its_width_and_cuts_no_value(store: Path, width: int) -> None:
    """At 80/120/200 columns the table is at most that wide, keeps provider, model, n and both P99s, cuts nothing."""
    text = _table(store, width)
    _snapshot(f"leaderboard-{width}.txt", text)
    assert_nothing_cut(text)
    assert max(len(line) for line in text.splitlines()) <= width
    for whole in ("primary-lanyun-shanghai", "aggregator-openrouter", "/maas/deepseek-ai/DeepSeek-V3.2"):
        assert whole in text
    assert {"provider", "model", "n", "TTFT P90", "TTFT P99", "E2E P99"} <= set(_shown(text))


def test_a_wide_terminal_shows_the_compact_default_and_the_peak_columns(store: Path) -> None:
    """At 200 columns nothing of the compact default is left out; peak P99 of 9 requests is withheld."""
    text = _table(store, 200)
    assert "Left out for width" not in text
    wanted = {"tok/s avg", "tok/s min", "reliability", "accuracy [95% CI]", "peak TTFT P99", "peak decay", "peak n"}
    assert wanted <= set(_shown(text))
    assert "88% [72–95] n=32" in text  # 28 of 32 graded, with the Wilson interval
    agg = next(line for line in text.splitlines() if "aggregator-openrouter" in line)
    assert "n<20" in agg  # its peak test's top level had 9 requests: no P99, no decay


def test_narrow_terminals_leave_columns_out_and_say_so(store: Path) -> None:
    """At 80 columns whole columns go (and the caption names them); the keys stay."""
    text = _table(store, 80)
    assert "Left out for width:" in text
    assert "primary-lanyun-shanghai" in text


def test_wide_and_columns_choose_the_columns(store: Path) -> None:
    """--wide adds P50, snapshot, price ...; --columns shows just those named (provider and model always)."""
    wide = _table(store, 100_000, columns=COLUMN_KEYS)
    assert {"tok/s snapshot", "TTFT P50", "E2E P50", "price in/out per M", "peak capacity"} <= set(_shown(wide))
    assert_nothing_cut(wide)
    few = _table(store, 200, columns=("n", "ttft_p99"))
    assert _shown(few) == ["provider", "model", "n", "TTFT P99"]


def test_the_cut_check_catches_a_planted_truncation(store: Path) -> None:
    """The check fails on a value cut with '…' (planted in the 120-column snapshot)."""
    text = _table(store, 120)
    planted = re.sub(r"(\d\.\d)\d", r"\1…", text, count=1)
    assert planted != text
    with pytest.raises(AssertionError, match="truncated cells"):
        assert_nothing_cut(planted)
    assert CUT.search(planted)


def test_piped_output_is_not_cut_and_columns_narrows_it(store: Path, tmp_path: Path) -> None:
    """`tailgate leaderboard | cat` shows the compact default whole; COLUMNS=80 asks for 80 and gets it."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    args = [sys.executable, "-m", "tailgate", "leaderboard", "--db", str(store), "--window", "30000d"]
    piped = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert piped.returncode == 0, piped.stderr
    assert "Left out for width" not in piped.stdout
    assert_nothing_cut(piped.stdout)
    _snapshot("leaderboard-piped.txt", re.sub(r"last \d+d", "last Nd", piped.stdout))
    narrow = subprocess.run(args, capture_output=True, text=True, env={**env, "COLUMNS": "80"}, timeout=60, check=False)
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    assert_nothing_cut(narrow.stdout)
