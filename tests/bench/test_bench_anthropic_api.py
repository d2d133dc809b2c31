"""`tailgate bench --api anthropic` load-tests an Anthropic-protocol endpoint directly (issue 32): TTFT is the first
content of any kind (a thinking delta), the answer TTFT the first text, tokens from the events' usage — checked
against the simulator's own truth of the same requests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from conftest import ThreadedSim
from sim_truth import truth_sync
from tailgate.bench.loadgen import anthropic_body
from tailgate.cli import main

THINKING = {"pre_median_s": 0.0, "step_ms": 2.0, "jitter": 0.0, "default_output_tokens": 10, "reasoning_median": 8}


def _truth(p: ThreadedSim) -> list[dict[str, Any]]:
    return sorted(truth_sync(p.url), key=lambda rec: float(rec["received_at"]))


def test_bench_measures_an_anthropic_endpoint(threaded_sim: Callable[..., ThreadedSim], tmp_path: Path) -> None:
    """8 streamed requests to the simulator's /v1/messages (the API root as --base-url, as ANTHROPIC_BASE_URL is
    given): every request reached it in Anthropic's protocol, the output tokens are the simulator's count, thinking
    came before the answer (answer TTFT later than TTFT), reasoning tokens are counted."""
    p = threaded_sim("reasoner", models=("m",), engine=THINKING)
    out = tmp_path / "r.json"
    args = ["bench", "--api", "anthropic", "--base-url", p.url.removesuffix("/v1"), "--model", "m"]
    args += ["--concurrency", "2", "--requests", "8", "--duration", "0", "--warmup", "0", "--max-tokens", "64"]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    run = json.loads(out.read_text())["runs"][0]
    assert run["target"]["api"] == "anthropic"
    assert run["successes"] == 8
    assert sum(run["errors"].values()) == 0
    truth = _truth(p)
    assert [rec["api"] for rec in truth] == ["anthropic"] * 9  # the preflight's request, then the run's 8
    assert run["tokens"]["output"] == sum(int(rec["output_tokens"]) for rec in truth[1:])
    assert run["tokens"]["estimated"] is False
    assert run["tokens"]["reasoning"] > 0
    ttft, answer = run["metrics"]["ttft_ms"], run["metrics"]["ttft_answer_ms"]
    assert ttft["count"] == answer["count"] == 8
    assert answer["p50"] > ttft["p50"]
    assert run["metrics"]["itl_ms"]["count"] > 0


def test_preflight_stops_at_an_endpoint_without_the_messages_api(
    threaded_sim: Callable[..., ThreadedSim],
) -> None:
    """A provider that does not serve /v1/messages (provider-b: chat only, 404 there) stops the command before the
    run with one clear line (exit 2), not a run of errors."""
    p = threaded_sim("provider-b", models=("m",))
    args = ["bench", "--api", "anthropic", "--base-url", p.url.removesuffix("/v1"), "--model", "m", "--requests", "5"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "404" in result.output


def test_a_chat_body_said_in_the_messages_api() -> None:
    """The workload's chat body becomes a Messages API body: system out of the turns, max_tokens kept."""
    chat = {
        "model": "m",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "max_tokens": 7,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert anthropic_body(chat) == {
        "model": "m",
        "max_tokens": 7,
        "messages": [{"role": "user", "content": "hi"}],
        "system": "be brief",
        "stream": True,
    }
    assert anthropic_body({"model": "m", "messages": []})["max_tokens"] == 1024
