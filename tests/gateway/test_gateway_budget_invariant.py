"""The budget promise as a property (issue 37, docs/keys.md "The prompt bound"): concurrent requests of random
shape — chat or ``/v1/messages`` passthrough or translated, CJK / emoji / code / English prompts, ``n``, stream or
not, cut by the client after a random number of chunks or by the provider — against a small daily budget, on the
local and the Redis state. Per request id the ledger equals the simulator's truth (tests/budget_run.py); the key
never spends past its budget. The 2,000-request run: benchmarks/budget_invariant.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budget_run import SCRIPTS, Shape, run_batch

BUDGET = 3000


def shapes() -> st.SearchStrategy[Shape]:
    """One request of random shape (a client cut only on a stream, a provider cut only where a stream is cut)."""
    return st.builds(
        Shape,
        api=st.sampled_from(["chat", "pass", "trans"]),
        script=st.sampled_from(sorted(SCRIPTS)),
        repeat=st.integers(1, 12),
        n=st.integers(1, 3),
        stream=st.booleans(),
        max_tokens=st.integers(1, 60),
        cut=st.sampled_from(["none", "client", "provider"]),
        cut_at=st.integers(1, 30),
    ).map(lambda s: s if s.stream else replace(s, cut="none"))


BATCHES = st.lists(shapes(), min_size=15, max_size=25)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["local", "redis"])
def test_concurrent_requests_of_every_shape_stay_within_the_budget_and_match_the_truth(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """~100 requests per backend in concurrent batches: ledger = simulator truth per request id, spend ≤ budget,
    the budget counter = the ledger."""
    redis_url = request.getfixturevalue("redis_server").url if backend == "redis" else None
    seen: list[int] = []

    @settings(
        max_examples=5,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(BATCHES)
    def batch(shapes: list[Shape]) -> None:
        verdict = asyncio.run(run_batch(shapes, BUDGET, redis_url))
        seen.append(verdict.requests)
        assert verdict.mismatches == [], verdict.mismatches[:5]
        assert verdict.spent <= BUDGET, verdict
        assert verdict.overshoot == 0

    batch()
    assert sum(seen) >= 75
