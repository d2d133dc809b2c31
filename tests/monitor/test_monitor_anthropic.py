"""The monitor probes a provider's Anthropic endpoint (``anthropic_base_url``, ``/v1/messages``) like chat, through
the same measurement core, against real in-process simulators (their ``anthropic: true`` presets serve the
Messages API); samples carry ``api`` and the leaderboard keeps the two protocols in separate rows (issue 32)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conftest import SimFactory, ThreadedSim
from sim_truth import truth
from tailgate.cli import main
from tailgate.config.loader import validate_data
from tailgate.config.resolve import resolve_providers
from tailgate.config.schema import GatewayConfig
from tailgate.ledger import open_db
from tailgate.ledger.leaderboard import compute, recent_priors
from tailgate.ledger.samples import SampleStore, read_samples
from tailgate.monitor.runner import Monitor, Target, targets_from_config

ROOT_SUFFIX = "/v1"


def _config(a_url: str, b_url: str) -> GatewayConfig:
    data = {
        "providers": {
            "a": {
                "base_url": a_url,
                "anthropic_base_url": a_url.removesuffix(ROOT_SUFFIX),
                "api_keys": ["sk-a-0123456789"],
            },
            "b": {"base_url": b_url},
        },
        "models": {"m": {"routes": [{"provider": "a", "model": "up-a"}, {"provider": "b", "model": "up-b"}]}},
    }
    return validate_data(data, GatewayConfig, "test-config")


async def test_anthropic_targets_are_probed_at_v1_messages_and_kept_apart(sim: SimFactory, tmp_path: Path) -> None:
    """``apis=("openai", "anthropic")``: the provider with an anthropic_base_url is probed both ways, the other
    only by chat. Each anthropic sample equals the simulator's truth for that request (spoken as anthropic);
    the leaderboard has one row per provider × model × api; the router's priors read chat samples only."""
    a, b = await sim("instant"), await sim("instant")
    cfg = _config(a.url, b.url)
    providers = resolve_providers(cfg)
    targets = targets_from_config(cfg, providers, ("openai", "anthropic"))
    assert targets == [Target("a", "up-a"), Target("b", "up-b"), Target("a", "up-a", "anthropic")]
    assert targets_from_config(cfg) == targets[:2]  # the default stays chat only (no extra probes, no extra cost)
    db = tmp_path / "m.db"
    async with SampleStore(db) as store:
        monitor = Monitor(providers, targets, store)
        try:
            report = await monitor.run_round(0)
        finally:
            await monitor.close()
    assert (len(report.samples), report.ok) == (9, 9), report.summary()
    ant = [s for s in report.samples if s.api == "anthropic"]
    assert {(s.provider, s.model) for s in ant} == {("a", "up-a")}
    assert sorted(s.workload for s in ant) == ["accuracy", "long", "short"]
    truth_a = await truth(a.url)
    by_api: dict[str, list[dict[str, Any]]] = {}
    for rec in truth_a:
        by_api.setdefault(rec["api"], []).append(rec)
    assert sorted(by_api) == ["anthropic", "openai"]
    assert len(by_api["anthropic"]) == 3
    assert {rec["api"] for rec in await truth(b.url)} == {"openai"}
    served = {rec["client_request_id"]: rec for rec in by_api["anthropic"]}
    for s in ant:
        rec = served[f"tailgate-monitor-0-{s.workload}"]
        assert s.status == rec["status"] == 200
        assert s.output_tokens == rec["output_tokens"]
        assert s.ttft_ms is not None
        assert s.e2e_ms is not None
        assert 0 < s.ttft_ms <= s.e2e_ms
        assert s.ttft_answer_ms is not None
    assert [s.accuracy_ok for s in ant if s.workload == "accuracy"] == [True]  # graded from Anthropic text deltas

    with closing(open_db(db)) as conn:
        stored = read_samples(conn)
        now = max(s.ts for s in stored) + 1
        rows = compute(conn, window_s=3600, now=now)
        priors = recent_priors(conn, 3600, now)
    assert sorted((s.provider, s.api) for s in stored if s.workload == "short") == [
        ("a", "anthropic"),
        ("a", "openai"),
        ("b", "openai"),
    ]
    assert sorted((r.provider, r.model, r.api, r.samples) for r in rows) == [
        ("a", "up-a", "anthropic", 3),
        ("a", "up-a", "openai", 3),
        ("b", "up-b", "openai", 3),
    ]
    assert {k: p["n"] for k, p in priors.items()} == {("a", "up-a"): 3, ("b", "up-b"): 3}


async def test_an_anthropic_target_without_an_endpoint_is_refused(sim: SimFactory) -> None:
    """A target asking for the Anthropic endpoint of a provider that has none fails at construction, naming it."""
    a = await sim("instant")
    cfg = _config(a.url, a.url)
    with pytest.raises(ValueError, match="without anthropic_base_url: b"):
        Monitor(resolve_providers(cfg), [Target("b", "up-b", "anthropic")], SampleStore(Path("unused.db")))
    with pytest.raises(ValueError, match="unknown api"):
        targets_from_config(cfg, resolve_providers(cfg), ("grpc",))


def test_cli_api_anthropic_once_and_leaderboard_json(threaded_sim: Callable[..., ThreadedSim], tmp_path: Path) -> None:
    """``tailgate monitor --api anthropic --once`` probes /v1/messages only; ``leaderboard --json`` has ``api``.
    With no provider that has an anthropic_base_url, ``--api anthropic`` exits 2 saying so."""
    sim = threaded_sim("instant")
    root = sim.url.removesuffix(ROOT_SUFFIX)
    config = tmp_path / "gw.yaml"
    config.write_text(
        "providers:\n"
        f"  fast: {{base_url: '{sim.url}', anthropic_base_url: '{root}', api_keys: ['sk-test-0123456789']}}\n"
        "models:\n  m:\n    routes:\n      - {provider: fast, model: up-fast}\n"
    )
    db = tmp_path / "p.db"
    result = CliRunner().invoke(
        main, ["monitor", "--config", str(config), "--once", "--db", str(db), "--api", "anthropic"]
    )
    assert result.exit_code == 0, result.output
    assert "round 0: 3 probes, 3 ok" in result.output
    assert "fast (anthropic)" in result.output
    with closing(open_db(db)) as conn:
        assert {s.api for s in read_samples(conn)} == {"anthropic"}
    result = CliRunner().invoke(main, ["leaderboard", "--db", str(db), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    table = CliRunner().invoke(main, ["leaderboard", "--db", str(db)])
    assert table.exit_code == 0, table.output
    assert "fast (anthropic)" in table.output
    assert [(r["provider"], r["api"], r["samples"]) for r in doc["rows"] if r["samples"]] == [("fast", "anthropic", 3)]

    plain = tmp_path / "plain.yaml"
    plain.write_text(
        f"providers:\n  fast: {{base_url: '{sim.url}'}}\n"
        "models:\n  m:\n    routes:\n      - {provider: fast, model: x}\n"
    )
    result = CliRunner().invoke(
        main, ["monitor", "--config", str(plain), "--once", "--db", str(tmp_path / "q.db"), "--api", "anthropic"]
    )
    assert result.exit_code == 2, result.output
    assert "no routed provider has an anthropic_base_url" in result.output
