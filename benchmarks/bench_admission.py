"""Claim: a key's admission and settlement on the local state cost a few µs of the gateway's request.

Every request made with a key that has limits reserves its tpm, budgets and concurrency slot at admission
(``KeyAdmission.admit``) and corrects them when it ends (``KeyAdmission.settle``). This runs both, in one
process, for a key with a tpm, a daily token budget, a monthly money budget and ``max_concurrency``
(the benchmark key of ``gateway_overhead.py``), through two states in the same run:

- ``generic``: the ``SharedState`` protocol's path, as any backend with round trips takes it (awaited
  ``reserve``, one settlement task per request) — a state that forwards to ``LocalState`` but is not one;
- ``local``: the local backend's path (``reserve`` answered in one call by ``reserve_now``; ``settle_now``:
  no task).

Reported: CPU µs per admitted and settled request (``time.process_time``), median of ``--rounds``
interleaved rounds, and local ÷ generic. Target: local ≤ 0.8 × generic. Correctness (exit 1): every
request admitted, and after all settled the key's counters hold exactly what was settled and no slot.

Usage: ``.venv/bin/python benchmarks/bench_admission.py [--rounds N] [--requests N] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from tailgate.gateway.access.key_directory import KeyDirectory, KeyLimits
from tailgate.gateway.request_path.admission import KeyAdmission
from tailgate.state import Admission, Backend, Lease, LocalState, SharedState, StateStatus

LIMITS = KeyLimits("team", tpm=1e12, max_concurrency=100_000, tokens_per_day=10**14, cost_per_month=1e9)


class Forwarding(SharedState):
    """Every abstract method forwarded to a ``LocalState``; reserve and settle are the protocol's own."""

    backend: Backend = "local"

    def __init__(self) -> None:
        self.inner = LocalState()
        self.replica = self.inner.replica

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def status(self) -> StateStatus:
        return self.inner.status()

    async def take(self, name: str, amount: float, limit: float, window_s: float | None) -> Admission:
        return self.inner.take_now(name, amount, limit, window_s)

    async def adjust(self, name: str, delta: float, window_s: float | None, bucket: int | None = None) -> float:
        return self.inner.adjust_now(name, delta, window_s, bucket)

    async def usage(self, name: str, window_s: float | None) -> float:
        return await self.inner.usage(name, window_s)

    async def acquire(self, name: str, limit: int, ttl_s: float = 600.0) -> Lease:
        return self.inner.acquire_now(name, limit, ttl_s)

    async def release(self, name: str, token: str) -> None:
        self.inner.release_now(name, token)


def _forward(name: str) -> object:
    def method(self: Forwarding, *args: object, **kwargs: object) -> object:
        return getattr(self.inner, name)(*args, **kwargs)

    return method


# Generations, pauses, flags, peers: not used by admission; forwarded as they are.
for _name in Forwarding.__abstractmethods__:
    setattr(Forwarding, _name, _forward(_name))
Forwarding.__abstractmethods__ = frozenset()


async def run(state: SharedState, requests: int) -> float:
    directory = KeyDirectory(None, [])
    directory.limits = lambda key_id: LIMITS  # type: ignore[method-assign]
    admission = KeyAdmission(directory, lambda: state, CollectorRegistry())
    t0 = time.process_time()
    for _ in range(requests):
        ticket = await admission.admit("team", "bench", 30, 20, (2.0, 3.0))
        assert ticket is not None
        admission.settle(ticket, 25, 15, 0.0001)
        await asyncio.sleep(0)  # a loop turn per request, as in the gateway (settlement tasks run here)
    cpu = time.process_time() - t0
    await admission.close()
    local = state if isinstance(state, LocalState) else state.inner  # type: ignore[attr-defined]
    used = await local.usage("key:team:tpm", 60.0)
    if abs(used - 40 * requests) > 1e-6 * requests or local._gauges.get("key:team:concurrency"):
        raise SystemExit(f"CORRECTNESS FAILURE: tpm {used} (expected {40 * requests}) or a slot still held")
    return cpu / requests * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="1 round of 2,000; the target printed, not enforced")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.requests = 1, 2_000
    results: dict[str, list[float]] = {"generic": [], "local": []}
    for r in range(args.rounds):
        for name in ("generic", "local") if r % 2 == 0 else ("local", "generic"):
            state = Forwarding() if name == "generic" else LocalState()  # type: ignore[abstract]
            us = asyncio.run(run(state, args.requests))
            results[name].append(us)
            print(f"  round {r + 1} {name:8} {us:6.1f} µs CPU per admitted + settled request")
    generic, local = statistics.median(results["generic"]), statistics.median(results["local"])
    ratio = local / generic
    print(f"generic {generic:.1f} µs, local {local:.1f} µs: local / generic {ratio:.3f} (target <= 0.8)")
    print("all correctness checks passed" + ("" if ratio <= 0.8 else "; target missed"))
    return 0 if ratio <= 0.8 or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
