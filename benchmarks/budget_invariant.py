"""Claim: a key's daily token budget holds for concurrent requests of every shape (issue 37, docs/keys.md).

Runs ``tests/budget_run.py``'s check at volume: batches of random requests (chat or ``/v1/messages`` passthrough
or translated; CJK, emoji, code or English prompts; ``n``; stream or not; cut by the client after a random number
of chunks or by the provider) through a fresh gateway per batch whose key has a small daily budget, on the local
and/or the Redis state. Per request id the ledger must equal the simulator's truth, the budget counter the
ledger, and the spend stay within the budget.

Reported: requests, admitted, outcomes, the worst overshoot (tokens spent past the budget: the promise is 0) and
the spend's distance below the budget at the end of each batch (the promise: at most one request's
reservation when the budget was reached). Exit 1 on any mismatch or overshoot.

Usage: ``.venv/bin/python benchmarks/budget_invariant.py [--backend local|redis|both] [--batches N] [--seed S]``
(a batch is 25 requests; both backends at 40 batches each is ~2,000 requests).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from budget_run import SCRIPTS, Shape, Verdict, run_batch  # noqa: E402
from tailgate.state.server import RedisServer  # noqa: E402


def shape(rng: random.Random) -> Shape:
    stream = rng.random() < 0.6
    return Shape(
        api=rng.choice(["chat", "pass", "trans"]),
        script=rng.choice(sorted(SCRIPTS)),
        repeat=rng.randint(1, 12),
        n=rng.choice([1, 1, 2, 3]),
        stream=stream,
        max_tokens=rng.randint(1, 60),
        cut=rng.choice(["none", "client", "provider"]) if stream else "none",
        cut_at=rng.randint(1, 30),
    )


def run(backend: str, batches: int, size: int, budget: int, seed: int, redis_url: str | None) -> list[Verdict]:
    rng = random.Random(seed)
    out = []
    for _ in range(batches):
        out.append(asyncio.run(run_batch([shape(rng) for _ in range(size)], budget, redis_url)))
    return out


def report(backend: str, verdicts: list[Verdict], wall: float) -> bool:
    outcomes: Counter[str] = Counter()
    for v in verdicts:
        outcomes.update(v.outcomes)
    bad = [m for v in verdicts for m in v.mismatches]
    slack = [v.budget - v.spent for v in verdicts if v.outcomes.get("budget_exceeded")]
    print(
        f"{backend}: {sum(v.requests for v in verdicts)} requests in {len(verdicts)} batches ({wall:.1f} s), "
        f"{sum(v.admitted for v in verdicts)} admitted; worst overshoot {max(v.overshoot for v in verdicts)} tokens; "
        f"spend below the budget where it refused: min {min(slack, default=0)} / max {max(slack, default=0)}; "
        f"mismatches {len(bad)}"
    )
    print("  outcomes: " + ", ".join(f"{k} {n}" for k, n in outcomes.most_common()))
    for m in bad[:10]:
        print("  MISMATCH " + m)
    return not bad and all(v.overshoot == 0 for v in verdicts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--backend", choices=["local", "redis", "both"], default="both")
    ap.add_argument("--batches", type=int, default=40, help="batches per backend")
    ap.add_argument("--size", type=int, default=25, help="requests per batch")
    ap.add_argument("--budget", type=int, default=3000, help="the key's tokens_per_day")
    ap.add_argument("--seed", type=int, default=37)
    args = ap.parse_args(argv)
    ok = True
    backends = ["local", "redis"] if args.backend == "both" else [args.backend]
    for backend in backends:
        t0 = time.perf_counter()
        if backend == "redis":
            with RedisServer() as server:
                verdicts = run(backend, args.batches, args.size, args.budget, args.seed, server.url)
        else:
            verdicts = run(backend, args.batches, args.size, args.budget, args.seed, None)
        ok &= report(backend, verdicts, time.perf_counter() - t0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
