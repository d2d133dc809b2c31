"""The real coding agents through ``tailgate serve`` over the simulator, ten sessions each (issue 38's must-show).

    PYTHONPATH=src .venv/bin/python benchmarks/agents.py [--sessions N]

Claude Code through a passthrough route, a translated route and a 50/50 alias of both; Codex CLI (``/v1/responses``)
and Qwen Code (chat) through a 50/50 alias. Per agent and route kind: sessions failed, sessions with a tool round
trip (the file's text came back in a tool result), the share of each session's turns on its most used (route,
upstream key), and whether the ledger of the agents' key equals the simulator's truth per request id (prompt,
output and cached tokens). Each kind has its own simulator and gateway; the kinds run side by side, a kind's
sessions one after another (a session's ledger rows are those that arrived while it ran). The agents are found
as the tests find them (tests/agent_sessions.py: ``$TAILGATE_AGENTS_DIR``).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from agent_sessions import Stack, agent_program, cleanup, run_session, workspace
from tailgate.ledger import read_rows

KINDS = (
    ("claude", "passthrough"),
    ("claude", "translated"),
    ("claude", "split"),
    ("codex", "split"),
    ("qwen", "split"),
)


@dataclass
class Result:
    agent: str
    kind: str
    sessions: int = 0
    failed: list[str] = field(default_factory=list)
    tool_trips: int = 0
    turns: int = 0
    one_route_shares: list[float] = field(default_factory=list)
    ledger_equal: int = 0
    ledger_rows: int = 0
    cached_rows: int = 0
    seconds: list[float] = field(default_factory=list)


def _run_kind(agent: str, kind: str, n: int, out: Result, base: Path) -> None:
    root = workspace(base)
    windows: list[tuple[float, float]] = []
    stack = Stack(root, kind).start(root / "notes.txt")  # the file the simulator asks every session to read
    try:
        for i in range(n):
            t0 = time.time()
            prompt = f"Read notes.txt and tell me what it says. This is session {i}."  # one conversation each
            try:
                session = run_session(agent, stack, root, timeout=120, prompt=prompt)
            except Exception as exc:  # a timeout is a failed session, with its reason
                out.failed.append(f"session {i}: {exc!r}")
                windows.append((t0, time.time()))
                continue
            windows.append((t0, time.time()))
            out.sessions += 1
            out.seconds.append(session.seconds)
            final = session.final_text() if session.rc == 0 else None
            if not final:
                out.failed.append(f"session {i}: rc {session.rc}: {session.stderr[-300:]!r}")
            if session.saw_tool_result:
                out.tool_trips += 1
        truth = {t["client_request_id"]: t for t in stack.truth()}
    finally:
        stack.stop()
    rows = read_rows(root / "ledger.db")
    for t0, t1 in windows:
        mine = [r for r in rows if t0 <= r.ts <= t1 + 0.5]
        out.turns += len(mine)
        if mine:
            places = Counter((r.provider, (truth.get(r.request_id) or {}).get("api_key_tail")) for r in mine)
            out.one_route_shares.append(places.most_common(1)[0][1] / len(mine))
    for r in rows:
        out.ledger_rows += 1
        t = truth.get(r.request_id)
        if t is not None and (r.prompt_tokens, r.output_tokens, r.cached_tokens or 0) == (
            t["prompt_tokens"],
            t["output_tokens"],
            t["cached_tokens"],
        ):
            out.ledger_equal += 1
        if r.cached_tokens:
            out.cached_rows += 1
    cleanup(root)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10)
    args = ap.parse_args(argv)
    missing = [a for a in {a for a, _ in KINDS} if not agent_program(a).exists()]
    if missing:
        print(f"agents missing: {missing} (install them as .ci/run does)", file=sys.stderr)
        return 2
    base = Path(workspace())
    results = [Result(a, k) for a, k in KINDS]
    t0 = time.monotonic()
    threads = [threading.Thread(target=_run_kind, args=(r.agent, r.kind, args.sessions, r, base)) for r in results]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    print(f"{args.sessions} sessions per agent and route kind, {wall:.0f} s wall (the kinds side by side)")
    header = (
        "| agent | route kind | sessions | failed | tool round trips | turns | turns on the session's route+key"
        " (min / mean) | ledger = truth (rows) | rows with cached tokens | s per session (median) |"
    )
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    ok = True
    for r in results:
        shares = r.one_route_shares or [0.0]
        med = sorted(r.seconds)[len(r.seconds) // 2] if r.seconds else 0.0
        print(
            f"| {r.agent} | {r.kind} | {r.sessions} | {len(r.failed)} | {r.tool_trips} | {r.turns} | "
            f"{min(shares):.0%} / {sum(shares) / len(shares):.0%} | {r.ledger_equal} of {r.ledger_rows} | "
            f"{r.cached_rows} | {med:.1f} |"
        )
        ok = ok and not r.failed and r.ledger_equal == r.ledger_rows and min(shares) >= 0.95
    for r in results:
        for f in r.failed[:3]:
            print(f"failed ({r.agent}, {r.kind}): {f}")
    cleanup(base)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
