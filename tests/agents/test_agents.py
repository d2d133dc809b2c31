"""The real coding agents (pinned npm packages) through a real ``tailgate serve`` over the simulator: each
session ends with a text answer after one tool round trip (the agent reads a file the simulator asks for), and
every turn of a session stays on one route and one upstream key (conversation affinity, docs/gateway.md,
"Coding agents' sessions"). The ten-session run per agent and route kind is ``benchmarks/agents.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _require import require_agent
from agent_sessions import Session, Stack, cleanup, run_session, workspace
from tailgate.ledger import read_rows
from tailgate.ledger.row import LedgerRow


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    cleanup(tmp_path)


def _session(agent: str, kind: str, root: Path) -> tuple[Session, list[LedgerRow], list[dict[str, Any]]]:
    require_agent(agent)
    work = workspace(root)
    stack = Stack(root, kind).start(work / "notes.txt")
    try:
        session = run_session(agent, stack, work, timeout=60)
        truth = stack.truth()
    finally:
        stack.stop()  # the gateway flushes its ledger as it stops
    assert session.rc == 0, session.stderr[-2000:]
    return session, read_rows(root / "ledger.db"), truth


def _one_route(rows: list[LedgerRow], truth: list[dict[str, Any]]) -> None:
    """Every turn answered, on one route and one upstream key; the ledger's tokens are the simulator's."""
    assert rows
    assert all(r.status == 200 for r in rows), [(r.status, r.outcome) for r in rows]
    assert len({r.provider for r in rows}) == 1, [r.provider for r in rows]
    assert all(r.key_id == "agents" for r in rows)
    # The gateway's own health probes (request ids ``probe-…``; the adaptive policy probes a route it holds below
    # half its weight, which a loaded machine's latencies can cause) reach the simulators too: not agent turns.
    truth = [t for t in truth if not str(t["client_request_id"]).startswith("probe-")]
    assert len({t["api_key_tail"] for t in truth}) == 1, [t["api_key_tail"] for t in truth]
    served = {t["client_request_id"]: (t["prompt_tokens"], t["output_tokens"], t["cached_tokens"]) for t in truth}
    assert {r.request_id: (r.prompt_tokens, r.output_tokens, r.cached_tokens or 0) for r in rows} == served


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["passthrough", "translated"])
def test_claude_code_session_reads_a_file_and_answers(kind: str, root: Path) -> None:
    """Claude Code (``claude -p``): a Read tool round trip then a text result, through a passthrough route
    (native /v1/messages) and a translated one (OpenAI chat)."""
    session, rows, truth = _session("claude", kind, root)
    assert session.saw_tool_result
    assert session.final_text()
    _one_route(rows, truth)
    assert {r.api for r in rows} == {"anthropic"}
    assert len(rows) >= 2  # the tool call's turn and the answer's


@pytest.mark.timeout(120)
def test_qwen_code_session_sticks_to_one_route(root: Path) -> None:
    """Qwen Code (``qwen -p``, OpenAI chat) over a 50/50 alias: its read_file round trip and its answer go to
    one route (it sends no session id: the stable-prefix key), the second turn hitting the first's cache."""
    session, rows, truth = _session("qwen", "split", root)
    assert session.saw_tool_result
    assert session.final_text()
    _one_route(rows, truth)
    assert len(rows) >= 2
    assert max(r.cached_tokens or 0 for r in rows) > 0  # the second turn found the first's prefix cached


@pytest.mark.timeout(120)
def test_codex_exec_session_answers_over_responses(root: Path) -> None:
    """Codex CLI (``codex exec``, wire_api responses) over a 50/50 alias: a read in its read-only sandbox
    (``exec_command``), then an agent message, every turn on one route (the session id in its turn metadata)."""
    session, rows, truth = _session("codex", "split", root)
    assert session.saw_tool_result
    assert session.final_text()
    assert len(rows) >= 2
    _one_route(rows, truth)
    assert {r.endpoint for r in rows} == {"responses"}
