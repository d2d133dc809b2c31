"""What conversation affinity adds to a request's routing decision (issue 28): the affinity key of an 8k-token
prompt (the stable prefix hashed, not tokenized) + weighted rendezvous + the bounds (a hot key's; a client key's
share, issue 37), beside the routing decision without it (the adaptive policy's ``order``), in the same process
and interleaved rounds.

    .venv/bin/python benchmarks/affinity_cost.py [--quick] [--rounds N]

Prints µs of this process's CPU time per request (the median and the best of the rounds) and the added cost;
the target is ≤ 5 µs added at 8k tokens.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from tailgate.routing import AdaptivePolicy, Affinity, AffinitySettings, HealthRegistry, Sticky
from tailgate.routing.route import Route
from tailgate.upstream import KeyPool

SYSTEM = "You are a writing assistant. Keep the author's voice; answer with the revised paragraph only. " * 4


def _body(chars_per_token: float, text: str) -> dict[str, Any]:
    """A writing assistant's turn with ~8,000 prompt tokens: system, the document, a history of six turns."""
    doc = (text * (int(8000 * chars_per_token) // len(text) + 1))[: int(7000 * chars_per_token)]
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": doc}]
    for t in range(6):
        messages += [
            {"role": "assistant", "content": f"Revised paragraph {t}. " + text[: int(80 * chars_per_token)]},
            {"role": "user", "content": f"Now tighten paragraph {t + 1}, keep the imagery."},
        ]
    return {"model": "writer", "messages": messages, "max_tokens": 512, "stream": True}


def _per_call(fn: Callable[[], object], n: int) -> float:
    t0 = time.process_time()  # this process's CPU time: other processes on a shared machine do not count
    for _ in range(n):
        fn()
    return (time.process_time() - t0) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 9)
    n = 2000 if args.quick else 20000

    routes = (Route("writer", "primary", "up-a", 80.0), Route("writer", "secondary", "up-b", 20.0))
    policy = AdaptivePolicy(HealthRegistry())
    aff = Affinity(AffinitySettings())
    pool = KeyPool([f"sk-{i:04d}" for i in range(4)])
    bodies = {
        "ascii": _body(4.0, "The harbour town wakes before dawn; gulls argue over the nets. "),
        "chinese": _body(1.0, "港口小镇在黎明前醒来，海鸥在渔网上争吵。作者希望保留原有的语气。"),
    }
    # 64 conversations of each (their documents' first line differs), taken in turn: ordinary traffic, no hot key
    variants: dict[str, list[dict[str, Any]]] = {}
    for name, body in bodies.items():
        variants[name] = []
        for v in range(64):
            msgs = [dict(m) for m in body["messages"]]
            msgs[1]["content"] = f"Conversation {v}. " + msgs[1]["content"]
            variants[name].append({**body, "messages": msgs})
    header: dict[str, str] = {}
    session = {"x-session-id": "conversation-42"}

    def baseline() -> object:
        return policy.order(routes, None, ())

    cases: dict[str, Callable[[], object]] = {"routing baseline (adaptive order)": baseline}
    for name, body in bodies.items():
        chars = sum(len(m["content"]) for m in body["messages"])

        turn = itertools.cycle(variants[name])

        def with_affinity(turn: Iterator[dict[str, Any]] = turn, chars: int = chars) -> object:
            key = aff.key(header, next(turn), chars / 4)
            assert key is not None
            order = policy.order(routes, None, (), Sticky(aff, key))
            return order, pool.pick(key)

        def key_only(turn: Iterator[dict[str, Any]] = turn, chars: int = chars) -> object:
            return aff.key(header, next(turn), chars / 4)

        cases[f"+ affinity, 8k-token {name} prompt (key + HRW + bound + upstream key)"] = with_affinity
        cases[f"  the key alone, {name}"] = key_only
    body0 = bodies["ascii"]
    cases["+ affinity, x-session-id header"] = lambda: policy.order(
        routes, None, (), Sticky(aff, aff.key(session, body0, 8000) or 0)
    )
    # Coding agents (issue 38): Claude Code's session header, its metadata.user_id (a JSON string: the session id
    # parsed out), Codex's x-codex-turn-metadata (JSON)
    sid = "5f0c1d52-8a3e-4d7b-9c61-2b7f0e4a9d13"
    claude_body = {
        **body0,
        "metadata": {"user_id": f'{{"device_id":"{"d" * 64}","account_uuid":"","session_id":"{sid}"}}'},
    }
    agents: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
        "Claude Code x-claude-code-session-id header": ({"x-claude-code-session-id": sid}, body0),
        "Claude Code metadata.user_id (JSON)": (header, claude_body),
        "Codex x-codex-turn-metadata (JSON)": (
            {"x-codex-turn-metadata": f'{{"session_id":"{sid}","turn_id":"7"}}'},
            body0,
        ),
    }
    for label, (hdrs, agent_body) in agents.items():

        def agent(h: dict[str, str] = hdrs, b: dict[str, Any] = agent_body) -> object:
            return policy.order(routes, None, (), Sticky(aff, aff.key(h, b, 8000) or 0))

        cases[f"+ affinity, {label}"] = agent
    # The tenant's share bound on top (issue 37): 4,096 sessions (no hot key) without a client key, and the same
    # sessions from 64 client keys in turn (each key's share counted and checked)
    sessions = [(f"tenant-{t}", {"x-session-id": f"t{t}-s{s}"}) for s in range(64) for t in range(64)]

    def spread(tenant_key: bool) -> Callable[[], object]:
        turn = itertools.cycle(sessions)
        aff_t = Affinity(AffinitySettings())

        def run() -> object:
            tenant, headers = next(turn)
            sticky = Sticky(aff_t, aff_t.key(headers, body0, 8000) or 0, tenant if tenant_key else None)
            return policy.order(routes, None, (), sticky)

        return run

    cases["+ affinity, x-session-id header, 4,096 sessions, no client key"] = spread(False)
    cases["+ affinity, the same from 64 client keys (+ each key's share bound)"] = spread(True)

    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):  # interleaved: each round runs every case once
        for name, fn in cases.items():
            fn()
            samples[name].append(_per_call(fn, n))
    base = statistics.median(samples["routing baseline (adaptive order)"])
    best_base = min(samples["routing baseline (adaptive order)"])
    print(f"affinity cost per request, {rounds} rounds x {n} calls (python {sys.version.split()[0]})")
    print("median and best (the least disturbed) round; added = the case minus the baseline, same statistic")
    print(f"{'case':<78} {'median us':>9} {'added':>6} {'best us':>8} {'added':>6}")
    for name, vals in samples.items():
        med, best = statistics.median(vals), min(vals)
        plain = name.startswith(("routing", "  "))
        added = "" if plain else f"{med - base:6.2f}"
        added_best = "" if plain else f"{best - best_base:6.2f}"
        print(f"{name:<78} {med:9.2f} {added:>6} {best:8.2f} {added_best:>6}")
    sizes = {k: sum(len(m["content"]) for m in b["messages"]) for k, b in bodies.items()}
    print(f"prompt sizes: {', '.join(f'{k} {v:,} characters' for k, v in sizes.items())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
