"""`tailgate monitor` and `tailgate leaderboard` through the real command line (click's CliRunner)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner

from conftest import ThreadedSim
from tailgate.cli import main
from tailgate.ledger import open_db
from tailgate.ledger.samples import read_samples
from tailgate.monitor.command import MonitorOptions, monitor_main


def _write_config(tmp_path: Path, url: str, *, extra: str = "") -> Path:
    path = tmp_path / "gw.yaml"
    path.write_text(
        "providers:\n"
        f"  fast: {{base_url: '{url}', api_keys: ['sk-test-0123456789'], price: {{input: 2, output: 3}}, "
        "max_output_tokens: 131072}\n"
        f"{extra}"
        "models:\n"
        "  deepseek-v3.2:\n"
        "    routes:\n"
        "      - {provider: fast, model: up-fast}\n"
    )
    return path


def test_once_probes_stores_and_exits_0(threaded_sim: Callable[..., ThreadedSim], tmp_path: Path) -> None:
    """--once runs one round, prints a line per sample and exits 0; the samples are in --db."""
    sim = threaded_sim("instant")
    config = _write_config(tmp_path, sim.url)
    db = tmp_path / "probe.db"
    result = CliRunner().invoke(main, ["monitor", "--config", str(config), "--once", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "round 0: 3 probes, 3 ok" in result.output
    assert "fast" in result.output
    assert "accuracy" in result.output
    with closing(open_db(db)) as conn:
        assert sorted(s.workload for s in read_samples(conn)) == ["accuracy", "long", "short"]


def test_tailgate_db_env_is_the_default_store(
    threaded_sim: Callable[..., ThreadedSim], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --db the store is $TAILGATE_DB, for monitor and leaderboard alike."""
    sim = threaded_sim("instant")
    config = _write_config(tmp_path, sim.url)
    db = tmp_path / "env.db"
    monkeypatch.setenv("TAILGATE_DB", str(db))
    result = CliRunner().invoke(main, ["monitor", "--config", str(config), "--once", "--workload", "short"])
    assert result.exit_code == 0, result.output
    assert db.exists()
    result = CliRunner().invoke(main, ["leaderboard", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [(r["provider"], r["model"], r["samples"]) for r in doc["rows"]] == [("fast", "up-fast", 1)]


def test_once_with_nothing_reachable_exits_1(tmp_path: Path) -> None:
    """When no probe gets an answer, --once says so and exits 1 (the failures are still stored)."""
    config = _write_config(tmp_path, "http://127.0.0.1:9/v1")
    db = tmp_path / "dead.db"
    result = CliRunner().invoke(main, ["monitor", "--config", str(config), "--once", "--db", str(db)])
    assert result.exit_code == 1, result.output
    assert "nothing could be probed" in result.output
    # where it failed and why, in words (it read "connect from http://…")
    assert "could not connect to http://127.0.0.1:9/v1 (connection refused)" in result.output
    failed = next(line for line in result.output.splitlines() if "could not connect" in line)
    assert " 0 " not in failed  # no E2E of 0 ms for a call that never connected
    with closing(open_db(db)) as conn:
        assert {s.error_class for s in read_samples(conn)} == {"connect"}


def test_bad_config_exits_2_naming_file_line_and_path(tmp_path: Path) -> None:
    """A config error is exit 2 with file:line: path: message, before anything is probed."""
    config = _write_config(tmp_path, "http://127.0.0.1:9/v1", extra="  slow: {base_url: 'ftp://x', weight: 3}\n")
    db = tmp_path / "never.db"
    result = CliRunner().invoke(main, ["monitor", "--config", str(config), "--once", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert f"{config}:3: providers.slow.weight" in result.output
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--interval", "soon"], "--interval"),
        (["--interval", "0s"], "--interval"),
        (["--retention", "forever"], "--retention"),
        (["--once", "--serve"], "cannot be combined"),
        (["--once", "--peak-days", "daily", "--peak-levels", "1,4"], "--peak-days applies to the peak-hour test only"),
        (["--once", "--peak-find-max", "p90(ttft)<1s"], "--peak-find-max applies to the peak-hour test only"),
        (["--once", "--port", "9999"], "--port applies to --serve only"),
        (["--peak-at", "11:00", "--peak-levels", "1,x"], "--peak-levels '1,x': not a list of positive integers"),
        (["--peak-at", "11:00", "--peak-levels", "0,4"], "--peak-levels '0,4'"),
        (["--peak-at", "25:00"], "--peak-at: '25:00' is not a local time HH:MM"),
        (["--peak-at", "11:00", "--peak-days", "weekdays"], "--peak-days: cannot read 'weekdays'"),
        (["--peak-at", "11:00", "--peak-duration", "1week"], "--peak-duration '1week': not a duration"),
        (["--peak-at", "11:00", "--peak-find-max", "fast"], "--peak-find-max 'fast'"),
        (["--retention", "1w"], "use a number of seconds, or units ms, s, m, h, d"),
    ],
)
def test_bad_flags_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    """Unreadable durations and contradictory flags are usage errors naming the flag."""
    config = _write_config(tmp_path, "http://127.0.0.1:9/v1")
    result = CliRunner().invoke(main, ["monitor", "--config", str(config), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_leaderboard_table_json_and_errors(threaded_sim: Callable[..., ThreadedSim], tmp_path: Path) -> None:
    """The leaderboard prints a table (price and max output from --config), JSON with null + insufficient,
    and exits 2 for an unknown sort or a missing database."""
    sim = threaded_sim("instant")
    config = _write_config(tmp_path, sim.url)
    db = tmp_path / "lb.db"
    for _ in range(2):
        result = CliRunner().invoke(main, ["monitor", "--config", str(config), "--once", "--db", str(db)])
        assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["leaderboard", "--db", str(db), "--config", str(config), "--wide"])
    assert result.exit_code == 0, result.output
    assert "up-fast" in result.output
    assert "131,072" in result.output
    assert "n<5" in result.output  # 6 samples: reliability shows, percentiles of 2-4 samples do not
    result = CliRunner().invoke(main, ["leaderboard", "--db", str(db), "--json", "--window", "1h", "--sort", "tok_s"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "tailgate.leaderboard/v1"
    assert (doc["window_s"], doc["sort"], doc["minimums"]["p99"]) == (3600.0, "tok_s", 20)
    (row,) = doc["rows"]
    assert row["samples"] == 6
    assert row["reliability_pct"] == 100.0
    assert row["ttft_p99_ms"] is None
    assert row["insufficient"]["ttft_p99_ms"] == "n<20"
    assert row["price_output"] is None  # no --config: no price
    result = CliRunner().invoke(main, ["leaderboard", "--db", str(db), "--model", "other", "--json"])
    assert json.loads(result.stdout)["rows"] == []
    result = CliRunner().invoke(main, ["leaderboard", "--db", str(db), "--sort", "fastest"])
    assert result.exit_code == 2
    assert "choose from" in result.output
    result = CliRunner().invoke(main, ["leaderboard", "--db", str(tmp_path / "missing.db")])
    assert result.exit_code == 2
    assert "no tailgate database" in result.output


def test_the_config_ledger_path_is_the_store_without_db(
    threaded_sim: Callable[..., ThreadedSim], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --db, a config's ledger.path wins over $TAILGATE_DB: monitor and gateway share one file."""
    sim = threaded_sim("instant")
    shared = tmp_path / "gateway.db"
    config = _write_config(tmp_path, sim.url, extra=f"ledger: {{path: '{shared}'}}\n")
    monkeypatch.setenv("TAILGATE_DB", str(tmp_path / "elsewhere.db"))
    result = CliRunner().invoke(main, ["monitor", "--config", str(config), "--once", "--workload", "short"])
    assert result.exit_code == 0, result.output
    assert shared.exists()
    assert not (tmp_path / "elsewhere.db").exists()
    result = CliRunner().invoke(main, ["leaderboard", "--config", str(config), "--json"])
    assert json.loads(result.stdout)["rows"][0]["samples"] == 1


def test_public_api() -> None:
    """The monitor package exports a small, deliberate list."""
    import tailgate.monitor

    assert sorted(tailgate.monitor.__all__) == [
        "Monitor",
        "MonitorOptions",
        "RoundReport",
        "Target",
        "monitor_main",
        "targets_from_config",
    ]


async def test_once_says_which_provider_it_waits_for_while_one_hangs(tmp_path: Path) -> None:
    """`monitor --once` with a provider that does not answer prints a progress line every `progress_s` naming
    the provider, its workload and how long it has waited (it said nothing for 60 s)."""
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"error": {"message": "released", "type": "server_error"}}, status=503)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", hang)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    lines: list[str] = []

    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("waiting for"):
            release.set()  # the round ends only after a progress line was printed

    config = _write_config(tmp_path, f"http://127.0.0.1:{port}/v1")
    options = MonitorOptions(config, db=tmp_path / "m.db", once=True, workloads=("short",), progress_s=0.05)
    try:
        code = await monitor_main(asyncio.Event(), options, echo)
    finally:
        await runner.cleanup()
    assert code == 1, lines
    waiting = [line for line in lines if line.startswith("waiting for")]
    assert re.fullmatch(r"waiting for fast \(short\) \d+ s", waiting[0]), waiting
    assert any(f"http_5xx (503) from http://127.0.0.1:{port}/v1" in line for line in lines), lines
